//! A tokio service instrumented with `tracing`, traced by fgtrace.
//!
//! Its request handlers are `#[tracing::instrument] async fn`s (the spans a
//! service already has), two of its helpers are `#[fgtrace::traced]` fns,
//! and it logs with `tracing::info!`. `fgtrace::tracing::Layer` sits in the
//! `Registry` beside whatever else the program keeps, so one recording
//! holds all of it: the handlers' futures with their polls on whichever
//! worker ran them, the `#[traced]` helpers nested inside the polls, the
//! events as instant markers, and the sampled stacks under all of it.
//!
//! `cargo run --release --features tracing --example tracing_tokio [requests]`
//! (64 by default) saves `target/fgtrace-demo/tracing_tokio.fgt` and the
//! function graph beside it, and prints an excerpt; then, with the command
//! (`cargo run --release -p fgtrace-cli -- ...`):
//!
//! ```text
//! perfetto target/fgtrace-demo/tracing_tokio.fgt -o tokio.pftrace   # the futures' lanes
//! flame --combined target/fgtrace-demo/tracing_tokio.fgt -o flame.svg
//! ```

use fgtrace::view::TraceViews;
use std::path::PathBuf;
use std::time::Duration;
use tracing::instrument;
use tracing_subscriber::layer::SubscriberExt;

/// A CPU-bound helper: renders a page of `rows` rows.
#[fgtrace::traced(values(rows))]
fn render(user: u64, rows: u64) -> String {
    let mut page = String::new();
    for r in 0..rows {
        page.push_str(&format!("<tr><td>{user}</td><td>{}</td></tr>", checksum(r)));
    }
    page
}

/// A leaf helper, called many times per page.
#[fgtrace::traced]
fn checksum(x: u64) -> u64 {
    (0..20_000).fold(x, |h, i| h.rotate_left(5) ^ (h >> 3).wrapping_add(i))
}

/// Looks a user up: waits on "the database" (a timer), so the request's
/// future is polled more than once, maybe on another worker.
#[instrument]
async fn load_user(id: u64) -> u64 {
    tokio::time::sleep(Duration::from_millis(2 + id % 3)).await;
    id * 7
}

/// A request handler: an `#[instrument] async fn` with its argument as the
/// span's field (a value of its future in fgtrace).
#[instrument]
async fn handle(id: u64) -> usize {
    let user = load_user(id).await;
    tokio::task::yield_now().await;
    let page = render(user, 100 + id % 100);
    tracing::info!(bytes = page.len() as u64, "rendered");
    page.len()
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

    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(fgtrace::tracing::Layer::new()),
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()?;

    let config = fgtrace::Config::default().sampling(fgtrace::sampler::Sampling::timer(999));
    let session = fgtrace::Session::start(config)?;
    // The layer learns that a span callsite is async the first time one of
    // its spans is entered twice: one request first, then the others
    // concurrently, each recorded as a future.
    let bytes = rt.block_on(async {
        let mut bytes = tokio::spawn(handle(0)).await.unwrap_or(0);
        let tasks: Vec<_> = (1..n).map(|id| tokio::spawn(handle(id))).collect();
        for t in tasks {
            bytes += t.await.unwrap_or(0);
        }
        bytes
    });
    let trace = session.stop()?;

    let trace_path = out_dir.join("tracing_tokio.fgt");
    trace.save(&trace_path)?;
    let mut graph = Vec::new();
    trace.write_graph(&fgtrace::view::graph::GraphOptions::default(), &mut graph)?;
    let graph_path = out_dir.join("tracing_tokio.graph.txt");
    std::fs::write(&graph_path, &graph)?;

    let m = trace.meta();
    let futures = trace
        .events()
        .filter(|e| matches!(e, fgtrace::trace::Event::Future(_)))
        .count();
    let markers = trace
        .events()
        .filter(|e| matches!(e, fgtrace::trace::Event::Marker(_)))
        .count();
    println!(
        "{n} requests, {bytes} bytes rendered; recorded {} calls, {futures} futures, \
         {markers} events and {} samples on {} threads",
        m.total_calls(),
        m.threads.iter().map(|t| t.samples).sum::<u64>(),
        m.threads.len()
    );
    println!("trace: {}", trace_path.display());
    println!("graph: {}", graph_path.display());
    println!("\nfunction graph (a worker's first 30 lines):");
    let text = String::from_utf8_lossy(&graph);
    for line in text.lines().take(30) {
        println!("{line}");
    }
    // The report's async section: each `#[instrument] async fn` handler's
    // futures, polls, busy time and longest poll (a span does not see its
    // future's wakes: no scheduled time here; `#[traced] async fn`s have it,
    // see examples/async_tasks.rs).
    let mut report = Vec::new();
    trace.write_report(
        &fgtrace::view::report::ReportOptions::default(),
        &mut report,
    )?;
    let report = String::from_utf8_lossy(&report);
    if let Some(at) = report.find("# async futures") {
        println!("\n{}", &report[at..]);
    }
    Ok(())
}
