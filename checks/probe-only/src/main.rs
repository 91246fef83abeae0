//! What a user who only adds `#[traced]` writes: a traced function, a session,
//! a saved trace. The test beside it checks what this pulls in.

#[fgtrace::traced]
fn parse(input: &str) -> usize {
    input.split(',').count()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let session = fgtrace::Session::start(fgtrace::Config::default())?;
    let n: usize = (0..100).map(|_| parse("a,b,c")).sum();
    let trace = session.stop()?;
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "probe-only.fgt".into());
    trace.save(&out)?;
    println!(
        "{n} fields, {} calls recorded in {out}",
        trace.calls().count()
    );
    Ok(())
}
