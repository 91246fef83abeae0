//! The hot path allocates nothing: once a thread has joined the session and
//! each site has its cached decision, traced calls, async polls and the
//! record of a whole future make no allocation (the future record used to
//! format a `String` for its filter decision on every completion). The one
//! allocation is a future's own waker, once per future at its first poll
//! while recording (it sees the future's wakes), on a cold path.

use fgtrace::{traced, Config, Session};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static A: Counting = Counting;

#[traced]
fn leaf(x: u64) -> u64 {
    black_box(x + 1)
}

#[traced]
fn parent(x: u64) -> u64 {
    leaf(x) + leaf(x + 1)
}

#[traced]
async fn task(x: u64) -> u64 {
    leaf(x)
}

fn poll_once<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("never pending"),
    }
}

fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|a| a.get());
    f();
    ALLOCS.with(|a| a.get()) - before
}

#[test]
fn traced_calls_polls_and_futures_allocate_nothing_once_warm() {
    // Batches large enough that no handoff happens in the measured part.
    let session = Session::start(Config::builtin().batch_calls(1 << 16)).unwrap();
    // Warm up: the thread joins, every site gets its id and decision.
    parent(1);
    poll_once(task(1));
    let calls = allocations(|| {
        for i in 0..1000 {
            black_box(parent(i));
        }
    });
    let n = allocations(|| {
        for i in 0..1000 {
            black_box(parent(i));
            black_box(poll_once(task(i)));
        }
    });
    let trace = session.stop().unwrap();
    assert_eq!(calls, 0, "{calls} allocations in 1000 traced calls");
    assert_eq!(
        n, 1000,
        "{n} allocations in 1000 rounds of traced calls and futures: one waker per future"
    );
    let futures = trace
        .events()
        .filter(|e| matches!(e, fgtrace::Event::Future(_)))
        .count();
    assert_eq!(futures, 1001, "every future recorded");
    assert_eq!(trace.calls().count(), 2001 * 3 + 1001 * 2);
}
