//! Reading on every core: how many threads the readers may use, and a map
//! over items on that many scoped threads whose results come back in the
//! items' order, so every output is the same as the sequential path's.
//!
//! `FGTRACE_THREADS=N` sets the number (1: everything on the calling
//! thread, the sequential path); by default it is the machine's parallelism.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// The threads a reader may use: `FGTRACE_THREADS`, or the machine's
/// available parallelism; at least 1.
pub fn threads() -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
