use fgtrace::testing::budget;

#[fgtrace::traced]
fn work() {}

#[budget(crate = 5, work(calls = 1))]
fn numbered() {
    work();
}

#[budget(crate = fgtrace, work(calls = 1))]
#[budget(crate = fgtrace, work(max = "1s"))]
fn twice() {
    work();
}

#[budget(krate = fgtrace, work(calls = 1))]
fn misspelt() {
    work();
}

fn main() {}
