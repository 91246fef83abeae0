use fgtrace::traced;

// A path that does not lead to fgtrace is reported at the option.
#[traced(crate = fgt)]
fn parse() {}

#[traced(crate = fgt)]
async fn load() {}

fn main() {}
