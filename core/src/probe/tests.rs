//! The hot path against a small in-test runtime: hooks that give every
//! thread a fixed buffer, decide by name prefix, and (when asked) run traced
//! code inside themselves.

use super::*;
use crate::control_word;
use crate::record::{ext, kind, MAX_SITES};
use core::future::Future;
use core::sync::atomic::{AtomicBool, AtomicU32};
use core::task::{Context, Poll};
use std::boxed::Box;
use std::cell::Cell;
use std::vec::Vec;

const CAP: usize = 64;

static JOINS: AtomicU32 = AtomicU32::new(0);

std::thread_local! {
    /// Run traced code inside every hook on this thread.
    static REENTER: Cell<bool> = const { Cell::new(false) };
    static HANDOFFS: Cell<u32> = const { Cell::new(0) };
    /// The count-only table `join` gives this thread (null: none).
    static COUNT_TABLE: Cell<*const CountWord> = const { Cell::new(core::ptr::null()) };
    /// The per-call counter `join` gives this thread (null: none).
    static COUNTER: Cell<*const CounterReader> = const { Cell::new(core::ptr::null()) };
}

static INNER: Site = Site::new("inner", "t", "t.rs", 1, false);

fn reenter() {
    if REENTER.with(|r| r.get()) {
        // Would recurse forever (or record into a half-set buffer) if the
        // core let it through.
        let _g = enter(&INNER);
        let _v: Vec<u8> = Vec::with_capacity(16);
    }
}

fn join(st: &mut ThreadState, _gen: u32) -> bool {
    reenter();
    JOINS.fetch_add(1, Relaxed);
    if st.frames.is_null() {
        st.frames = Box::leak(std::vec![ShadowFrame::ZERO; 16].into_boxed_slice()).as_mut_ptr();
        st.stack_cap = 16;
    }
    let buf = Box::leak(std::vec![RawCall::default(); CAP].into_boxed_slice());
    st.buf = buf.as_mut_ptr();
    st.count = 0;
    st.mask = usize::MAX;
    st.limit = CAP;
    st.max_depth = u32::MAX;
    st.published = Box::leak(Box::new(AtomicUsize::new(0)));
    st.overruns = Box::leak(Box::new(AtomicUsize::new(0)));
    st.count_only = COUNT_TABLE.with(|t| t.get());
    st.counter = COUNTER.with(|c| c.get());
    true
}

fn decide(site: &'static Site, _gen: u32) -> Option<Decision> {
    reenter();
    let n = site.name;
    Some(if n.starts_with("hide") {
        Decision::Hide
    } else if n.starts_with("graph") {
        Decision::GraphRoot
    } else if n.starts_with("skip") {
        Decision::Skip
    } else {
        Decision::Record
    })
}

fn handoff(st: &mut ThreadState) {
    reenter();
    HANDOFFS.with(|h| h.set(h.get() + 1));
    st.count = 0;
}

fn release(_: &mut ThreadState) {}

fn uncounted(f: &mut dyn FnMut()) {
    f()
}

static HOOKS_FOR_TESTS: Hooks = Hooks {
    join,
    decide,
    handoff,
    release,
    uncounted,
};

static STARTED: AtomicBool = AtomicBool::new(false);

/// One "session" for the whole test binary (never stopped); each test
/// works on its own thread.
pub(crate) fn start() {
    if !STARTED.swap(true, SeqCst) {
        install_hooks(&HOOKS_FOR_TESTS);
        control_word::session_on(3);
    }
}

/// (site name, kind, depth) of every record this thread wrote so far.
fn records() -> Vec<(&'static str, u64, u32)> {
    unsafe {
        with_thread_state(|st| {
            (0..st.count)
                .map(|i| *st.buf.add(i))
                // Future ids and times are checked by their own tests.
                .filter(|r| {
                    !(r.is_ext()
                        && matches!(
                            r.ext_sub(),
                            ext::FUTURE | ext::FUTURE_BUSY | ext::FUTURE_WAKES
                        ))
                })
                .map(|r| {
                    let name = crate::site::site_by_id(r.site()).map_or("?", |s| s.name);
                    (name, r.kind(), r.depth())
                })
                .collect()
        })
    }
}

fn on_own_thread(f: impl FnOnce() + Send + 'static) {
    start();
    std::thread::spawn(f).join().unwrap();
}

static A: Site = Site::new("a", "t", "t.rs", 10, false);
static B: Site = Site::new("b", "t", "t.rs", 11, false);
static C: Site = Site::new("c", "t", "t.rs", 12, false);
static D: Site = Site::new("d", "t", "t.rs", 13, false);

#[test]
fn a_stale_guard_never_pops_a_frame_that_reused_its_slot() {
    on_own_thread(|| {
        let a = enter(&A);
        let b = enter(&B);
        drop(a); // a's exit pops the leaked b with it
        assert_eq!(current_depth(), 0);
        let c = enter(&C);
        let d = enter(&D); // d takes the slot b had
        assert_eq!(current_depth(), 2);
        drop(b); // stale: must leave d alone
        assert_eq!(current_depth(), 2, "the stale guard popped d");
        drop(d);
        drop(c);
        let names: Vec<_> = records().iter().map(|r| r.0).collect();
        assert_eq!(names, ["a", "d", "c"]);
    });
}

#[test]
fn traced_code_inside_hooks_is_not_recorded_and_does_not_recurse() {
    static OUTER: Site = Site::new("outer_reentrant", "t", "t.rs", 20, false);
    on_own_thread(|| {
        REENTER.with(|r| r.set(true));
        // join, decide and (after CAP records) handoff all run traced code.
        for _ in 0..CAP + 3 {
            let _g = enter(&OUTER);
        }
        assert_eq!(HANDOFFS.with(|h| h.get()), 1);
        let recs = records();
        assert!(recs.iter().all(|r| r.0 == "outer_reentrant"), "{recs:?}");
        assert_eq!(recs.len(), 3, "3 records after the handoff");
        assert_eq!(current_depth(), 0);
    });
}

/// A thread counts the records it writes that are not calls, overwritten
/// or kept, as a flight recorder's reader needs them: the same weight a
/// count over every record written gives, with a ring of 4 records as with
/// a straight buffer.
#[test]
fn the_records_that_are_not_calls_are_counted_as_written_even_in_a_ring() {
    static FUT: Site = Site::new("nc_async", "t", "t.rs", 40, true);
    static MARK: Site = Site::new("nc_marker", "t", "t.rs", 41, false);
    on_own_thread(|| {
        let work = || {
            for _ in 0..5 {
                let _c = enter(&A);
                let mut fut = core::pin::pin!(TracedFuture::new(&FUT, async { 7 }));
                let mut cx = Context::from_waker(core::task::Waker::noop());
                assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(7));
                marker(&MARK, &[]);
            }
        };
        drop(enter(&B)); // joins the session
        let reset = |ring: bool| unsafe {
            with_thread_state(|st| {
                st.count = 0;
                st.non_calls = 0;
                (st.mask, st.limit) = if ring {
                    (3, usize::MAX)
                } else {
                    (usize::MAX, CAP)
                };
            })
        };
        reset(false);
        work();
        let (written, straight) = unsafe {
            with_thread_state(|st| {
                let recs: Vec<RawCall> = (0..st.count).map(|i| *st.buf.add(i)).collect();
                (recs, st.non_calls)
            })
        };
        let weight: u64 = written.iter().map(|r| r.non_calls()).sum();
        // 5 times: a future's record and its id, the poll's id, a marker (2).
        assert!(weight >= 5 * 5, "{weight}: {written:?}");
        assert_eq!(straight as u64, weight);
        reset(true);
        work();
        let (count, ring) = unsafe { with_thread_state(|st| (st.count, st.non_calls)) };
        assert_eq!(count, written.len(), "the ring took every record");
        assert_eq!(ring as u64, weight, "overwritten ones included");
        reset(false);
    });
}

#[test]
fn a_graph_root_async_fn_keeps_its_poll_kind_and_future_record() {
    static G: Site = Site::new("graph_async", "t", "t.rs", 30, true);
    on_own_thread(|| {
        let mut fut = core::pin::pin!(TracedFuture::new(&G, async { 7 }));
        let mut cx = Context::from_waker(core::task::Waker::noop());
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(7));
        let recs = records();
        assert_eq!(
            recs,
            [
                ("graph_async", kind::POLL, 0),
                ("graph_async", kind::FUTURE, 1)
            ]
        );
    });
}

/// (kind, the future id after it) of every poll and whole-future record of
/// this thread, in order.
fn future_ids() -> Vec<(u64, u64)> {
    let raw: Vec<RawCall> =
        unsafe { with_thread_state(|st| (0..st.count).map(|i| *st.buf.add(i)).collect()) };
    let mut out = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        if r.is_ext() || !(r.kind() == kind::POLL || r.kind() == kind::FUTURE) {
            continue;
        }
        let next = raw
            .get(i + 1)
            .filter(|x| x.is_ext() && x.ext_sub() == ext::FUTURE);
        out.push((r.kind(), next.map_or(0, |x| x.ext_values().0)));
    }
    out
}

#[test]
fn every_poll_and_whole_future_record_names_its_future() {
    static ASYNC: Site = Site::new("ids_async", "t", "t.rs", 31, true);
    on_own_thread(|| {
        let mut cx = Context::from_waker(core::task::Waker::noop());
        // Two futures of one fn, interleaved: a poll each, then both again.
        let (a, b) = (
            Box::pin(TracedFuture::new(&ASYNC, YieldOnce(false))),
            Box::pin(TracedFuture::new(&ASYNC, YieldOnce(false))),
        );
        let (mut a, mut b) = (a, b);
        let (ida, idb) = (
            &*a.as_ref() as *const _ as u64,
            &*b.as_ref() as *const _ as u64,
        );
        assert_ne!(ida, idb);
        assert_eq!(a.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(b.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(b.as_mut().poll(&mut cx), Poll::Ready(()));
        assert_eq!(a.as_mut().poll(&mut cx), Poll::Ready(()));
        let (p, f) = (kind::POLL, kind::FUTURE);
        assert_eq!(
            future_ids(),
            [(p, ida), (p, idb), (p, idb), (f, idb), (p, ida), (f, ida)]
        );
        // A future dropped before it completes names itself too.
        let first = unsafe { with_thread_state(|st| st.count) };
        let mut c = Box::pin(TracedFuture::new(&ASYNC, core::future::pending::<()>()));
        let idc = &*c.as_ref() as *const _ as u64;
        assert_eq!(c.as_mut().poll(&mut cx), Poll::Pending);
        drop(c);
        assert_eq!(future_ids()[6..], [(p, idc), (f, idc)]);
        // The poll and its id, the future, its id and its times.
        assert_eq!(unsafe { with_thread_state(|st| st.count) } - first, 6);
    });
}

/// A waker that counts its wakes.
struct CountWakes(std::sync::atomic::AtomicUsize);

impl std::task::Wake for CountWakes {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// Pending at its first poll, where it keeps (a clone of) its waker in
/// the slot; ready at the next.
struct UntilWoken(
    std::sync::Arc<std::sync::Mutex<Option<std::task::Waker>>>,
    bool,
);

impl Future for UntilWoken {
    type Output = ();
    fn poll(mut self: core::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.1 {
            Poll::Ready(())
        } else {
            self.1 = true;
            *self.0.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

#[test]
fn a_wake_is_recorded_where_it_happens_and_passed_on_to_the_executor() {
    static WOKEN: Site = Site::new("woken_async", "t", "t.rs", 33, true);
    on_own_thread(|| {
        let executor = std::sync::Arc::new(CountWakes(Default::default()));
        let waker = std::task::Waker::from(executor.clone());
        let mut cx = Context::from_waker(&waker);
        let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
        let mut fut = Box::pin(TracedFuture::new(&WOKEN, UntilWoken(slot.clone(), false)));
        let id = &*fut.as_ref() as *const _ as u64;
        let first = unsafe { with_thread_state(|st| st.count) };
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
        let kept = slot.lock().unwrap().take().unwrap();
        // The inner future kept the traced future's own waker, not the executor's.
        assert!(!kept.will_wake(&waker));
        std::thread::spawn(move || kept.wake()).join().unwrap();
        let woke_at = crate::clock::ticks();
        assert_eq!(executor.0.load(SeqCst), 1, "the executor's waker was woken");
        // A wait between the wake and the next poll: scheduled time.
        while crate::clock::ticks() < woke_at + 2_000_000 {}
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(()));
        let raw: Vec<RawCall> =
            unsafe { with_thread_state(|st| (first..st.count).map(|i| *st.buf.add(i)).collect()) };
        let subs: Vec<u64> = raw
            .iter()
            .map(|r| {
                if r.is_ext() {
                    100 + r.ext_sub()
                } else {
                    r.kind()
                }
            })
            .collect();
        let (p, f, x) = (kind::POLL, kind::FUTURE, |e: u64| 100 + e);
        // The wake was on the other thread: none here.
        assert_eq!(
            subs,
            [
                p,
                x(ext::FUTURE),
                p,
                x(ext::FUTURE),
                f,
                x(ext::FUTURE),
                x(ext::FUTURE_BUSY),
                x(ext::FUTURE_WAKES)
            ]
        );
        let busy = raw[6].ext_values();
        assert_eq!(busy.1, 2, "two polls");
        assert!(
            busy.0 > 0 && busy.0 < raw[4].dur(),
            "busy {busy:?} within the future"
        );
        let (scheduled, wakes) = raw[7].ext_values();
        assert_eq!(wakes, 1);
        assert!(scheduled >= 2_000_000, "scheduled {scheduled} ticks");
        assert!(scheduled <= raw[4].dur(), "scheduled within the future");
        // On this thread, a wake is a marker of the future's site, said to
        // be a wake of its id.
        let first = unsafe { with_thread_state(|st| st.count) };
        let mut again = Box::pin(TracedFuture::new(&WOKEN, UntilWoken(slot.clone(), false)));
        let id2 = &*again.as_ref() as *const _ as u64;
        assert_eq!(again.as_mut().poll(&mut cx), Poll::Pending);
        let kept = slot.lock().unwrap().take().unwrap();
        kept.wake_by_ref();
        kept.wake();
        assert_eq!(
            executor.0.load(SeqCst),
            2,
            "one wake passed on, the second found none kept"
        );
        let raw: Vec<RawCall> =
            unsafe { with_thread_state(|st| (first..st.count).map(|i| *st.buf.add(i)).collect()) };
        let wakes: Vec<_> = raw
            .windows(3)
            .filter(|w| w[1].is_ext() && w[1].ext_sub() == ext::MARKER && w[2].is_ext())
            .map(|w| {
                (
                    crate::site::site_by_id(w[0].site()).map(|s| s.name),
                    w[0].dur(),
                    w[2].ext_sub(),
                    w[2].ext_values().0,
                )
            })
            .collect();
        assert_eq!(wakes, [(Some("woken_async"), 0, ext::WAKE, id2); 2]);
        assert_ne!(id, 0);
    });
}

/// Pending once, then ready.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: core::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

#[test]
fn future_records_obey_notrace_skip_depth_and_threshold() {
    static HIDDEN: Site = Site::new("hide_async", "t", "t.rs", 40, true);
    static SKIPPED: Site = Site::new("skip_async", "t", "t.rs", 41, true);
    static PLAIN: Site = Site::new("plain_async", "t", "t.rs", 42, true);
    fn run(site: &'static Site) {
        let mut fut = core::pin::pin!(TracedFuture::new(site, async {}));
        let mut cx = Context::from_waker(core::task::Waker::noop());
        let _ = fut.as_mut().poll(&mut cx);
    }
    on_own_thread(|| {
        run(&HIDDEN);
        run(&SKIPPED);
        assert_eq!(records(), []);
        run(&PLAIN);
        assert_eq!(records().len(), 2, "poll and future");
        // Depth limit: neither the poll nor the future at depth >= 0.
        unsafe { with_thread_state(|st| st.max_depth = 0) };
        run(&PLAIN);
        assert_eq!(records().len(), 2);
        // Threshold: an instant future is below a huge threshold.
        unsafe {
            with_thread_state(|st| {
                st.max_depth = u32::MAX;
                st.threshold = u64::MAX;
            })
        };
        run(&PLAIN);
        assert_eq!(records().len(), 2);
    });
}

#[test]
fn hidden_subtrees_and_graph_functions() {
    static H: Site = Site::new("hide_me", "t", "t.rs", 50, false);
    static GR: Site = Site::new("graph_root", "t", "t.rs", 51, false);
    on_own_thread(|| {
        {
            let _h = enter(&H);
            let _a = enter(&A);
        }
        assert_eq!(records(), []);
        unsafe { with_thread_state(|st| st.has_graph = true) };
        {
            let _a = enter(&A); // outside any graph function: not recorded
        }
        {
            let _g = enter(&GR);
            let _b = enter(&B);
        }
        assert_eq!(
            records(),
            [("b", kind::CALL, 1), ("graph_root", kind::CALL, 0)]
        );
    });
}

#[test]
fn a_record_made_inside_another_write_is_dropped_and_counted() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    on_own_thread(|| {
        let _a = enter(&A);
        drop(_a);
        unsafe {
            with_thread_state(|st| {
                st.dropped = &DROPS;
                let n = st.count;
                // What a signal handler finds when it interrupts a write.
                st.writing = true;
                write(st, RawCall::pack(1, 0, 1, B.id(), false, kind::CALL));
                assert_eq!(st.count, n, "no slot taken");
                assert_eq!(DROPS.load(Relaxed), 1, "counted");
                st.writing = false;
                write(st, RawCall::pack(1, 0, 1, B.id(), false, kind::CALL));
                assert_eq!(st.count, n + 1, "written once the other write is done");
            })
        };
    });
}

#[test]
fn a_record_made_between_a_full_write_and_its_handoff_is_dropped_and_counted() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    on_own_thread(|| {
        let _a = enter(&A);
        drop(_a);
        unsafe {
            with_thread_state(|st| {
                st.dropped = &DROPS;
                // The interrupted write filled the buffer; its handoff has
                // not run yet.
                st.count = st.limit;
                (*st.published).store(st.limit, Relaxed);
                write(st, RawCall::pack(1, 0, 1, B.id(), false, kind::CALL));
                assert_eq!(st.count, st.limit, "nothing written past the buffer");
                assert_eq!(DROPS.load(Relaxed), 1);
            })
        };
    });
}

#[test]
fn allocation_figures_go_to_the_innermost_call_then_to_its_caller() {
    use crate::record::ext;
    static P: Site = Site::new("alloc_parent", "t", "t.rs", 90, false);
    static K: Site = Site::new("alloc_child", "t", "t.rs", 91, false);
    static H: Site = Site::new("hide_alloc", "t", "t.rs", 92, false);
    on_own_thread(|| {
        {
            let _a = enter(&A); // joins
        }
        let allocs = Box::leak(std::vec![AllocCounts::ZERO; 16].into_boxed_slice());
        unsafe { with_thread_state(|st| st.allocs = allocs.as_mut_ptr()) };
        let first = unsafe { with_thread_state(|st| st.count) };
        crate::alloc::allocated(100); // outside every call: counted nowhere
        {
            let _p = enter(&P);
            crate::alloc::allocated(10);
            {
                let _c = enter(&K);
                crate::alloc::allocated(5);
                crate::alloc::reallocated(5, 20);
                crate::alloc::freed(20);
            }
            {
                let _h = enter(&H); // hidden: its figures are still its caller's
                crate::alloc::allocated(7);
            }
            {
                let _b = enter(&B); // allocates nothing: no extension record
            }
        }
        let raw: Vec<RawCall> =
            unsafe { with_thread_state(|st| (first..st.count).map(|i| *st.buf.add(i)).collect()) };
        let shown: Vec<String> = raw
            .iter()
            .map(|r| {
                if r.is_ext() {
                    format!("ext{}{:?}", r.ext_sub(), r.ext_values())
                } else {
                    crate::site::site_by_id(r.site())
                        .map_or("?", |s| s.name)
                        .to_string()
                }
            })
            .collect();
        assert_eq!(
            shown,
            [
                "alloc_child".to_string(),
                format!("ext{}(1, 25)", ext::ALLOCS),
                format!("ext{}(1, 25)", ext::FREES),
                format!("ext{}(1, 0)", ext::REALLOCS),
                "b".to_string(),
                "alloc_parent".to_string(),
                format!("ext{}(3, 42)", ext::ALLOCS),
                format!("ext{}(1, 25)", ext::FREES),
                format!("ext{}(1, 0)", ext::REALLOCS),
            ]
        );
        // While a hook runs (busy) nothing is counted.
        {
            let _p = enter(&P);
            let gen = unsafe { with_thread_state(|st| core::mem::replace(&mut st.gen, GEN_BUSY)) };
            crate::alloc::allocated(1);
            unsafe { with_thread_state(|st| st.gen = gen) };
        }
        let last = unsafe { with_thread_state(|st| *st.buf.add(st.count - 1)) };
        assert!(!last.is_ext(), "the busy allocation was counted");
    });
}

/// A count-only table for this thread's next join: MAX_SITES zero words.
fn give_count_table() -> &'static [CountWord] {
    let t: &'static [CountWord] = Box::leak(
        (0..MAX_SITES)
            .map(|_| CountWord::new(0))
            .collect::<Box<[_]>>(),
    );
    COUNT_TABLE.with(|c| c.set(t.as_ptr()));
    t
}

#[test]
fn a_count_only_site_is_counted_not_recorded_and_its_callees_still_are() {
    static OUTER: Site = Site::new("auto_outer", "t", "t.rs", 100, false);
    static TINY: Site = Site::new("auto_tiny", "t", "t.rs", 101, false);
    static CALLEE: Site = Site::new("auto_callee", "t", "t.rs", 102, false);
    static H: Site = Site::new("hide_auto", "t", "t.rs", 103, false);
    on_own_thread(|| {
        let table = give_count_table();
        {
            let _o = enter(&OUTER); // joins
            let _t = enter(&TINY);
        }
        let gen = unsafe { with_thread_state(|st| st.gen) };
        assert_eq!(gen & GEN_TAGS, GEN_AUTO, "the auto path, without a counter");
        assert_eq!(
            records(),
            [("auto_tiny", kind::CALL, 1), ("auto_outer", kind::CALL, 0)]
        );
        // What the layer above does when the site's calls were tiny.
        table[TINY.id() as usize].fetch_or(COUNT_ONLY, Relaxed);
        for _ in 0..10 {
            let _o = enter(&OUTER);
            let _t = enter(&TINY);
            assert_eq!(current_depth(), 1, "a count-only call pushes no frame");
            let _c = enter(&CALLEE);
        }
        assert_eq!(table[TINY.id() as usize].load(Relaxed), COUNT_ONLY | 10);
        let recs = records();
        assert_eq!(recs.len(), 2 + 20);
        assert!(recs[2..].iter().all(|r| r.0 != "auto_tiny"), "{recs:?}");
        // The callee moved up to the count-only call's depth.
        assert_eq!(recs[2], ("auto_callee", kind::CALL, 1));
        assert_eq!(recs[3], ("auto_outer", kind::CALL, 0));
        // Where it would not have been recorded, it is not counted either.
        {
            let _h = enter(&H);
            let _t = enter(&TINY);
        }
        unsafe { with_thread_state(|st| st.max_depth = 0) };
        {
            let _t = enter(&TINY);
        }
        unsafe { with_thread_state(|st| st.max_depth = u32::MAX) };
        assert_eq!(table[TINY.id() as usize].load(Relaxed), COUNT_ONLY | 10);
        // Other sites are untouched.
        assert_eq!(table[OUTER.id() as usize].load(Relaxed), 0);
    });
}

#[test]
fn count_only_composes_with_a_per_call_counter() {
    use crate::record::ext;
    use core::sync::atomic::AtomicU64;
    static READS: AtomicU64 = AtomicU64::new(0);
    unsafe fn read(_: &CounterReader) -> u64 {
        READS.fetch_add(100, Relaxed) + 100
    }
    unsafe fn uncounted_plain(_: &CounterReader, f: &mut dyn FnMut()) {
        f()
    }
    static TINY: Site = Site::new("auto_counted_tiny", "t", "t.rs", 110, false);
    static OTHER: Site = Site::new("auto_counted_other", "t", "t.rs", 111, false);
    on_own_thread(|| {
        let table = give_count_table();
        let ctr: &'static CounterReader = Box::leak(Box::new(CounterReader {
            read,
            page: core::ptr::null(),
            fd: -1,
            uncounted: uncounted_plain,
        }));
        COUNTER.with(|c| c.set(ctr));
        {
            let _t = enter(&TINY); // joins
        }
        let gen = unsafe { with_thread_state(|st| st.gen) };
        assert_eq!(gen & GEN_TAGS, GEN_TAGS, "both tags");
        table[TINY.id() as usize].fetch_or(COUNT_ONLY, Relaxed);
        for _ in 0..3 {
            let _o = enter(&OTHER);
            let _t = enter(&TINY);
        }
        assert_eq!(table[TINY.id() as usize].load(Relaxed), COUNT_ONLY | 3);
        // Recorded calls still carry their counter delta.
        let raw: Vec<RawCall> =
            unsafe { with_thread_state(|st| (0..st.count).map(|i| *st.buf.add(i)).collect()) };
        let counters = raw
            .iter()
            .filter(|r| r.is_ext() && r.ext_sub() == ext::COUNTER)
            .count();
        let calls = raw.iter().filter(|r| !r.is_ext()).count();
        assert_eq!((calls, counters), (4, 4), "{raw:?}");
        COUNTER.with(|c| c.set(core::ptr::null()));
    });
}

static VALUED: Site = Site::with_values("valued", "t", "t.rs", 30, false, &["n", "ret"]);
static HANDLER: Site = Site::new("handler", "t", "t.rs", 31, false);

/// A traced interrupt handler.
fn handler() {
    let _h = enter(&HANDLER);
}

/// (name or `value`) of every record this thread wrote since `first`.
fn names_since(first: usize) -> Vec<String> {
    let raw: Vec<RawCall> =
        unsafe { with_thread_state(|st| (first..st.count).map(|i| *st.buf.add(i)).collect()) };
    raw.iter()
        .map(|r| {
            if r.is_ext() && r.ext_sub() == ext::FUTURE {
                "id".to_string()
            } else if r.is_ext() && r.ext_sub() == ext::FUTURE_BUSY {
                "busy".to_string()
            } else if r.is_ext() && r.ext_sub() == ext::FUTURE_WAKES {
                "wakes".to_string()
            } else if r.is_ext() {
                format!("value {}", r.ext_values().0)
            } else if r.kind() == kind::FUTURE {
                let name = crate::site::site_by_id(r.site()).map_or("?", |s| s.name);
                std::format!("future {name}")
            } else {
                crate::site::site_by_id(r.site())
                    .map_or("?", |s| s.name)
                    .to_string()
            }
        })
        .collect()
}

#[test]
fn an_interrupt_at_a_calls_exit_never_lands_between_its_record_and_its_values() {
    use crate::values::{value, RawValue};
    on_own_thread(|| {
        let first = unsafe { with_thread_state(|st| st.count) };
        {
            let mut g = values::enter_values(&VALUED, [value(&7u32), RawValue::ABSENT]);
            g.set_ret(value(&9u32));
            // The handler lands where the exit would let it first.
            irq_sim::arm(handler);
        }
        // The handler ran (after the call's values, not between the call's
        // record and them: there, the values would be the handler's).
        assert_eq!(
            names_since(first),
            ["valued", "value 7", "value 9", "handler"]
        );
    });
}

static VALUED_ASYNC: Site = Site::with_values("valued_async", "t", "t.rs", 32, true, &["n", "ret"]);

#[test]
fn an_interrupt_at_a_futures_end_never_lands_between_its_record_and_its_values() {
    use crate::values::{value, RawValue};
    on_own_thread(|| {
        let mut cx = Context::from_waker(core::task::Waker::noop());
        // Completed: the handler is armed inside the last poll, so it lands
        // at the first unmasked point after it.
        let first = unsafe { with_thread_state(|st| st.count) };
        {
            let fut =
                values::ValuesFuture::new(&VALUED_ASYNC, [value(&7u32), RawValue::ABSENT], async {
                    irq_sim::arm(handler);
                    9u32
                })
                .with_ret(value);
            let mut fut = core::pin::pin!(fut);
            assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(9));
        }
        // The handler ran after the last poll's future id, not between the
        // poll's record and it, and never between the future's record and
        // its id and values (there, they would read as the handler's).
        assert_eq!(
            names_since(first),
            [
                "valued_async",
                "id",
                "handler",
                "future valued_async",
                "id",
                "busy",
                "wakes",
                "value 7",
                "value 9",
            ]
        );
        // Dropped before completion: the cancelled future's record and its
        // arguments, the same way.
        let first = unsafe { with_thread_state(|st| st.count) };
        {
            let fut = values::ValuesFuture::new(
                &VALUED_ASYNC,
                [value(&5u32), RawValue::ABSENT],
                core::future::pending::<u32>(),
            );
            let mut fut = core::pin::pin!(fut);
            assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending);
            irq_sim::arm(handler);
        }
        assert_eq!(
            names_since(first),
            [
                "valued_async",
                "id",
                "future valued_async",
                "id",
                "busy",
                "wakes",
                "value 5",
                "handler"
            ]
        );
        // A future its caller follows itself (a `tracing` span's), the same way.
        let first = unsafe { with_thread_state(|st| st.count) };
        let start = crate::clock::ticks();
        super::exit_poll(values::enter_poll(&VALUED_ASYNC), 7);
        irq_sim::arm(handler);
        let times = super::FutureTimes {
            busy: 5,
            polls: 1,
            waits: None,
        };
        values::record_future_values(
            &VALUED_ASYNC,
            7,
            start,
            1,
            false,
            Some(times),
            &[value(&3u32)],
        );
        assert_eq!(
            names_since(first),
            [
                "valued_async",
                "id",
                "future valued_async",
                "id",
                "busy",
                "value 3",
                "handler"
            ]
        );
    });
}

#[test]
fn a_guard_whose_frame_is_gone_is_counted_lost_if_this_session_pushed_it() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    on_own_thread(|| {
        drop(enter(&A)); // joins
        unsafe { with_thread_state(|st| st.dropped = &DROPS) };
        let a = enter(&A);
        let b = enter(&B);
        drop(a); // pops b's frame with its own
        drop(b); // the frame is gone: b's call is lost
        assert_eq!(DROPS.load(Relaxed), 1, "the lost call is counted");
        let c = enter(&C);
        let d = enter(&D);
        drop(c); // pops d's frame
        let e = enter(&A); // another call takes d's slot
        drop(d); // not its frame: d's call is lost
        assert_eq!(
            DROPS.load(Relaxed),
            2,
            "a reused slot's stale guard is counted too"
        );
        drop(e);
        // A call that began before the state joined its session: not a
        // loss of this session (its frame went with the state it was in).
        let f = enter(&B);
        let g = enter(&C);
        drop(f);
        unsafe {
            with_thread_state(|st| {
                assert!(super::join(st, st.gen & !GEN_TAGS));
                st.dropped = &DROPS;
            })
        };
        drop(g);
        assert_eq!(
            DROPS.load(Relaxed),
            2,
            "an earlier session's guard is not this one's loss"
        );
        let names: Vec<_> = records().iter().map(|r| r.0).collect();
        assert_eq!(names, [] as [&str; 0], "the new session recorded nothing");
    });
}

#[test]
fn a_board_guards_serial_word_names_its_frame_and_its_session() {
    use super::guard_word::*;
    let gen = 5;
    let fast = gen << 3 | Decision::Record as u32;
    // The first hart's plain guard: the hart's fast word as it is.
    assert!(is_first(fast) && is_plain(fast));
    assert_eq!((frame_serial(fast), plain_generation(fast)), (0, Some(gen)));
    // Another hart's plain guard.
    let other_plain = OTHER | FAST | fast;
    assert!(!is_first(other_plain) && is_plain(other_plain));
    assert_eq!(
        (frame_serial(other_plain), plain_generation(other_plain)),
        (0, Some(gen))
    );
    // A general push's guard: its frame's serial.
    let general = OTHER | 0x12_3456;
    assert!(!is_first(general) && !is_plain(general));
    assert_eq!(
        (frame_serial(general), plain_generation(general)),
        (0x12_3456, None)
    );
    // A plain guard whose frame is gone is lost while its hart records its
    // session (whatever tags the state's generation has), not after.
    let never = |_: u32| -> bool { unreachable!("a plain guard has no frame serial") };
    assert!(pushed_in_session(gen, fast, never));
    assert!(pushed_in_session(gen | GEN_COUNTED, other_plain, never));
    assert!(!pushed_in_session(gen + 1, fast, never));
    // A general guard goes by its frame's serial.
    assert!(pushed_in_session(gen + 1, general, |s| s == 0x12_3456));
    assert!(!pushed_in_session(gen, general, |_| false));
}
