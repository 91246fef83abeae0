use fgtrace::traced;

#[traced]
fn sync_body() -> u32 {
    let n: u32 = "not a number";
    n
}

#[traced]
async fn async_body() -> u32 {
    let n = 1u64;
    n
}

#[traced]
async fn async_question_mark() -> Option<u32> {
    let n: u32 = "1".parse()?;
    Some(n)
}

struct S;

#[traced]
impl S {
    fn method(&self) -> String {
        self
    }
}

fn main() {}
