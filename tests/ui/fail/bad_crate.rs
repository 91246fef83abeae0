use fgtrace::{notrace, traced};

#[traced(crate = 5)]
fn numbered() {}

#[traced(crate = "fgtrace")]
fn quoted() {}

#[traced(crate = fgtrace, name = "twice", crate = fgtrace)]
fn twice() {}

struct S;

#[traced(crate = fgtrace)]
impl S {
    #[notrace(crate = 5)]
    fn skipped(&self) {}
}

#[notrace(crate = fgtrace, crate = fgtrace)]
fn notrace_twice() {}

#[notrace(skip)]
fn notrace_unknown() {}

fn main() {}
