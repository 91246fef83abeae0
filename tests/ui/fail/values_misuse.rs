use fgtrace::traced;

#[traced(values(a, b, c, d, e))]
fn five(a: u8, b: u8, c: u8, d: u8, e: u8) {}

#[traced(values(a, a = 1))]
fn twice(a: u8) {}

#[traced(values())]
fn empty() {}

#[traced(ret)]
fn unit() {}

#[traced(ret)]
fn opaque() -> impl Iterator<Item = u8> {
    std::iter::empty()
}

struct S;

#[traced(values(x = 1))]
impl S {
    fn f(&self) {}
}

fn main() {}
