//! Recorded call trees against ground truth the tests keep themselves.
//!
//! Every traced fn here also pushes `(name, depth)` onto a thread-local log
//! through a `Truth` guard; the recorded pre-order calls of that thread must
//! match the log exactly (names, order, nesting), and flags must say which
//! calls ended by unwinding.

use fgtrace::trace::{flags, Call, Event, Trace};
use fgtrace::view::TraceViews;
use fgtrace::{traced, Config, Session};
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::Mutex;

/// Sessions are process-wide: tests in this binary take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    static LOG: RefCell<Vec<(String, usize)>> = const { RefCell::new(Vec::new()) };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

struct Truth;

fn truth(name: &str) -> Truth {
    let d = DEPTH.with(|d| d.replace(d.get() + 1));
    LOG.with(|l| l.borrow_mut().push((name.to_string(), d)));
    Truth
}

impl Drop for Truth {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
    }
}

fn take_log() -> Vec<(String, usize)> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// (name, depth) of the recorded calls of the thread with this tid, in order.
fn recorded(trace: &Trace, tid: u32) -> Vec<(String, usize)> {
    let t = trace
        .meta()
        .threads
        .iter()
        .position(|t| t.tid == tid)
        .expect("thread recorded") as u32;
    trace
        .calls()
        .filter(|c| c.thread == t)
        .map(|c| (trace.meta().site_name(c.site).to_string(), c.depth as usize))
        .collect()
}

fn calls_of<'a>(trace: &'a Trace, name: &'a str) -> impl Iterator<Item = Call> + 'a {
    trace
        .calls()
        .filter(move |c| trace.meta().site_name(c.site) == name)
}

fn tid() -> u32 {
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

#[traced]
fn fib(n: u32) -> u64 {
    let _t = truth("fib");
    if n < 2 {
        return n as u64;
    }
    fib(n - 1) + fib(n - 2)
}

#[derive(Debug)]
struct ParseError;

#[traced]
fn digit(c: char) -> Result<u32, ParseError> {
    let _t = truth("digit");
    c.to_digit(10).ok_or(ParseError)
}

#[traced]
fn number(s: &str) -> Result<u32, ParseError> {
    let _t = truth("number");
    if s.is_empty() {
        return Ok(0); // early return
    }
    let mut v = 0;
    for c in s.chars() {
        v = v * 10 + digit(c)?; // `?` exits through the guard
    }
    Ok(v)
}

#[test]
fn recursion_early_return_and_question_mark_match_ground_truth() {
    let _s = serial();
    take_log();
    let session = Session::start(Config::builtin().batch_calls(32)).unwrap();
    assert_eq!(fib(12), 144);
    assert_eq!(number("").unwrap(), 0);
    assert_eq!(number("123").unwrap(), 123);
    assert!(number("12x4").is_err());
    let trace = session.stop().unwrap();
    let truth = take_log();
    assert_eq!(recorded(&trace, tid()), truth);
    assert_eq!(calls_of(&trace, "fib").count(), 465);
    // 3 digits of "123", then '1', '2', 'x' of "12x4".
    assert_eq!(calls_of(&trace, "digit").count(), 6);
    // Children lie inside their parents in time.
    let calls: Vec<Call> = trace.calls().collect();
    let mut open: Vec<Call> = Vec::new();
    for c in &calls {
        while open.last().is_some_and(|p| p.depth >= c.depth) {
            open.pop();
        }
        if let Some(p) = open.last() {
            assert!(
                c.start_ns >= p.start_ns && c.end_ns() <= p.end_ns(),
                "{c:?} outside {p:?}"
            );
        }
        open.push(*c);
    }
}

#[traced]
fn explode(n: u32) -> u32 {
    let _t = truth("explode");
    if n == 0 {
        panic!("boom");
    }
    explode(n - 1) + 1
}

#[traced]
fn calm() -> u32 {
    let _t = truth("calm");
    7
}

#[traced]
fn guarded() -> bool {
    let _t = truth("guarded");
    calm();
    std::panic::catch_unwind(|| explode(3)).is_err()
}

#[test]
fn panics_caught_with_catch_unwind_are_recorded_and_marked_unwound() {
    let _s = serial();
    take_log();
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let session = Session::start(Config::builtin()).unwrap();
    assert!(guarded());
    assert_eq!(calm(), 7);
    let trace = session.stop().unwrap();
    std::panic::set_hook(prev);
    assert_eq!(recorded(&trace, tid()), take_log());
    let unwound: Vec<bool> = calls_of(&trace, "explode").map(|c| c.unwound()).collect();
    assert_eq!(unwound, vec![true; 4]);
    assert!(calls_of(&trace, "calm").all(|c| !c.unwound()));
    assert!(calls_of(&trace, "guarded").all(|c| !c.unwound()));
}

trait Shape {
    fn area(&self) -> f64;
}

struct Square(f64);
struct Circle(f64);

#[traced]
impl Shape for Square {
    fn area(&self) -> f64 {
        let _t = truth("Square::area");
        self.0 * self.0
    }
}

#[traced]
impl Shape for Circle {
    fn area(&self) -> f64 {
        let _t = truth("Circle::area");
        3.0 * self.0 * self.0
    }
}

struct Stack<T> {
    items: Vec<T>,
}

#[traced]
impl<T: Clone> Stack<T> {
    fn push(&mut self, t: T) {
        let _t = truth("Stack::push");
        self.items.push(t);
    }
    fn peek(&self) -> Option<T> {
        let _t = truth("Stack::peek");
        self.items.last().cloned()
    }
    #[fgtrace::notrace]
    fn len(&self) -> usize {
        self.items.len()
    }
}

#[traced]
fn total_area<S: Shape + ?Sized>(shapes: &[Box<S>]) -> f64 {
    let _t = truth("total_area");
    shapes.iter().map(|s| s.area()).sum()
}

#[traced]
fn largest<T: PartialOrd + Copy>(xs: &[T]) -> T {
    let _t = truth("largest");
    xs.iter()
        .copied()
        .fold(xs[0], |a, b| if b > a { b } else { a })
}

#[test]
fn generic_fns_trait_methods_and_impl_blocks_are_traced() {
    let _s = serial();
    take_log();
    let session = Session::start(Config::builtin()).unwrap();
    let shapes: Vec<Box<dyn Shape>> = vec![
        Box::new(Square(2.0)),
        Box::new(Circle(1.0)),
        Box::new(Square(1.0)),
    ];
    total_area(&shapes);
    assert_eq!(largest(&[3, 9, 2]), 9);
    assert_eq!(largest(&[1.5, 0.5]), 1.5);
    let mut st = Stack { items: vec![] };
    st.push("a");
    st.push("b");
    assert_eq!(st.peek(), Some("b"));
    assert_eq!(st.len(), 2);
    let trace = session.stop().unwrap();
    assert_eq!(recorded(&trace, tid()), take_log());
    assert_eq!(calls_of(&trace, "Square::area").count(), 2);
    assert_eq!(calls_of(&trace, "largest").count(), 2);
    assert_eq!(calls_of(&trace, "Stack::len").count(), 0, "notrace opt-out");
}

#[test]
fn four_threads_are_attributed_to_their_own_threads() {
    let _s = serial();
    let session = Session::start(Config::builtin().batch_calls(64)).unwrap();
    let handles: Vec<_> = (0..4u32)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("fib-{i}"))
                .spawn(move || {
                    take_log();
                    fib(8 + i);
                    (tid(), take_log())
                })
                .unwrap()
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let trace = session.stop().unwrap();
    for (i, (tid, truth)) in results.iter().enumerate() {
        assert_eq!(&recorded(&trace, *tid), truth, "thread {i}");
        let t = trace.meta().threads.iter().find(|t| t.tid == *tid).unwrap();
        assert_eq!(t.name, format!("fib-{i}"));
        assert_eq!(t.calls as usize, truth.len());
    }
}

#[traced]
async fn fetch(i: u64) -> Result<u64, String> {
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    let v = double(i)?;
    Ok(v)
}

#[traced]
fn double(i: u64) -> Result<u64, String> {
    if i == 999 {
        return Err("no".into());
    }
    Ok(i * 2)
}

#[traced]
async fn gather(n: u64) -> u64 {
    let mut handles = Vec::new();
    for i in 0..n {
        handles.push(tokio::spawn(fetch(i)));
    }
    let mut sum = 0;
    for h in handles {
        sum += h.await.unwrap().unwrap();
    }
    sum
}

#[test]
fn async_fns_on_a_multi_thread_runtime_record_polls_and_whole_futures() {
    let _s = serial();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let session = Session::start(Config::builtin()).unwrap();
    let sum = rt.block_on(gather(16));
    let trace = session.stop().unwrap();
    drop(rt);
    assert_eq!(sum, (0..16).map(|i| i * 2).sum::<u64>());
    let m = trace.meta();
    let futures: Vec<_> = trace
        .events()
        .filter_map(|e| match e {
            Event::Future(f) => Some(f),
            _ => None,
        })
        .collect();
    let fetches: Vec<_> = futures
        .iter()
        .filter(|f| m.site_name(f.site) == "fetch")
        .collect();
    let gathers: Vec<_> = futures
        .iter()
        .filter(|f| m.site_name(f.site) == "gather")
        .collect();
    assert_eq!(fetches.len(), 16, "one whole-future record per fetch");
    assert_eq!(gathers.len(), 1);
    // Each fetch awaits twice, so it is polled at least 3 times; each poll is a call.
    assert!(fetches.iter().all(|f| f.polls >= 3 && !f.cancelled));
    let polls: Vec<Call> = calls_of(&trace, "fetch").collect();
    assert!(polls.iter().all(|c| c.is_poll()));
    assert_eq!(
        polls.len() as u32,
        fetches.iter().map(|f| f.polls).sum::<u32>()
    );
    // The whole future lasts at least its 1 ms sleep and spans all of its polls.
    for f in &fetches {
        assert!(f.dur_ns >= 1_000_000, "{f:?}");
    }
    // `double` runs inside the last poll of `fetch`, nested one level deeper.
    let calls: Vec<Call> = trace.calls().collect();
    for (i, c) in calls.iter().enumerate() {
        if m.site_name(c.site) == "double" {
            let parent = calls[..i]
                .iter()
                .rev()
                .find(|p| p.thread == c.thread && p.depth < c.depth)
                .unwrap();
            assert_eq!(m.site_name(parent.site), "fetch");
            assert_eq!(parent.depth + 1, c.depth);
        }
    }
    // `gather` is polled on the test thread, the spawned fetches on workers.
    let gather_threads: std::collections::HashSet<u32> =
        calls_of(&trace, "gather").map(|c| c.thread).collect();
    let fetch_threads: std::collections::HashSet<u32> = polls.iter().map(|c| c.thread).collect();
    assert!(gather_threads.is_disjoint(&fetch_threads));
}

#[traced]
async fn two_steps() -> u32 {
    YieldOnce(false).await;
    calm()
}

/// Returns Pending once, then Ready.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }
}

#[test]
fn a_future_that_moves_between_threads_is_one_whole_record_and_one_poll_per_thread() {
    let _s = serial();
    let session = Session::start(Config::builtin()).unwrap();
    let mut fut = Box::pin(two_steps());
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    let first = tid();
    let (second, out) = std::thread::spawn(move || {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let out = fut.as_mut().poll(&mut cx);
        (tid(), out)
    })
    .join()
    .unwrap();
    let trace = session.stop().unwrap();
    assert_eq!(out, std::task::Poll::Ready(7));
    let m = trace.meta();
    let polls: Vec<Call> = calls_of(&trace, "two_steps").collect();
    assert_eq!(polls.len(), 2);
    assert_eq!(m.threads[polls[0].thread as usize].tid, first);
    assert_eq!(m.threads[polls[1].thread as usize].tid, second);
    // `calm` ran inside the second poll, on the second thread.
    assert_eq!(
        recorded(&trace, second),
        vec![("two_steps".to_string(), 0), ("calm".to_string(), 1)]
    );
    let whole: Vec<_> = trace
        .events()
        .filter_map(|e| match e {
            Event::Future(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(whole.len(), 1);
    assert_eq!(
        (whole[0].polls, m.threads[whole[0].thread as usize].tid),
        (2, second)
    );
    assert_eq!(whole[0].start_ns, polls[0].start_ns.min(whole[0].start_ns));
    assert!(
        whole[0].start_ns <= polls[0].start_ns
            && whole[0].start_ns + whole[0].dur_ns >= polls[1].end_ns()
    );
}

#[traced]
fn busy_wait(us: u64) {
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

#[test]
fn a_busy_wait_shows_at_least_its_length() {
    let _s = serial();
    let session = Session::start(Config::builtin()).unwrap();
    busy_wait(150);
    busy_wait(12);
    let trace = session.stop().unwrap();
    let d: Vec<u64> = calls_of(&trace, "busy_wait").map(|c| c.dur_ns).collect();
    assert!(d[0] >= 150_000 && d[0] < 5_000_000, "{d:?}");
    assert!(d[1] >= 12_000, "{d:?}");
    let mut graph = Vec::new();
    trace.write_graph(&Default::default(), &mut graph).unwrap();
    let graph = String::from_utf8(graph).unwrap();
    let lines: Vec<&str> = graph.lines().filter(|l| l.contains("busy_wait")).collect();
    assert!(
        lines[0].contains(" ! "),
        "150 us is marked `!`: {}",
        lines[0]
    );
    assert!(
        lines[1].contains(" + "),
        "12 us is marked `+`: {}",
        lines[1]
    );
}

#[test]
fn stream_mode_counts_every_dropped_call() {
    let _s = serial();
    // Tiny batches and one batch in flight: the collector (polling every
    // 0.5 ms) falls behind, batches are dropped, and the traced thread is
    // never blocked. Every call is either recorded or counted as lost.
    let session =
        Session::start(Config::builtin().batch_calls(16).max_batches_in_flight(1)).unwrap();
    for _ in 0..50 {
        fib(10); // 177 calls each
    }
    let trace = session.stop().unwrap();
    let t = &trace.meta().threads[0];
    assert!(t.lost > 0, "expected drops with 1 batch in flight");
    assert_eq!(t.calls + t.lost, 50 * 177);
    let lost_events: u64 = trace
        .events()
        .filter_map(|e| match e {
            Event::Lost(l) => Some(l.count),
            _ => None,
        })
        .sum();
    assert_eq!(
        lost_events, t.lost,
        "every loss has a LOST marker in the stream"
    );
}

#[test]
fn flight_recorder_keeps_the_last_calls_per_thread() {
    let _s = serial();
    let session = Session::start(Config::builtin().flight_recorder(64)).unwrap();
    for i in 0..100 {
        largest(&[i, i + 1]);
    }
    fib(5); // 15 calls, the newest
    let trace = session.stop().unwrap();
    let t = &trace.meta().threads[0];
    assert_eq!(t.calls, 64);
    assert_eq!(t.lost, 100 + 15 - 64);
    let names: Vec<String> = trace
        .calls()
        .map(|c| trace.meta().site_name(c.site).to_string())
        .collect();
    assert_eq!(
        names.iter().filter(|n| *n == "fib").count(),
        15,
        "the newest calls are kept"
    );
    // The whole fib(5) tree is intact: its root is at depth 0 with children.
    let root = calls_of(&trace, "fib").next().unwrap();
    assert_eq!(root.depth, 0);
    assert!(root.flags & flags::HAS_CHILDREN != 0);
}

#[traced(values(n), ret)]
fn valued(n: u64) -> u64 {
    n + 1
}

/// A call with values is three records (the call, a value, the return
/// value): the ring overwrites records, and counts only the calls among
/// them as overwritten calls.
#[test]
fn flight_recorder_counts_overwritten_calls_not_records() {
    let _s = serial();
    let session = Session::start(Config::builtin().flight_recorder(64)).unwrap();
    for i in 0..100 {
        std::hint::black_box(valued(i));
    }
    fib(5); // 15 calls, the newest
    let trace = session.stop().unwrap();
    let t = &trace.meta().threads[0];
    assert_eq!(t.calls + t.lost, 100 + 15, "{t:?}");
    assert!(t.lost > 0, "older calls overwritten: {t:?}");
}

#[test]
fn shadow_stack_overruns_are_counted_and_nothing_is_mispaired() {
    let _s = serial();
    take_log();
    let session = Session::start(Config::builtin().stack_depth(5)).unwrap();
    fib(7); // depth up to 7: frames 6 and 7 do not fit
    let trace = session.stop().unwrap();
    let truth = take_log();
    let expected: Vec<_> = truth.iter().filter(|(_, d)| *d < 5).cloned().collect();
    assert_eq!(recorded(&trace, tid()), expected);
    assert_eq!(
        trace.meta().threads[0].overruns as usize,
        truth.len() - expected.len()
    );
}

#[test]
fn filters_depth_threshold_graph_function_and_notrace() {
    let _s = serial();
    let run = |cfg: Config| {
        take_log();
        let session = Session::start(cfg).unwrap();
        guarded_quiet();
        let trace = session.stop().unwrap();
        let names: Vec<String> = trace
            .calls()
            .map(|c| format!("{}:{}", trace.meta().site_name(c.site), c.depth))
            .collect();
        names
    };
    let all = run(Config::builtin());
    assert_eq!(
        all,
        vec![
            "guarded_quiet:0",
            "calm:1",
            "number:1",
            "digit:2",
            "digit:2",
            "fib:1",
            "fib:2",
            "fib:2"
        ]
    );
    assert_eq!(
        run(Config::builtin().max_depth(2)),
        vec!["guarded_quiet:0", "calm:1", "number:1", "fib:1"]
    );
    assert_eq!(
        run(Config::builtin().filter(["fib", "digit"])),
        vec!["digit:0", "digit:0", "fib:0", "fib:1", "fib:1"]
    );
    assert_eq!(run(Config::builtin().exclude(["fib"])).len(), 5);
    assert_eq!(
        run(Config::builtin().notrace(["number"])),
        vec!["guarded_quiet:0", "calm:1", "fib:1", "fib:2", "fib:2"]
    );
    assert_eq!(
        run(Config::builtin().graph_functions(["number"])),
        vec!["number:0", "digit:1", "digit:1"]
    );
    let slow = run(Config::builtin().threshold(std::time::Duration::from_micros(100)));
    assert_eq!(
        slow,
        vec!["guarded_quiet:0", "calm:1"],
        "only calls >= 100us, with their parents"
    );
}

#[traced]
fn guarded_quiet() {
    calm_slow();
    number("42").unwrap();
    fib(2);
}

#[traced(name = "calm")]
fn calm_slow() {
    busy_wait_untraced(200);
}

fn busy_wait_untraced(us: u64) {
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_micros(us) {}
}

#[test]
fn environment_variables_configure_a_session_and_bad_values_are_errors() {
    let _s = serial();
    // SAFETY: tests in this binary that read the environment hold SERIAL.
    unsafe { std::env::set_var("FGTRACE_FILTER", "digit") };
    let cfg = Config::default();
    unsafe { std::env::remove_var("FGTRACE_FILTER") };
    let session = Session::start(cfg).unwrap();
    number("12").unwrap();
    let trace = session.stop().unwrap();
    assert_eq!(trace.calls().count(), 2);
    unsafe { std::env::set_var("FGTRACE_DEPTH", "lots") };
    let cfg = Config::default();
    unsafe { std::env::remove_var("FGTRACE_DEPTH") };
    let err = Session::start(cfg)
        .err()
        .expect("bad FGTRACE_DEPTH is an error")
        .to_string();
    assert!(err.contains("FGTRACE_DEPTH"), "{err}");
}

#[test]
fn one_session_at_a_time_and_pause_resume() {
    let _s = serial();
    let session = Session::start(Config::builtin()).unwrap();
    assert!(matches!(
        Session::start(Config::builtin()),
        Err(fgtrace::Error::AlreadyRunning)
    ));
    calm();
    session.pause();
    calm();
    calm();
    session.resume();
    calm();
    let trace = session.stop().unwrap();
    assert_eq!(calls_of(&trace, "calm").count(), 2);
}

#[test]
fn traces_round_trip_through_files_within_8_bytes_per_call() {
    let _s = serial();
    let session = Session::start(Config::builtin()).unwrap();
    fib(20);
    let trace = session.stop().unwrap();
    let dir = std::env::temp_dir().join(format!("fgtrace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("fib.fgt");
    trace.save(&path).unwrap();
    let back = Trace::load(&path).unwrap();
    assert_eq!(back.meta(), trace.meta());
    assert!(back.events().eq(trace.events()));
    let calls = trace.meta().total_calls();
    assert_eq!(calls, 21891);
    let per_call = trace.encoded_len() as f64 / calls as f64;
    assert!(per_call <= 8.0, "{per_call:.2} bytes per call on disk");
    // Truncated: the error names the offset, earlier events are still read.
    let bytes = std::fs::read(&path).unwrap();
    let cut = &bytes[..bytes.len() - 100];
    let mut ok = 0;
    let mut err = None;
    for e in fgtrace::trace::TraceReader::new(cut).unwrap().events() {
        match e {
            Ok(_) => ok += 1,
            Err(e) => err = Some(e.to_string()),
        }
    }
    // Chunks hold 8192 events: the two complete ones are read.
    assert_eq!(ok, 2 * fgtrace::trace::encoding::CHUNK_EVENTS);
    assert!(err.unwrap().contains("truncated at byte"));
    std::fs::remove_dir_all(&dir).ok();
}
