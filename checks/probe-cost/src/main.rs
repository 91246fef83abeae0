//! `fgtrace-probe-cost MODE N`: N calls of an empty traced leaf inside
//! `run`, the one function valgrind counts (`--toggle-collect`), so the
//! program's start, the session's start and stop and fgtrace's own threads
//! are left out. Modes:
//!
//! * `untraced`: the same leaf without `#[traced]` (the floor);
//! * `off`: traced, no session (compiled in, not recording);
//! * `flight`: recording into a flight recorder (probe and record, no handoff);
//! * `stream`: recording in stream mode (handoffs to the collector, amortized);
//! * `auto`: a session with auto-exclude, the leaf switched to count-only
//!   before `run` (its calls are counted, not recorded: the auto path).

#[fgtrace::traced]
#[inline(never)]
fn leaf(i: u64) -> u64 {
    std::hint::black_box(i)
}

#[inline(never)]
fn plain_leaf(i: u64) -> u64 {
    std::hint::black_box(i)
}

#[inline(never)]
fn run(n: u64, traced: bool) -> u64 {
    let mut s = 0u64;
    if traced {
        for i in 0..n {
            s = s.wrapping_add(leaf(i));
        }
    } else {
        for i in 0..n {
            s = s.wrapping_add(plain_leaf(i));
        }
    }
    s
}

/// Calls of the leaf until the collector has switched it (it decides on
/// the batches it receives); returns how many.
#[inline(never)]
fn warm_up() -> u64 {
    let mut calls = 0;
    for _ in 0..50 {
        for i in 0..10_000 {
            std::hint::black_box(leaf(i));
        }
        calls += 10_000;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    calls
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let config = fgtrace::Config::builtin();
    let session = match mode.as_str() {
        "untraced" | "off" => None,
        "flight" => Some(config.flight_recorder(4096)),
        "stream" => Some(config.stream()),
        // A generous limit: under valgrind every call is slow.
        "auto" => Some(config.auto_exclude(std::time::Duration::from_millis(1))),
        m => {
            eprintln!("unknown mode `{m}` (untraced, off, flight, stream, auto)");
            std::process::exit(2);
        }
    }
    .map(|c| fgtrace::Session::start(c).expect("session starts"));
    let warmup = if mode == "auto" { warm_up() } else { 0 };
    let s = run(n, mode != "untraced");
    if let Some(session) = session {
        let t = session.stop().expect("session stops");
        let kept = t.meta.total_calls() + t.meta.total_lost();
        if mode == "stream" && kept != n {
            eprintln!("recorded {kept} of {n} calls");
            std::process::exit(1);
        }
        let counted = t.meta.total_count_only();
        if mode == "auto" && (counted < n || kept + counted != n + warmup) {
            eprintln!("{counted} of {n} calls counted only, {kept} recorded after {warmup}");
            std::process::exit(1);
        }
    }
    println!("{s}");
}
