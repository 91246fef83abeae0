//! The sampler against workloads of known proportions.
//!
//! Two busy threads each run an untraced `work_three` doing three times the
//! work of `work_one`, in rounds of varying length (fixed-length rounds can
//! phase-lock with the timer). The samples must show about 3 : 1 per thread,
//! and about rate x CPU time samples must be delivered.
#![cfg(all(target_os = "linux", target_arch = "x86_64", feature = "symbolize"))]

use fgtrace::sampler::Sampling;
use fgtrace::{Config, Event, Session};
use object::{Object, ObjectSymbol};
use std::hint::black_box;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

#[inline(never)]
fn spin(units: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..units * 2000 {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

#[inline(never)]
fn work_three(units: u64) -> u64 {
    spin(3 * units)
}

#[inline(never)]
fn work_one(units: u64) -> u64 {
    spin(units)
}

/// Works for `ms` of this thread's CPU time (not wall time: on a loaded
/// machine a wall-time loop gets few samples, and the 3:1 ratio's binomial
/// noise grows past the tolerance).
fn busy(ms: u64, seed: u64) -> (u64, f64) {
    let cpu0 = thread_cpu();
    let mut r = seed | 1;
    let mut acc = 0;
    while thread_cpu() - cpu0 < ms as f64 / 1e3 {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        let units = 1 + r % 40;
        acc ^= work_three(units);
        acc ^= work_one(units);
    }
    (acc, thread_cpu() - cpu0)
}

fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Address ranges of the work functions in this process.
fn ranges() -> Vec<(&'static str, u64, u64)> {
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let file = object::File::parse(&*exe).unwrap();
    let mut out = Vec::new();
    for (name, addr) in [
        ("work_three", work_three as *const () as u64),
        ("work_one", work_one as *const () as u64),
    ] {
        let sym = file
            .symbols()
            .find(|s| {
                s.name()
                    .is_ok_and(|n| n.contains(name) && n.contains("sampler"))
            })
            .unwrap_or_else(|| panic!("symbol {name}"));
        let bias = addr - sym.address();
        out.push((
            name,
            sym.address() + bias,
            sym.address() + bias + sym.size(),
        ));
    }
    out
}

fn run(sampling: Sampling, ms: u64) -> (fgtrace::Trace, Vec<(u32, f64)>) {
    let session = Session::start(Config::builtin().sampling(sampling)).expect("sampling starts");
    let workers: Vec<_> = (0..2u64)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("busy-{i}"))
                .spawn(move || {
                    let tid = unsafe { libc::syscall(libc::SYS_gettid) as u32 };
                    (tid, busy(ms, 0x9e3779b97f4a7c15 ^ i).1)
                })
                .unwrap()
        })
        .collect();
    let cpu: Vec<(u32, f64)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    (session.stop().unwrap(), cpu)
}

/// `tolerance`: allowed relative error of the 3:1 ratio; binomial noise on n
/// samples is about 2 x sqrt(0.1875 / n) / 0.25, so 1 kHz runs get a wider one.
fn check(sampling: Sampling, rate: f64, tolerance: f64) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (trace, cpu) = run(sampling, 1500);
    let r = ranges();
    let m = trace.meta();
    for (tid, cpu_s) in cpu {
        let t = m
            .threads
            .iter()
            .position(|t| t.tid == tid)
            .expect("busy thread sampled") as u32;
        let samples: Vec<_> = trace
            .events()
            .filter_map(|e| match e {
                Event::Sample(s) if s.thread == t => Some(s),
                _ => None,
            })
            .collect();
        let mut counts = [0u64; 2];
        for s in &samples {
            for (i, (_, lo, hi)) in r.iter().enumerate() {
                if s.frames.iter().any(|&a| a >= *lo && a < *hi) {
                    counts[i] += 1;
                }
            }
        }
        let ratio = counts[0] as f64 / counts[1].max(1) as f64;
        let delivered = samples.len() as f64 / (rate * cpu_s);
        let lost = m.threads[t as usize].samples_lost;
        println!(
            "tid {tid}: {} samples over {cpu_s:.3} s CPU ({:.1}% delivered, {lost} counted lost), work_three:work_one = {}:{} = {ratio:.2}",
            samples.len(),
            delivered * 100.0,
            counts[0],
            counts[1]
        );
        assert!(
            (ratio / 3.0 - 1.0).abs() < tolerance,
            "ratio {ratio:.2} on thread {tid}"
        );
        // An idle machine delivers 98 to 99.5% at 10 kHz in this debug
        // build (the release figures are in docs/src/performance.md); a
        // CI run on a 2-core VM once got 89.5% with nothing else of ours
        // running, so the bound leaves room for the host, not for a
        // sampler that drops a fifth of its samples.
        assert!(
            delivered > 0.85,
            "only {:.1}% of the samples delivered ({lost} counted lost)",
            delivered * 100.0
        );
        // Every sample starts at the interrupted PC and walks into the work fns' callers.
        assert!(samples.iter().all(|s| !s.frames.is_empty()));
    }
    assert_eq!(
        m.sampling
            .as_deref()
            .map(|s| s.starts_with(if rate > 0.0 { "" } else { "?" })),
        Some(true)
    );
    assert!(
        !m.mappings.is_empty(),
        "mappings recorded for symbolization"
    );
}

#[test]
fn timer_sampling_at_1khz_shows_the_true_proportions_per_thread() {
    check(Sampling::timer(1000), 1000.0, 0.2);
}

#[test]
fn perf_cpu_clock_sampling_shows_the_true_proportions_per_thread() {
    check(
        Sampling::perf(fgtrace::sampler::PerfEvent::CpuClock, 1000),
        1000.0,
        0.2,
    );
}

#[test]
fn bad_sample_sources_are_clear_errors() {
    let e = Sampling::parse("cycels").unwrap_err();
    assert!(e.contains("unknown sample source `cycels`"), "{e}");
    assert!(Sampling::parse("timer:abc").is_err());
    assert!(Sampling::parse("timer:0").is_err());
    assert_eq!(Sampling::parse("cycles:100000").unwrap().rate, 100000);
    assert_eq!(Sampling::parse("wall").unwrap().describe(), "wall@999Hz");
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    unsafe { std::env::set_var("FGTRACE_SAMPLE", "timer:fast") };
    let cfg = Config::default();
    unsafe { std::env::remove_var("FGTRACE_SAMPLE") };
    let err = Session::start(cfg).err().unwrap().to_string();
    assert!(err.contains("FGTRACE_SAMPLE"), "{err}");
}

#[test]
fn timer_sampling_at_10khz_delivers_nearly_every_sample() {
    check(Sampling::timer(10_000), 10_000.0, 0.06);
}

#[path = "../examples/stress_sampler.rs"]
#[allow(dead_code)]
mod stress;

/// The stress example, short: 5 s of 4 threads in deep
/// recursion, back-to-back sessions alternating timer sampling at 10 kHz and
/// wall sampling at 1 kHz, concurrent `testing` captures (each checked
/// exactly), short-lived threads created throughout. Every sample must be a
/// plausible stack, no record torn, every loss counted, and the workload's
/// results identical with tracing on and off.
/// (`cargo run --release --example stress_sampler` runs it for 60 s.)
#[test]
fn stress_deep_recursion_at_10khz_gives_no_garbage_stacks() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let f = stress::stress(5, 10_000, true).unwrap_or_else(|e| panic!("{e}"));
    println!("{f:?}");
    assert!(
        f.timer_sessions >= 2 && f.wall_sessions >= 2,
        "sessions back to back: {f:?}"
    );
    assert!(f.samples > 1000, "{f:?}");
    assert!(f.calls > 1000, "{f:?}");
    assert!(f.captures > 10, "captures ran concurrently: {f:?}");
    assert!(f.threads_created > 10, "threads came and went: {f:?}");
}

/// Hardware events sample where the CPU exposes a PMU; where it does not,
/// `Session::start` must say so clearly (never a crash, never silence).
#[test]
fn hardware_event_sampling_works_or_fails_clearly() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for event in [
        fgtrace::sampler::PerfEvent::Cycles,
        fgtrace::sampler::PerfEvent::Instructions,
    ] {
        match Session::start(Config::builtin().sampling(Sampling::perf(event, 200_000))) {
            Ok(session) => {
                busy(300, 7);
                let trace = session.stop().unwrap();
                let n = trace.samples().count();
                println!("{}: {n} samples", event.name());
                assert!(n > 10, "{} produced only {n} samples", event.name());
                let r = ranges();
                let hits = trace
                    .samples()
                    .filter(|s| {
                        s.frames
                            .iter()
                            .any(|&a| r.iter().any(|(_, lo, hi)| a >= *lo && a < *hi))
                    })
                    .count();
                assert!(
                    hits * 2 > n,
                    "most {} samples land in the work functions ({hits} of {n})",
                    event.name()
                );
            }
            Err(e) => {
                let e = e.to_string();
                println!("{}: {e}", event.name());
                assert!(
                    e.contains("perf_event_open") && (e.contains("PMU") || e.contains("paranoid")),
                    "{e}"
                );
            }
        }
    }
}
