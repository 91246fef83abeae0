use fgtrace::traced;

#[traced]
pub struct Parser {
    depth: u32,
}

#[traced]
trait Visit {
    fn visit(&self) {}
}

fn main() {}
