//! Reading on every core: how many threads the readers may use, and a map
//! over items on that many scoped threads whose results come back in the
//! items' order, so every output is the same as the sequential path's.
//!
//! `FGTRACE_THREADS=N` sets the number (1: everything on the calling
//! thread, the sequential path); by default it is the machine's parallelism.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

std::thread_local! {
    /// A bound [`within`] set on this thread.
    static BOUND: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with [`threads`] at most `n` on the calling thread: for a caller
/// that splits the cores between jobs of its own (two files read at once
/// each get half).
pub fn within<R>(n: usize, f: impl FnOnce() -> R) -> R {
    let before = BOUND.with(|b| b.replace(Some(n.max(1))));
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BOUND.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// `a` here and `b` on a thread of its own, each with half the cores
/// ([`within`]), when there are two or more ([`threads`]); one after the
/// other, `a` first, when there is one (or no thread can start).
pub fn both<A, B: Send>(a: impl FnOnce() -> A, b: impl FnOnce() -> B + Send) -> (A, B) {
    let n = threads();
    if n < 2 {
        return (a(), b());
    }
    let half = n / 2;
    std::thread::scope(|s| {
        // `b` goes to its thread through this slot, so that it is still
        // here to run if the thread cannot start.
        let slot = std::sync::Arc::new(Mutex::new(Some(b)));
        let taken = slot.clone();
        let there = std::thread::Builder::new()
            .name("fgtrace-both".into())
            .spawn_scoped(s, move || {
                let b = taken.lock().unwrap_or_else(|e| e.into_inner()).take();
                b.map(|b| within(half, b))
            });
        let ra = within(half, a);
        let done = match there.map(|h| h.join()) {
            Ok(Ok(done)) => done,
            Ok(Err(p)) => std::panic::resume_unwind(p),
            Err(_) => None,
        };
        let rb = match done {
            Some(rb) => rb,
            None => {
                let b = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                b.expect("a thread that did not start took nothing")()
            }
        };
        (ra, rb)
    })
}

/// `run(job)` for every job, the first on the calling thread and each other
/// on a thread of its own, results in the jobs' order. A job whose thread
/// cannot start runs on the calling thread after the first; a panic in one
/// is resumed here.
pub fn each<J: Send, R: Send>(jobs: Vec<J>, run: impl Fn(J) -> R + Sync) -> Vec<R> {
    let run = &run;
    std::thread::scope(|scope| {
        let mut jobs = jobs.into_iter();
        let here = jobs.next();
        let handles: Vec<_> = jobs
            .map(|job| {
                // The job goes to its thread through this slot, so that it
                // is still here to run if the thread cannot start.
                let slot = std::sync::Arc::new(Mutex::new(Some(job)));
                let taken = slot.clone();
                let spawned = std::thread::Builder::new()
                    .name("fgtrace-view".into())
                    .spawn_scoped(scope, move || {
                        let job = taken.lock().unwrap_or_else(|e| e.into_inner()).take();
                        job.map(run)
                    });
                (spawned.ok(), slot)
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len() + 1);
        out.extend(here.map(run));
        for (h, slot) in handles {
            let done = match h.map(|h| h.join()) {
                Some(Ok(done)) => done,
                Some(Err(p)) => std::panic::resume_unwind(p),
                None => None,
            };
            let job = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            out.extend(done.or_else(|| job.map(run)));
        }
        out
    })
}

/// The threads a reader may use: `FGTRACE_THREADS`, or the machine's
/// available parallelism (at most the bound [`within`] set on this
/// thread); at least 1.
pub fn threads() -> usize {
    let n = configured();
    BOUND.with(|b| b.get()).map_or(n, |b| n.min(b))
}

fn configured() -> usize {
    match std::env::var("FGTRACE_THREADS") {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(1),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// `f` over `items` on up to [`threads`] threads (the calling thread among
/// them), results in the items' order. Each worker takes the next item
/// when it is free, so at most `threads()` items are in flight at once.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    map_on(threads(), items, f)
}

/// [`map`] on `n` threads.
pub fn map_on<T: Sync, R: Send>(n: usize, items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let n = n.min(items.len());
    if n <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let i = next.fetch_add(1, Relaxed);
        let Some(item) = items.get(i) else { break };
        let r = f(item);
        *out[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    };
    std::thread::scope(|s| {
        for _ in 1..n {
            s.spawn(work);
        }
        work();
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item was mapped")
        })
        .collect()
}

/// `f` over `items` on `n` worker threads while the calling thread hands
/// each result to `sink` in the items' order, as soon as it and every one
/// before it are done: the sink's work overlaps the mapping. At most
/// `window` results are computed ahead of the sink, so memory stays at a few
/// items per worker. With `n` 0 everything runs on the calling thread.
pub fn pipeline<T: Sync, R: Send>(
    n: usize,
    window: usize,
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
    mut sink: impl FnMut(R),
) {
    use std::collections::BTreeMap;
    use std::sync::Condvar;
    let n = n.min(items.len());
    if n == 0 {
        items.iter().map(f).for_each(sink);
        return;
    }
    struct State<R> {
        taken: usize,
        served: usize,
        ready: BTreeMap<usize, R>,
        /// The sink stopped taking results (it panicked): workers stop.
        closed: bool,
    }
    let window = window.max(1);
    let state = Mutex::new(State {
        taken: 0,
        served: 0,
        ready: BTreeMap::new(),
        closed: false,
    });
    let changed = Condvar::new();
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    let work = || loop {
        let i = {
            let mut s = lock();
            while !s.closed && s.taken < items.len() && s.taken >= s.served + window {
                s = changed.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            if s.closed || s.taken >= items.len() {
                return;
            }
            s.taken += 1;
            s.taken - 1
        };
        let r = f(&items[i]);
        lock().ready.insert(i, r);
        changed.notify_all();
    };
    /// Closes the state when the sink's loop ends, however it ends.
    struct Close<'a, R>(&'a Mutex<State<R>>, &'a Condvar);
    impl<R> Drop for Close<'_, R> {
        fn drop(&mut self) {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
            self.1.notify_all();
        }
    }
    std::thread::scope(|scope| {
        for _ in 0..n {
            scope.spawn(work);
        }
        let _close = Close(&state, &changed);
        for i in 0..items.len() {
            let r = {
                let mut s = lock();
                loop {
                    if let Some(r) = s.ready.remove(&i) {
                        s.served += 1;
                        break r;
                    }
                    s = changed.wait(s).unwrap_or_else(|e| e.into_inner());
                }
            };
            changed.notify_all();
            sink(r);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound holds on its thread only, inside its call, nested bounds
    /// restore the outer one, and it never raises the configured number.
    #[test]
    fn a_bound_holds_on_its_thread_inside_its_call() {
        let n = configured();
        assert_eq!(threads(), n);
        within(1, || {
            assert_eq!(threads(), 1);
            within(n + 5, || assert_eq!(threads(), n));
            assert_eq!(threads(), 1);
            let other = std::thread::spawn(threads).join().unwrap();
            assert_eq!(other, n);
        });
        assert_eq!(threads(), n);
        let _ = std::panic::catch_unwind(|| within(1, || panic!("inside")));
        assert_eq!(threads(), n, "restored after a panic");
    }

    /// Two jobs at once get half the cores each, and their results in
    /// their order.
    #[test]
    fn both_runs_two_jobs_with_half_the_cores_each() {
        let n = configured().min(4);
        let half = if n < 2 { n } else { n / 2 };
        let (a, b) = within(4, || both(threads, threads));
        assert_eq!((a, b), (half, half));
        // On the other thread `b` sees its own bound, not the caller's.
        let (_, other) = within(4, || both(|| (), || std::thread::current().id()));
        assert_eq!(other != std::thread::current().id(), n >= 2);
        let (a, b) = within(1, || both(|| "a", || "b"));
        assert_eq!((a, b), ("a", "b"));
    }

    #[test]
    fn results_come_back_in_the_items_order_whatever_finishes_first() {
        let items: Vec<u64> = (0..64).collect();
        let out = map_on(4, &items, |&i| {
            // Later items finish first.
            std::thread::sleep(std::time::Duration::from_micros(64 - i));
            i * 2
        });
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn a_pipeline_serves_in_order_and_never_runs_further_ahead_than_its_window() {
        let items: Vec<u64> = (0..200).collect();
        for n in [0, 1, 2, 5] {
            let mapped = AtomicUsize::new(0);
            let mut served = Vec::new();
            let mut ahead = 0;
            pipeline(
                n,
                3,
                &items,
                |&i| {
                    mapped.fetch_add(1, Relaxed);
                    std::thread::sleep(std::time::Duration::from_micros((i * 7) % 50));
                    i * 2
                },
                |r| {
                    // Mapped but not yet served, besides this one.
                    ahead = ahead.max(mapped.load(Relaxed) - served.len() - 1);
                    served.push(r);
                },
            );
            assert_eq!(served, items.iter().map(|i| i * 2).collect::<Vec<_>>());
            // A worker may finish an item the moment the window opens.
            assert!(ahead <= 3 + n, "{n} workers ran {ahead} items ahead");
        }
    }
}
