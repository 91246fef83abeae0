//! A `#[traced]` global allocator: fgtrace's own slow paths allocate (a
//! thread's shadow stack and buffer, the filter decision, a batch handoff),
//! and every one of those allocations is a traced call made from inside
//! fgtrace. They must not be recorded or recurse: before the core's busy
//! flag this overflowed the stack (alloc -> enter -> join -> alloc ...).

use fgtrace::{traced, Config, Session};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;

struct Traced;

#[traced]
impl Traced {
    fn alloc_block(layout: Layout) -> *mut u8 {
        // SAFETY: forwarded to the system allocator as is.
        unsafe { System.alloc(layout) }
    }
}

unsafe impl GlobalAlloc for Traced {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Traced::alloc_block(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static A: Traced = Traced;

#[traced]
fn make(n: usize) -> usize {
    black_box(vec![1u8; n]).len()
}

#[test]
fn a_traced_global_allocator_is_recorded_without_recursing() {
    // Small batches: threads hand buffers over (an allocation in the
    // handoff) many times.
    let session = Session::start(Config::builtin().batch_calls(64)).unwrap();
    let per_thread = 2_000;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 0..per_thread {
                    make(16 + i % 64);
                }
            });
        }
    });
    let trace = session.stop().unwrap();
    let meta = trace.meta();
    let makes = trace
        .calls()
        .filter(|c| meta.site_name(c.site) == "make")
        .count();
    let lost: u64 = meta.threads.iter().map(|t| t.lost).sum();
    assert_eq!(makes as u64 + lost, 4 * per_thread as u64);
    // Every `make` allocates once, inside itself: recorded as its child.
    let inside = trace
        .calls()
        .filter(|c| meta.site_name(c.site) == "Traced::alloc_block" && c.depth == 1)
        .count();
    assert!(
        inside as u64 + lost >= makes as u64,
        "{inside} allocations inside {makes} makes"
    );
}
