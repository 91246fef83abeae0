use fgtrace::traced;

#[traced(nmae = "parse")]
fn parse() {}

fn main() {}
