//! Sampler stress: 4 threads in deep recursion (some levels traced), sampled
//! at 10 kHz, in back-to-back sessions, for 60 s by default:
//!
//! ```text
//! cargo run --release --example stress_sampler -- [seconds] [hz]
//! ```
//!
//! It checks, for every sample of every session, that the stack is not
//! garbage: every frame lies in an executable mapping of the process, the
//! walk is not empty, and samples taken inside the recursion contain the
//! recursive function's frames. It fails loudly (non-zero exit) otherwise;
//! a crash or a deadlock would show as a signal or a hang.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[inline(never)]
fn recurse(depth: u32, work: u64) -> u64 {
    if depth == 0 {
        let mut x = work;
        for i in 0..work * 50 {
            x = black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        return x;
    }
    if depth % 41 == 0 {
        traced_level(depth - 1, work)
    } else {
        black_box(recurse(depth - 1, work)).wrapping_add(1)
    }
}

#[fgtrace::traced]
#[inline(never)]
fn traced_level(depth: u32, work: u64) -> u64 {
    recurse(depth, work)
}

fn worker(stop: Arc<AtomicBool>, seed: u64) -> u64 {
    let mut r = seed | 1;
    let mut acc = 0;
    while !stop.load(Ordering::Relaxed) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        acc ^= recurse(20 + (r % 180) as u32, 1 + r % 64);
    }
    acc
}

/// Runs the stress for `secs` at `hz`; returns (sessions, samples checked) or a description of the first bad sample.
pub fn stress(secs: u64, hz: u64, quiet: bool) -> Result<(u64, u64), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4u64)
        .map(|i| {
            let s = stop.clone();
            std::thread::Builder::new()
                .name(format!("stress-{i}"))
                .spawn(move || worker(s, 0x51ed ^ i))
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let (mut sessions, mut checked) = (0, 0);
    let mut result = Ok(());
    while start.elapsed() < Duration::from_secs(secs) && result.is_ok() {
        let cfg = fgtrace::Config::builtin().sampling(fgtrace::sampler::Sampling::timer(hz));
        let session = fgtrace::Session::start(cfg).map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(2000.min(secs * 1000)));
        let trace = session.stop().map_err(|e| e.to_string())?;
        sessions += 1;
        let m = trace.meta();
        let in_text = |a: u64| m.mappings.iter().any(|mp| a >= mp.start && a < mp.end);
        let rec = recurse as *const () as u64;
        let (mut n, mut deep, mut lost) = (0u64, 0u64, 0u64);
        for t in &m.threads {
            lost += t.samples_lost;
        }
        for s in trace.samples() {
            n += 1;
            if s.frames.is_empty() {
                result = Err(format!("empty sample at {} ns", s.ts_ns));
                break;
            }
            if let Some(bad) = s.frames.iter().find(|&&a| !in_text(a)) {
                result = Err(format!(
                    "frame {bad:#x} outside every executable mapping: {:x?}",
                    s.frames
                ));
                break;
            }
            // Return addresses into `recurse` lie within a few hundred bytes of its start.
            if s.frames
                .iter()
                .filter(|&&a| a > rec && a < rec + 2048)
                .count()
                >= 5
            {
                deep += 1;
            }
        }
        checked += n;
        if !quiet {
            println!(
                "session {sessions}: {n} samples ({lost} lost), {deep} inside the recursion, {} calls traced",
                m.total_calls()
            );
        }
        if result.is_ok() && n > 0 && deep * 2 < n {
            result = Err(format!("only {deep} of {n} samples show the recursion"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().map_err(|_| "a worker panicked".to_string())?;
    }
    result.map(|()| (sessions, checked))
}

#[allow(dead_code)]
fn main() {
    let mut args = std::env::args().skip(1);
    let secs = args.next().and_then(|a| a.parse().ok()).unwrap_or(60);
    let hz = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    match stress(secs, hz, false) {
        Ok((sessions, n)) => {
            println!("ok: {sessions} sessions, {n} samples checked, no garbage stacks")
        }
        Err(e) => {
            eprintln!("stress failed: {e}");
            std::process::exit(1);
        }
    }
}
