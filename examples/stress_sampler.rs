//! Sampler stress, 60 s by default:
//!
//! ```text
//! cargo run --release --example stress_sampler -- [seconds] [hz]
//! ```
//!
//! * 4 threads in deep recursion (20 to 200 levels, every 41st traced);
//! * sessions started and stopped back to back (50 to 500 ms each),
//!   alternating timer sampling at `hz` (10 kHz by default) and wall
//!   sampling at `hz / 10`;
//! * a thread running `fgtrace::testing` captures of the same recursion
//!   all the while, each checked for its exact number of traced calls;
//! * a thread creating short-lived threads (each a few recursions, then
//!   exit) throughout.
//!
//! Checked, for every session: every sample's frames lie in executable
//! mappings, timer samples show the recursion, no record is torn (only the
//! traced function, plausible depths, calls that end after they start), and
//! no call is lost without being counted: the calls recorded plus the calls
//! counted lost cover at least every call that started after the session
//! started and ended before it stopped. Then the same jobs run again with
//! tracing off: the workload's results (a checksum per thread) must be
//! identical. A crash shows as a signal, a hang as the watchdog's exit.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WORKERS: u64 = 4;
const TRACED_EVERY: u32 = 41;

/// Traced calls started and ended by the workload (not by the capture thread).
static STARTED: AtomicU64 = AtomicU64::new(0);
static ENDED: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// This thread's traced calls go to the session (not to a capture).
    static COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[inline(never)]
fn recurse(depth: u32, work: u64) -> u64 {
    if depth == 0 {
        let mut x = work;
        for i in 0..work * 50 {
            x = black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        return x;
    }
    if depth % TRACED_EVERY == 0 {
        let counted = COUNTED.with(|c| c.get());
        if counted {
            STARTED.fetch_add(1, SeqCst);
        }
        let r = traced_level(depth - 1, work);
        if counted {
            ENDED.fetch_add(1, SeqCst);
        }
        r
    } else {
        black_box(recurse(depth - 1, work)).wrapping_add(1)
    }
}

#[fgtrace::traced]
#[inline(never)]
fn traced_level(depth: u32, work: u64) -> u64 {
    recurse(depth, work)
}

/// Job `j` of stream `w`: its depth and work, from a fixed hash.
fn job(w: u64, j: u64) -> (u32, u64) {
    let mut r = (w << 32 | j).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    (20 + (r % 181) as u32, 1 + (r >> 20) % 64)
}

fn fold(sum: u64, r: u64) -> u64 {
    (sum ^ r).wrapping_mul(0x100_0000_01b3)
}

/// Runs jobs `0..` of stream `w` until `stop` (or `limit` jobs); returns
/// (jobs done, checksum of their results).
fn run_jobs(w: u64, stop: Option<&AtomicBool>, limit: u64) -> (u64, u64) {
    let (mut j, mut sum) = (0, 0xcbf2_9ce4_8422_2325);
    while j < limit && !stop.is_some_and(|s| s.load(Relaxed)) {
        let (d, work) = job(w, j);
        sum = fold(sum, recurse(d, work));
        j += 1;
    }
    (j, sum)
}

/// Streams of the short-lived threads start here (workers are 0..4).
const SHORT_BASE: u64 = 1000;
const SHORT_JOBS: u64 = 5;

#[derive(Debug, Default)]
pub struct Figures {
    pub timer_sessions: u64,
    pub wall_sessions: u64,
    pub samples: u64,
    pub samples_lost: u64,
    /// Workers' timer samples, those that show the recursion, and those
    /// that are the PC alone (no walk).
    pub worker_samples: u64,
    pub worker_deep: u64,
    pub pc_alone: u64,
    pub calls: u64,
    pub calls_lost: u64,
    pub captures: u64,
    pub threads_created: u64,
    pub jobs: u64,
    pub checksum: u64,
}

/// Sorted executable ranges of a trace's mappings.
fn text_ranges(m: &fgtrace::TraceMeta) -> Vec<(u64, u64)> {
    let mut v: Vec<_> = m.mappings.iter().map(|mp| (mp.start, mp.end)).collect();
    v.sort_unstable();
    v
}

fn in_text(r: &[(u64, u64)], a: u64) -> bool {
    let i = r.partition_point(|&(s, _)| s <= a);
    i > 0 && a < r[i - 1].1
}

/// Checks one session's trace; returns (samples, samples lost, calls, calls
/// lost, and of the workers' timer samples: all, those showing the
/// recursion, those that are the PC alone).
fn check_session(
    trace: &fgtrace::Trace,
    wall: bool,
    must_cover: u64,
) -> Result<(u64, u64, u64, u64, [u64; 3]), String> {
    let m = trace.meta();
    let text = text_ranges(m);
    let rec = recurse as *const () as u64;
    // The workers do nothing but recurse: their samples must show it. (The
    // other threads build captures, create threads, sleep.)
    let worker: Vec<bool> = m
        .threads
        .iter()
        .map(|t| t.name.starts_with("stress-worker-"))
        .collect();
    let (mut n, mut worker_n, mut deep, mut lone) = (0u64, 0u64, 0u64, 0u64);
    for s in trace.samples() {
        n += 1;
        if s.frames.is_empty() {
            return Err(format!("empty sample at {} ns", s.ts_ns));
        }
        if let Some(bad) = s.frames.iter().find(|&&a| !in_text(&text, a)) {
            return Err(format!(
                "frame {bad:#x} outside every executable mapping: {:x?}",
                s.frames
            ));
        }
        if !worker.get(s.thread as usize).copied().unwrap_or(false) {
            continue;
        }
        worker_n += 1;
        if s.frames.len() == 1 {
            lone += 1;
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
    let mut calls = 0u64;
    for c in trace.calls() {
        calls += 1;
        let name = m.site_name(c.site);
        if name != "traced_level" {
            return Err(format!("torn record: a call of `{name}`: {c:?}"));
        }
        if c.depth > 200 / TRACED_EVERY {
            return Err(format!(
                "torn record: depth {} of at most 4: {c:?}",
                c.depth
            ));
        }
        if c.start_ns.checked_add(c.dur_ns).is_none() {
            return Err(format!("torn record: ends past every time: {c:?}"));
        }
    }
    let lost: u64 = m.threads.iter().map(|t| t.lost + t.overruns).sum();
    let samples_lost: u64 = m.threads.iter().map(|t| t.samples_lost).sum();
    if calls + lost < must_cover {
        return Err(format!(
            "{} calls neither recorded nor counted lost ({calls} recorded, {lost} lost, at least {must_cover} made)",
            must_cover - calls - lost
        ));
    }
    let workers = if wall { [0; 3] } else { [worker_n, deep, lone] };
    Ok((n, samples_lost, calls, lost, workers))
}

/// Runs the stress for `secs` at `hz`, then the same jobs untraced; returns
/// the figures, or a description of the first failure.
pub fn stress(secs: u64, hz: u64, quiet: bool) -> Result<Figures, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let failure: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let fail = |f: &std::sync::Mutex<Option<String>>, e: String| {
        f.lock().unwrap().get_or_insert(e);
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let s = stop.clone();
            std::thread::Builder::new()
                .name(format!("stress-worker-{w}"))
                .spawn(move || {
                    COUNTED.with(|c| c.set(true));
                    run_jobs(w, Some(&s), u64::MAX)
                })
                .unwrap()
        })
        .collect();
    // Short-lived threads, created throughout.
    let spawner = {
        let s = stop.clone();
        std::thread::Builder::new()
            .name("stress-spawner".into())
            .spawn(move || {
                let mut sums = Vec::new();
                while !s.load(Relaxed) {
                    let k = sums.len() as u64;
                    let h = std::thread::Builder::new()
                        .name(format!("short-{k}"))
                        .spawn(move || {
                            COUNTED.with(|c| c.set(true));
                            run_jobs(SHORT_BASE + k, None, SHORT_JOBS).1
                        })
                        .unwrap();
                    sums.push(h.join().unwrap());
                    std::thread::sleep(Duration::from_millis(5));
                }
                sums
            })
            .unwrap()
    };
    // Captures of the same recursion, concurrently, each checked exactly.
    let capturer = {
        let (s, f) = (stop.clone(), failure.clone());
        std::thread::Builder::new()
            .name("stress-capture".into())
            .spawn(move || {
                let mut n = 0u64;
                while !s.load(Relaxed) {
                    let d = 41 * (1 + (n % 4) as u32) + 7;
                    let cap = fgtrace::testing::capture(|| recurse(d, 8));
                    let want = (d / TRACED_EVERY) as usize;
                    if cap.calls("traced_level") != want {
                        fail(
                            &f,
                            format!(
                                "capture {n}: {} traced calls, {want} made",
                                cap.calls("traced_level")
                            ),
                        );
                    }
                    n += 1;
                }
                n
            })
            .unwrap()
    };
    // Watchdog: a hang is a failure too.
    let alive = Arc::new(AtomicU64::new(0));
    {
        let (a, s) = (alive.clone(), stop.clone());
        std::thread::Builder::new()
            .name("stress-watchdog".into())
            .spawn(move || {
                let mut last = (a.load(SeqCst), Instant::now());
                while !s.load(Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let now = a.load(SeqCst);
                    if now != last.0 {
                        last = (now, Instant::now());
                    } else if last.1.elapsed() > Duration::from_secs(30) {
                        eprintln!("stress: no session finished for 30 s: hung");
                        std::process::exit(2);
                    }
                }
            })
            .unwrap();
    }

    let mut fig = Figures::default();
    let start = Instant::now();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    while start.elapsed() < Duration::from_secs(secs) && failure.lock().unwrap().is_none() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let wall = (fig.timer_sessions + fig.wall_sessions) % 2 == 1;
        let sampling = if wall {
            fgtrace::sampler::Sampling::wall((hz / 10).max(1))
        } else if fig.timer_sessions % 2 == 0 {
            // The signal handler's walk, and `timer`'s default (the perf
            // ring where the kernel allows it), in turn.
            fgtrace::sampler::Sampling::timer(hz).backend(fgtrace::sampler::Backend::Signal)
        } else {
            fgtrace::sampler::Sampling::timer(hz)
        };
        let cfg = fgtrace::Config::builtin().sampling(sampling.clone());
        let session = fgtrace::Session::start(cfg).map_err(|e| e.to_string())?;
        let from = STARTED.load(SeqCst);
        let ms = 50 + rng % 451;
        std::thread::sleep(Duration::from_millis(ms));
        let to = ENDED.load(SeqCst);
        let trace = session.stop().map_err(|e| e.to_string())?;
        alive.fetch_add(1, SeqCst);
        let (n, sl, calls, lost, lone) = check_session(&trace, wall, to.saturating_sub(from))
            .map_err(|e| {
                format!(
                    "session {} ({sampling}): {e}",
                    fig.timer_sessions + fig.wall_sessions + 1
                )
            })?;
        if wall {
            fig.wall_sessions += 1;
        } else {
            fig.timer_sessions += 1;
        }
        fig.samples += n;
        fig.samples_lost += sl;
        fig.worker_samples += lone[0];
        fig.worker_deep += lone[1];
        fig.pc_alone += lone[2];
        fig.calls += calls;
        fig.calls_lost += lost;
        if !quiet {
            println!(
                "session {:3} {sampling:>12} {ms:3} ms: {n:6} samples ({sl} lost), {calls:7} calls ({lost} lost), {} threads",
                fig.timer_sessions + fig.wall_sessions,
                trace.meta().threads.len()
            );
        }
    }
    stop.store(true, Relaxed);
    let done: Vec<(u64, u64)> = workers
        .into_iter()
        .map(|w| w.join().map_err(|_| "a worker panicked".to_string()))
        .collect::<Result<_, _>>()?;
    let shorts = spawner
        .join()
        .map_err(|_| "the spawner panicked".to_string())?;
    fig.captures = capturer
        .join()
        .map_err(|_| "the capture thread panicked".to_string())?;
    fig.threads_created = shorts.len() as u64;
    // The workers do nothing but recurse: most of their samples must show it.
    // Not all: code without frame pointers (libc: allocation in the batch
    // handoff) stops a walk at once, and a thread the sampler's scan
    // registered from outside is sampled as its PC alone until its stack
    // bounds are known (a few ms; longer on a loaded machine). One session
    // may dip; the whole run may not.
    if fig.worker_samples > 1000 && fig.worker_deep * 2 < fig.worker_samples {
        return Err(format!(
            "only {} of the workers' {} timer samples show the recursion ({} are the PC alone)",
            fig.worker_deep, fig.worker_samples, fig.pc_alone
        ));
    }
    if let Some(e) = failure.lock().unwrap().take() {
        return Err(e);
    }
    fig.jobs = done.iter().map(|d| d.0).sum::<u64>() + fig.threads_created * SHORT_JOBS;
    let traced_sum = done
        .iter()
        .chain(
            shorts
                .iter()
                .map(|s| (SHORT_JOBS, *s))
                .collect::<Vec<_>>()
                .iter(),
        )
        .fold(0, |a, d| fold(a, d.1));

    // The same jobs with tracing off: no session, no capture.
    let again: Vec<(u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = done
            .iter()
            .enumerate()
            .map(|(w, &(jobs, _))| s.spawn(move || run_jobs(w as u64, None, jobs)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let shorts_again: Vec<u64> = (0..fig.threads_created)
        .map(|k| run_jobs(SHORT_BASE + k, None, SHORT_JOBS).1)
        .collect();
    let plain_sum = again
        .iter()
        .chain(
            shorts_again
                .iter()
                .map(|s| (SHORT_JOBS, *s))
                .collect::<Vec<_>>()
                .iter(),
        )
        .fold(0, |a, d| fold(a, d.1));
    if again != done || shorts_again != shorts || traced_sum != plain_sum {
        return Err(format!(
            "results differ with tracing on and off: checksum {traced_sum:#018x} traced, {plain_sum:#018x} untraced"
        ));
    }
    fig.checksum = traced_sum;
    Ok(fig)
}

#[allow(dead_code)]
fn main() {
    let mut args = std::env::args().skip(1);
    let secs = args.next().and_then(|a| a.parse().ok()).unwrap_or(60);
    let hz = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let t = Instant::now();
    match stress(secs, hz, false) {
        Ok(f) => {
            println!(
                "ok in {:.1} s: {} timer sessions at {hz} Hz, {} wall sessions at {} Hz; {} samples, {} samples lost (counted); of the workers' {} timer samples {} show the recursion, {} are the PC alone; \
                 {} traced calls, {} calls lost (counted); {} captures checked; {} threads created and exited; \
                 {} jobs, checksum {:#018x} identical with tracing on and off",
                t.elapsed().as_secs_f64(),
                f.timer_sessions,
                f.wall_sessions,
                (hz / 10).max(1),
                f.samples,
                f.samples_lost,
                f.worker_samples,
                f.worker_deep,
                f.pc_alone,
                f.calls,
                f.calls_lost,
                f.captures,
                f.threads_created,
                f.jobs,
                f.checksum
            )
        }
        Err(e) => {
            eprintln!("stress failed: {e}");
            std::process::exit(1);
        }
    }
}
