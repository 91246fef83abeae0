//! The program tests/no_frame_pointers.rs builds without frame pointers:
//! records the hidden 3:1 split of split.rs on two threads with the sampler
//! it is given.
//!
//! `no-fp-fixture OUT.fgt SAMPLE CPU_MS` (SAMPLE as `FGTRACE_SAMPLE`); exits
//! with 3 when the sampler cannot start (a refused perf ring).

#[path = "split.rs"]
mod split;

use fgtrace::sampler::Sampling;
use fgtrace::{Config, Session};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (out, sample, cpu_ms) = (&args[1], &args[2], args[3].parse().expect("CPU_MS"));
    let sampling = Sampling::parse(sample).expect("a sampler");
    let session = match Session::start(Config::builtin().sampling(sampling)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(3);
        }
    };
    // On two threads of its own, as a program's workers run (the main
    // thread's stack is walked differently: from `_start`).
    let workers: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || std::hint::black_box(split::split_workload(cpu_ms))))
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let trace = session.stop().expect("stop");
    trace.save(out).expect("save");
}
