//! `fgtrace-views-bench ROUNDS THREADS [SAVE.fgt]`: each thread calls `top`
//! ROUNDS times; `top` calls `mid` 4 times and `mid` calls `leaf` 8 times, so
//! the run records 37 x ROUNDS x THREADS calls. Run under `FGTRACE_RECORD=DIR`,
//! or with SAVE.fgt: a `Session` records it, each thread's loop under one
//! traced `body` call (one more call per thread), and `Trace::save` writes
//! the file, as the guide's first example does.

use std::hint::black_box;

#[fgtrace::traced]
#[inline(never)]
fn leaf(x: u64) -> u64 {
    black_box(x).wrapping_mul(3)
}

#[fgtrace::traced]
#[inline(never)]
fn mid(x: u64) -> u64 {
    (0..8).map(|i| leaf(x + i)).sum()
}

#[fgtrace::traced]
#[inline(never)]
fn top(x: u64) -> u64 {
    (0..4).map(|i| mid(x + i)).sum()
}

#[fgtrace::traced]
#[inline(never)]
fn body(rounds: u64) -> u64 {
    (0..rounds).map(top).sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let rounds: u64 = number(0, 1_000_000);
    let threads: u64 = number(1, 2);
    let save = args.get(2);
    let session = match save {
        // A flight recorder as large as the run (37 calls per round and
        // thread, with room to spare): nothing is lost, however busy the
        // cores, so the saved file holds the whole workload.
        Some(_) => Some(fgtrace::Session::start(
            fgtrace::Config::default().flight_recorder(rounds as usize * 40),
        )?),
        None => None,
    };
    let saved = save.is_some();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::Builder::new()
                .name(format!("w{t}"))
                .spawn(move || {
                    if saved {
                        body(rounds)
                    } else {
                        (0..rounds).map(top).sum::<u64>()
                    }
                })
                .expect("a worker thread")
        })
        .collect();
    for w in workers {
        black_box(w.join().expect("the worker ran"));
    }
    if let (Some(session), Some(path)) = (session, save) {
        session.stop()?.save(path)?;
    }
    Ok(())
}
