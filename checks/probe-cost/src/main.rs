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
//!   before `run` (its calls are counted, not recorded: the auto path);
//! * `poll-untraced`, `poll-off`, `poll-flight`: N polls of one `async fn`'s
//!   future instead (`run_polls`): untraced, traced with no session, and
//!   recording into a flight recorder (each poll's record and its future's id).
//! * `wake-untraced`, `wake-flight`: N polls as above, each of which wakes
//!   its own waker before it returns (as `tokio::task::yield_now` does):
//!   untraced, and recording (the poll and the wake, each written).

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

/// Pending `n` times, then ready: one poll each.
struct Yields(u64);

impl std::future::Future for Yields {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 == 0 {
            return std::task::Poll::Ready(());
        }
        // Opaque to the optimizer: the polls are not folded into a count.
        self.0 = std::hint::black_box(self.0 - 1);
        std::task::Poll::Pending
    }
}

/// As [`Yields`], waking its waker at each pending poll.
struct WakesItself(u64);

impl std::future::Future for WakesItself {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 == 0 {
            return std::task::Poll::Ready(());
        }
        self.0 = std::hint::black_box(self.0 - 1);
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

#[fgtrace::traced]
async fn polled(n: u64) {
    Yields(n).await
}

#[fgtrace::traced]
async fn woken(n: u64) {
    WakesItself(n).await
}

async fn plain_woken(n: u64) {
    WakesItself(n).await
}

async fn plain_polled(n: u64) {
    Yields(n).await
}

/// Polls a future until it is ready (a waker that does nothing): returns
/// how many polls were pending.
#[inline(never)]
fn until_ready(mut f: std::pin::Pin<&mut impl std::future::Future<Output = ()>>) -> u64 {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut pending = 0;
    while f.as_mut().poll(&mut cx).is_pending() {
        pending += 1;
    }
    pending
}

#[inline(never)]
fn run_wakes(n: u64, traced: bool) -> u64 {
    if traced {
        until_ready(std::pin::pin!(woken(n)))
    } else {
        until_ready(std::pin::pin!(plain_woken(n)))
    }
}

#[inline(never)]
fn run_polls(n: u64, traced: bool) -> u64 {
    if traced {
        until_ready(std::pin::pin!(polled(n)))
    } else {
        until_ready(std::pin::pin!(plain_polled(n)))
    }
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
        "untraced" | "off" | "poll-untraced" | "poll-off" | "wake-untraced" => None,
        "flight" | "poll-flight" | "wake-flight" => Some(config.flight_recorder(4096)),
        "stream" => Some(config.stream()),
        // A generous limit: under valgrind every call is slow.
        "auto" => Some(config.auto_exclude(std::time::Duration::from_millis(1))),
        m => {
            eprintln!(
                "unknown mode `{m}` (untraced, off, flight, stream, auto, poll-untraced, poll-off, poll-flight, wake-untraced, wake-flight)"
            );
            std::process::exit(2);
        }
    }
    .map(|c| fgtrace::Session::start(c).expect("session starts"));
    let warmup = if mode == "auto" { warm_up() } else { 0 };
    let s = match (mode.strip_prefix("poll-"), mode.strip_prefix("wake-")) {
        (Some(m), _) => run_polls(n, m != "untraced"),
        (_, Some(m)) => run_wakes(n, m != "untraced"),
        _ => run(n, mode != "untraced"),
    };
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
