use fgtrace::traced;

#[traced(name = 42)]
fn numbered() {}

#[traced(name = "")]
fn empty() {}

#[traced(prefix = "P")]
fn prefixed() {}

struct S;

#[traced(name = "S")]
impl S {
    fn method(&self) {}
}

fn main() {}
