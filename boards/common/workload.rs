// The example boards' workload, the same on every board (included by each
// board's main.rs with `include!`, so its functions are the crate's own:
// `fgtrace_board_demo::split_work` on every board). The board supplies
// `instret()`, its instruction counter, and `board`, the runtime.
//
// Ordinary `#[fgtrace::traced]` code: a recursive-descent parser and
// evaluator, a CRC, integer matrix math, recursion, an async fn driven by a
// tiny executor, a 3:1 split of untraced work under one traced call for the
// sampler, and what the timer interrupt runs. Every traced function also
// counts its own calls in a plain static, independently of fgtrace: the
// ground truth, printed as `truth NAME CALLS` (an async fn's calls are its
// polls; its futures and polls also as `future NAME FUTURES POLLS`).

/// Ground truth: each traced function counts its own calls here.
struct Truth {
    name: &'static str,
    calls: AtomicU32,
}

macro_rules! truth {
    ($all:ident: $($id:ident = $name:literal),* $(,)?) => {
        $(static $id: Truth = Truth { name: $name, calls: AtomicU32::new(0) };)*
        static $all: &[&Truth] = &[$(&$id),*];
    };
}

truth!(
    ALL:
    T_RUN = "run_round",
    T_EXPR = "parse_expr",
    T_TERM = "parse_term",
    T_FACTOR = "parse_factor",
    T_EVAL = "evaluate",
    T_CRC = "crc32",
    T_CRC_BYTE = "crc32_byte",
    T_MATMUL = "mat_mul",
    T_DOT = "dot",
    T_FIB = "fib",
    T_SPLIT = "split_work",
    T_COST = "probe_cost_leaf",
    T_IRQ = "irq_tick",
    T_IRQ_LEAF = "irq_leaf",
    T_ASYNC = "async_sum",
    T_ASYNC_STEP = "async_step",
);

/// Ground truth of the async fn's futures (its polls are `T_ASYNC`'s
/// calls), printed as `future async_sum FUTURES POLLS`.
static ASYNC_FUTURES: AtomicU32 = AtomicU32::new(0);

fn count(t: &Truth) {
    t.calls.fetch_add(1, Relaxed);
}

/// A recursive-descent parser over `+ - * / ( )` and integers, evaluating as
/// it goes (no allocation).
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
}

#[fgtrace::traced]
fn parse_expr(p: &mut Parser<'_>) -> i64 {
    count(&T_EXPR);
    let mut v = parse_term(p);
    while let Some(op @ (b'+' | b'-')) = p.peek() {
        p.i += 1;
        let r = parse_term(p);
        v = if op == b'+' { v.wrapping_add(r) } else { v.wrapping_sub(r) };
    }
    v
}

#[fgtrace::traced]
fn parse_term(p: &mut Parser<'_>) -> i64 {
    count(&T_TERM);
    let mut v = parse_factor(p);
    while let Some(op @ (b'*' | b'/')) = p.peek() {
        p.i += 1;
        let r = parse_factor(p);
        v = if op == b'*' {
            v.wrapping_mul(r)
        } else if r != 0 {
            v / r
        } else {
            0
        };
    }
    v
}

#[fgtrace::traced]
fn parse_factor(p: &mut Parser<'_>) -> i64 {
    count(&T_FACTOR);
    if p.peek() == Some(b'(') {
        p.i += 1;
        let v = parse_expr(p);
        p.i += 1; // ')'
        return v;
    }
    let mut v = 0i64;
    while let Some(d @ b'0'..=b'9') = p.peek() {
        v = v * 10 + (d - b'0') as i64;
        p.i += 1;
    }
    v
}

#[fgtrace::traced]
fn evaluate(src: &str) -> i64 {
    count(&T_EVAL);
    parse_expr(&mut Parser {
        s: src.as_bytes(),
        i: 0,
    })
}

#[fgtrace::traced]
fn crc32_byte(crc: u32, b: u8) -> u32 {
    count(&T_CRC_BYTE);
    let mut c = crc ^ b as u32;
    for _ in 0..8 {
        c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
    }
    c
}

#[fgtrace::traced]
fn crc32(data: &[u8]) -> u32 {
    count(&T_CRC);
    !data.iter().fold(!0u32, |c, &b| crc32_byte(c, b))
}

const N: usize = 6;

#[fgtrace::traced]
fn dot(a: &[[i32; N]; N], b: &[[i32; N]; N], i: usize, j: usize) -> i32 {
    count(&T_DOT);
    (0..N).map(|k| a[i][k].wrapping_mul(b[k][j])).fold(0, i32::wrapping_add)
}

#[fgtrace::traced]
fn mat_mul(a: &[[i32; N]; N], b: &[[i32; N]; N]) -> [[i32; N]; N] {
    count(&T_MATMUL);
    let mut c = [[0; N]; N];
    for (i, row) in c.iter_mut().enumerate() {
        for (j, x) in row.iter_mut().enumerate() {
            *x = dot(a, b, i, j);
        }
    }
    c
}

#[fgtrace::traced]
fn fib(n: u32) -> u64 {
    count(&T_FIB);
    if n < 2 {
        n as u64
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

/// An `.await` that yields once: pending (asking at once to be polled
/// again), then ready.
struct YieldNow(bool);

impl core::future::Future for YieldNow {
    type Output = ();
    fn poll(
        mut self: core::pin::Pin<&mut Self>,
        cx: &mut core::task::Context<'_>,
    ) -> core::task::Poll<()> {
        if self.0 {
            return core::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        core::task::Poll::Pending
    }
}

#[fgtrace::traced]
fn async_step(acc: u64, i: u32) -> u64 {
    count(&T_ASYNC_STEP);
    acc.rotate_left(5) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// An async fn: `n` steps, yielding to the executor after each, so its
/// future is polled `n + 1` times (each poll a call; the future, first poll
/// to completion, recorded once).
#[fgtrace::traced]
async fn async_sum(n: u32) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = async_step(acc, i);
        YieldNow(false).await;
    }
    acc
}

/// A tiny executor with no allocation: polls `fut` with a waker that does
/// nothing until it is ready (whatever is pending asks to be polled again
/// at once), counting the polls (and the future) as the ground truth.
fn block_on<F: core::future::Future>(fut: F) -> F::Output {
    let mut fut = core::pin::pin!(fut);
    let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    ASYNC_FUTURES.fetch_add(1, Relaxed);
    loop {
        count(&T_ASYNC);
        if let core::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// Untraced work the sampler finds under `split_work`: 3 parts here ...
#[inline(never)]
fn heavy_three(iters: u32) -> u32 {
    let mut x = 1u32;
    for _ in 0..3 * iters {
        x = black_box(x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223));
    }
    x
}

/// ... and 1 part here.
#[inline(never)]
fn light_one(iters: u32) -> u32 {
    let mut x = 7u32;
    for _ in 0..iters {
        x = black_box(x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223));
    }
    x
}

#[fgtrace::traced]
fn split_work(iters: u32) -> u32 {
    count(&T_SPLIT);
    heavy_three(iters) ^ light_one(iters)
}

const EXPRESSIONS: &[&str] = &[
    "1+2*3",
    "(4+5)*(6-2)/3",
    "((1+2)*(3+4))-5*6+7",
    "100/(7-2)+3*(2+(8/4))",
];

#[fgtrace::traced]
fn run_round(round: u32, split_iters: u32) -> u64 {
    count(&T_RUN);
    let mut acc = 0u64;
    for e in EXPRESSIONS {
        acc = acc.wrapping_add(evaluate(e) as u64);
    }
    let mut data = [0u8; 64];
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i as u32 * 31 + round) as u8;
    }
    acc ^= crc32(&data) as u64;
    let mut a = [[0i32; N]; N];
    for (i, row) in a.iter_mut().enumerate() {
        for (j, x) in row.iter_mut().enumerate() {
            *x = (i * N + j) as i32 + round as i32;
        }
    }
    let c = mat_mul(&a, &a);
    acc = acc.wrapping_add(c[N - 1][N - 1] as u64);
    acc = acc.wrapping_add(fib(10));
    acc = acc.wrapping_add(block_on(async_sum(3)));
    acc ^ split_work(split_iters) as u64
}

/// What the timer interrupt runs besides the sampler: a traced call with a
/// traced callee.
#[fgtrace::traced]
fn irq_tick(seed: u32) -> u32 {
    count(&T_IRQ);
    irq_leaf(seed) ^ irq_leaf(seed.rotate_left(7))
}

#[fgtrace::traced]
fn irq_leaf(x: u32) -> u32 {
    count(&T_IRQ_LEAF);
    x.wrapping_mul(0x9e37_79b9) >> 3
}

// Never inlined, as `plain_leaf`: the figures compare two real calls.
#[inline(never)]
#[fgtrace::traced]
fn probe_cost_leaf(x: u32) -> u32 {
    black_box(x) + 1
}

#[inline(never)]
fn plain_leaf(x: u32) -> u32 {
    black_box(x) + 1
}

const ROUNDS: u32 = 24;
const SPLIT_ITERS: u32 = 60_000;
/// Fewer than a stream buffer holds: no handoff inside the loop.
const COST_PROBE_CALLS: u32 = 200;
const COST_STREAM_CALLS: u32 = 1024;

/// Instructions per call, counted with `minstret` around a loop (exact
/// under `qemu -icount`): a traced leaf while recording with no buffer
/// handoff inside the loop (the probe alone), the same including the
/// stream's framing and UART output (amortised over 1024 calls), and the
/// untraced leaf; then the leaf's first call, before the loops: a site's
/// first call in a session takes the general path, which sends the site's
/// name (once per site and session, so not a cost per call).
fn probe_cost() -> (u64, u64, u64, u64) {
    let per_call = |f: fn(u32) -> u32, n: u32| {
        let a = instret();
        for i in 0..n {
            black_box(f(black_box(i)));
        }
        // Rounded: on a board whose counter ticks every few instructions
        // (Cortex-M's timer, 40), the loop's count is off by up to a tick,
        // less than half an instruction per call over these loops.
        (instret() - a + n as u64 / 2) / n as u64
    };
    board::flush();
    let first = per_call(probe_cost_leaf, 1);
    let probe = per_call(probe_cost_leaf, COST_PROBE_CALLS);
    let streamed = per_call(probe_cost_leaf, COST_STREAM_CALLS);
    let plain = per_call(plain_leaf, COST_STREAM_CALLS);
    (probe, streamed, plain, first)
}


// ------------------------------------------------------- losses (a test build)

// Built with the `losses` feature (run.sh with LOSSES=1), for the test that
// checks that a board's losses are counted and shown: instead of the rounds,
// three sessions that each lose calls in a known way.
#[cfg(feature = "losses")]
truth!(
    LOSSES:
    T_STOP_INSIDE = "stop_inside",
    T_TASK_A = "task_a",
    T_TASK_B = "task_b",
    T_ACROSS = "across_sessions",
    T_THIRD = "in_third_session",
);

/// Stops the session from inside `n` nested traced calls: they are open at
/// stop and end after it, so the session never records them; it counts them.
#[cfg(feature = "losses")]
#[fgtrace::traced]
fn stop_inside(n: u32) {
    count(&T_STOP_INSIDE);
    if black_box(n) > 1 {
        stop_inside(n - 1)
    } else {
        board::stop()
    }
}

#[cfg(feature = "losses")]
static TASK_A: fgtrace::core::site::Site =
    fgtrace::core::site::Site::new("task_a", module_path!(), file!(), line!(), false);
#[cfg(feature = "losses")]
static TASK_B: fgtrace::core::site::Site =
    fgtrace::core::site::Site::new("task_b", module_path!(), file!(), line!(), false);

/// Two tasks' calls interleaved on one hart's shadow stack, as a task
/// switch leaves them: task A's call begins, task B's begins above it, A's
/// returns first (its exit pops B's frame with its own), then B's, whose
/// frame is gone: B's call cannot be recorded and is counted lost. (These
/// are their sites' first calls in the session, which take the shadow
/// stack on every board; lean calls interleaved so are left out by the
/// host, and counted, see `board_stream`'s tests.)
#[cfg(feature = "losses")]
fn interleaved_tasks() {
    count(&T_TASK_A);
    let a = fgtrace::core::probe::enter(&TASK_A);
    count(&T_TASK_B);
    let b = fgtrace::core::probe::enter(&TASK_B);
    black_box(&b);
    drop(a);
    drop(b);
}

/// A call of the third session.
#[cfg(feature = "losses")]
#[fgtrace::traced]
fn in_third_session(x: u32) -> u32 {
    count(&T_THIRD);
    black_box(x) ^ 1
}

/// Stops the session from inside itself and starts the next one before it
/// returns: open at the stop, it is counted lost in the session it began
/// in; it ends in the next one (which the hart has joined: a call made
/// there first), and that one neither records it nor counts it (it began
/// before).
#[cfg(feature = "losses")]
#[fgtrace::traced]
fn across_sessions() {
    count(&T_ACROSS);
    board::stop();
    board::start(fgtrace::wire::MODE_STREAM, 0, 0);
    black_box(in_third_session(black_box(7)));
}

/// The `losses` build's run, in the session the host started: calls
/// recorded, then a stop inside three traced calls (3 lost: open at stop);
/// then a session of its own: calls recorded, a task's call whose frame
/// another task's exit popped (1 lost), and a call open at its stop (1
/// lost) that starts a third session, ends in it, and is recorded in
/// neither; the third session records its own call.
#[cfg(feature = "losses")]
fn losses() {
    black_box(fib(black_box(5)));
    stop_inside(3);
    board::start(fgtrace::wire::MODE_STREAM, 0, 0);
    black_box(crc32(black_box(&[1, 2, 3, 4])));
    interleaved_tasks();
    across_sessions();
    board::stop();
    for t in LOSSES {
        board::textf(format_args!("truth {} {}", t.name, t.calls.load(Relaxed)));
    }
}

/// What every example board runs once its runtime is set up: waits for the
/// host's command (10 s of the board's time, then records with sampling at
/// 10 kHz, the run scripts' default rate: under `-icount` qemu reads the
/// host's input only between the guest's timer events, so on a loaded
/// machine the command can come after the wait, and the run is then the
/// same as with it), runs the
/// rounds with the sampling timer on (`timer(true)`; `timer(false)` stops
/// it), measures the probe, stops the session and prints the ground truth.
/// `ms()`: milliseconds on any clock of the board.
fn demo(rx: &mut dyn CommandInput, timer: fn(bool), ms: fn() -> u64) {
    board::text("fgtrace board demo: send `record <ms> <hz>` or `flight <hz>`");
    let waited = ms();
    while !board::recording() {
        board::poll(rx);
        if ms() - waited > 10_000 {
            board::text("no command: recording with sampling at 10000 Hz");
            board::start(fgtrace::wire::MODE_STREAM, 10_000, 0);
        }
    }
    // The `losses` build runs its three sessions instead of the rounds.
    #[cfg(feature = "losses")]
    {
        let _ = timer;
        losses();
    }
    #[cfg(not(feature = "losses"))]
    rounds(rx, timer);
    for t in ALL {
        board::textf(format_args!("truth {} {}", t.name, t.calls.load(Relaxed)));
    }
    board::textf(format_args!(
        "future async_sum {} {}",
        ASYNC_FUTURES.load(Relaxed),
        T_ASYNC.calls.load(Relaxed)
    ));
}

/// The rounds with the sampling timer on, then the probe's cost measured
/// while recording, the session stopped, and the cost measured again, off.
fn rounds(rx: &mut dyn CommandInput, timer: fn(bool)) {
    timer(true);
    let mut acc = 0u64;
    let mut rounds = 0;
    while rounds < ROUNDS && board::recording() && !board::expired() {
        acc = acc.wrapping_add(run_round(rounds, SPLIT_ITERS));
        rounds += 1;
        board::flush();
        board::poll(rx);
    }
    timer(false);
    let recorded = board::recording();
    let (probe, streamed, plain, first) = probe_cost();
    if recorded {
        T_COST
            .calls
            .fetch_add(1 + COST_PROBE_CALLS + COST_STREAM_CALLS, Relaxed);
        board::stop();
    }
    let (off, _, _, _) = probe_cost();
    board::textf(format_args!("done: {rounds} rounds, result {acc:#x}"));
    board::textf(format_args!(
        "probe-cost instructions per call: recording {probe}, recording and streaming {streamed}, off {off}, untraced {plain}"
    ));
    board::textf(format_args!(
        "probe-cost instructions of the leaf's first call in the session (its site sent): {first}"
    ));
}
