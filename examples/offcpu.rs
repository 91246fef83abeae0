//! Off-CPU time per call, checked against the truth: a request handler that
//! computes, waits for "I/O" (sleeps) and takes a contended lock, on three
//! threads. Each traced fn also measures itself with the thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`: on-CPU truth) and the wall clock (off-CPU
//! truth = wall - CPU), and the example prints both beside what the trace
//! says, with the relative error, then saves `offcpu.fgt`.
//!
//! ```sh
//! cargo run --release --example offcpu            # then: fgtrace report offcpu.fgt
//! fgtrace graph --offcpu offcpu.fgt --depth 2     # fgtrace flame --offcpu offcpu.fgt -o off.svg
//! ```

#[path = "../tests/support/cpu.rs"]
mod cpu;

use cpu::{compute, measured};
use fgtrace::view::{ReportOptions, TraceViews};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Truths = BTreeMap<&'static str, (u64, u64)>;

thread_local! {
    /// Per function: (wall ns, CPU ns), summed over this thread's calls
    /// (per thread: a shared lock here would be blocking of its own).
    static TRUTH: RefCell<Truths> = const { RefCell::new(BTreeMap::new()) };
}

fn truly<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    let (r, t) = measured(f);
    TRUTH.with(|all| {
        let mut all = all.borrow_mut();
        let e = all.entry(name).or_insert((0, 0));
        e.0 += t.wall;
        e.1 += t.cpu;
    });
    r
}

#[fgtrace::traced]
fn parse(ms: u64) -> u64 {
    truly("parse", || compute(Duration::from_millis(ms)))
}

#[fgtrace::traced]
fn wait_io(ms: u64) {
    truly("wait_io", || std::thread::sleep(Duration::from_millis(ms)))
}

#[fgtrace::traced]
fn update_shared(m: &Mutex<u64>) {
    truly("update_shared", || {
        let mut g = m.lock().unwrap();
        *g = g.wrapping_add(compute(Duration::from_millis(2)));
    })
}

#[fgtrace::traced]
fn handle(i: u64, m: &Mutex<u64>) {
    truly("handle", || {
        parse(3 + i % 3);
        wait_io(2 + i % 4);
        update_shared(m);
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let session = fgtrace::Session::start(fgtrace::Config::default().off_cpu(true))?;
    let m = Arc::new(Mutex::new(0u64));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let m = m.clone();
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || {
                    for i in 0..20 {
                        handle(i + w, &m);
                    }
                    TRUTH.with(|t| t.take())
                })
                .unwrap()
        })
        .collect();
    let mut truth = Truths::new();
    for w in workers {
        for (name, (wall, cpu)) in w.join().unwrap() {
            let e = truth.entry(name).or_insert((0, 0));
            e.0 += wall;
            e.1 += cpu;
        }
    }
    let trace = session.stop()?;
    trace.save("offcpu.fgt")?;
    let Some(o) = trace.meta().off_cpu.as_ref().filter(|o| o.is_available()) else {
        println!(
            "off-CPU unavailable: {}",
            trace
                .meta()
                .off_cpu
                .as_ref()
                .map_or("not recorded", |o| o.reason())
        );
        return Ok(());
    };
    let report = trace.report(&ReportOptions::default());
    println!(
        "{} calls on {} threads, {} context-switch stretches ({} records lost)\n",
        trace.meta().total_calls(),
        trace.meta().threads.len(),
        o.threads.iter().map(|t| t.intervals.len()).sum::<usize>(),
        o.lost()
    );
    println!(
        "{:<14} {:>10} {:>10} {:>7}   {:>10} {:>10} {:>7} {:>10}",
        "function", "on truth", "on trace", "err", "off truth", "off trace", "err", "blocked"
    );
    let ms = |ns: u64| format!("{:.3} ms", ns as f64 / 1e6);
    let err = |got: u64, want: u64| {
        if want == 0 {
            "-".to_string()
        } else {
            format!("{:+.1}%", (got as f64 - want as f64) / want as f64 * 100.0)
        }
    };
    for f in &report.functions {
        let Some(&(wall, cpu)) = truth.get(f.name.as_str()) else {
            continue;
        };
        let off = f.off_cpu.unwrap_or_default();
        let on = f.on_cpu_ns().unwrap_or(0);
        println!(
            "{:<14} {:>10} {:>10} {:>7}   {:>10} {:>10} {:>7} {:>10}",
            f.name,
            ms(cpu),
            ms(on),
            err(on, cpu),
            ms(wall - cpu),
            ms(off.total.total_ns()),
            err(off.total.total_ns(), wall - cpu),
            ms(off.total.blocked_ns)
        );
    }
    println!("\nsaved offcpu.fgt: fgtrace report offcpu.fgt, fgtrace graph --offcpu offcpu.fgt, fgtrace flame --offcpu offcpu.fgt -o off.svg");
    Ok(())
}
