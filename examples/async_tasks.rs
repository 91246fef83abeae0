//! Async tasks on tokio, traced with `#[traced] async fn`: every poll is
//! tied to its future, and each future measures its own busy time (in
//! polls), scheduled time (woken, waiting for a poll) and wakes. One task
//! blocks its worker thread with a 20 ms `std::thread::sleep` inside a
//! poll, the commonest async performance bug: the report's async section
//! shows it as the longest poll, and the tasks queued behind it as
//! scheduled time.
//!
//! ```text
//! cargo run --release --example async_tasks [TASKS]
//! ```
//!
//! Writes `target/fgtrace-demo/async_tasks.fgt` (or under `$FGTRACE_OUT`)
//! and prints the report's async section.

use fgtrace::view::report::ReportOptions;
use fgtrace::view::TraceViews;
use std::path::PathBuf;
use std::time::Duration;

/// Simulated I/O: a timer, then some parsing on the worker.
#[fgtrace::traced]
async fn fetch(key: u64) -> u64 {
    tokio::time::sleep(Duration::from_micros(200 + key % 5 * 100)).await;
    parse(key)
}

#[fgtrace::traced]
fn parse(key: u64) -> u64 {
    (0..20_000u64).fold(key, |a, x| {
        std::hint::black_box(a.wrapping_mul(31).wrapping_add(x))
    })
}

/// A request: four fetches, yielding to the other tasks between them.
#[fgtrace::traced]
async fn handle(id: u64) -> u64 {
    let mut sum = 0u64;
    for k in 0..4 {
        sum = sum.wrapping_add(fetch(id * 4 + k).await);
        tokio::task::yield_now().await;
    }
    sum
}

/// Blocks its worker thread for 20 ms inside one poll.
#[fgtrace::traced]
async fn compact() {
    tokio::task::yield_now().await;
    std::thread::sleep(Duration::from_millis(20));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let out_dir = PathBuf::from(
        std::env::var("FGTRACE_OUT").unwrap_or_else(|_| "target/fgtrace-demo".into()),
    );
    std::fs::create_dir_all(&out_dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()?;

    let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
    let sum = rt.block_on(async {
        let tasks: Vec<_> = (0..n).map(|id| tokio::spawn(handle(id))).collect();
        let blocker = tokio::spawn(compact());
        let mut sum = 0u64;
        for t in tasks {
            sum = sum.wrapping_add(t.await.unwrap_or(0));
        }
        blocker.await.ok();
        sum
    });
    let trace = session.stop()?;
    std::hint::black_box(sum);

    let path = out_dir.join("async_tasks.fgt");
    trace.save(&path)?;
    let mut report = Vec::new();
    trace.write_report(&ReportOptions::default(), &mut report)?;
    let report = String::from_utf8_lossy(&report);
    let m = trace.meta();
    println!(
        "{n} requests and a blocking task on 2 workers: {} calls on {} threads",
        m.total_calls(),
        m.threads.len()
    );
    println!("trace: {}\n", path.display());
    // The report's async section.
    if let Some(at) = report.find("# async futures") {
        print!("{}", &report[at..]);
    }
    Ok(())
}
