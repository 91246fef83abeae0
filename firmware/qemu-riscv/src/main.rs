//! fgtrace on bare-metal RISC-V (qemu `virt`, machine mode, no OS).
//!
//! The workload is ordinary `#[fgtrace::traced]` code: a recursive-descent
//! parser and evaluator, a CRC, integer matrix math, recursion, and a 3:1
//! split of untraced work under one traced call for the sampler. Every traced
//! function also counts its own calls in a plain static, independently of
//! fgtrace: the ground truth, printed as `truth NAME CALLS` at the end.
//!
//! Board support, all in this file: the UART at 0x1000_0000 is the sink and
//! the command source, the CLINT timer interrupt drives the sampler, the
//! SiFive test device at 0x10_0000 ends the run.
#![no_std]
#![no_main]

use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use fgtrace::runtime::{self as board, Board, Sink, Source};

// ------------------------------------------------------------ board support

const UART: usize = 0x1000_0000;
const CLINT_MTIMECMP: usize = 0x200_4000;
const TEST_DEVICE: usize = 0x10_0000;
/// `mtime` (`rdtime`) ticks per second on qemu `virt`: the timer's clock.
const MTIME_HZ: u64 = 10_000_000;
/// `mcycle` per second: the probe's clock. Under qemu `-icount shift=0`
/// (run.sh) one instruction is one virtual nanosecond and `mcycle` counts
/// instructions, so 1 GHz; on a real board, its core clock.
const MCYCLE_HZ: u64 = 1_000_000_000;

struct Uart;

impl Sink for Uart {
    fn write(&mut self, bytes: &[u8]) -> usize {
        for &b in bytes {
            // SAFETY: the 16550's transmit register; qemu takes every byte.
            unsafe { core::ptr::write_volatile(UART as *mut u8, b) };
        }
        bytes.len()
    }
}

impl Source for Uart {
    fn read(&mut self) -> Option<u8> {
        // SAFETY: the 16550's line status and receive registers.
        unsafe {
            let lsr = core::ptr::read_volatile((UART + 5) as *const u8);
            (lsr & 1 != 0).then(|| core::ptr::read_volatile(UART as *const u8))
        }
    }
}

static mut UART_SINK: Uart = Uart;

fn exit(code: u32) -> ! {
    let v = if code == 0 { 0x5555 } else { (code << 16) | 0x3333 };
    // SAFETY: the SiFive test device: qemu exits.
    unsafe { core::ptr::write_volatile(TEST_DEVICE as *mut u32, v) };
    loop {
        core::hint::spin_loop();
    }
}

/// The CLINT's `mtime`, which the timer compares with (the probe reads
/// `mcycle`).
fn mtime() -> u64 {
    #[cfg(target_arch = "riscv64")]
    {
        let t: u64;
        // SAFETY: reads the time CSR.
        unsafe { core::arch::asm!("rdtime {}", out(reg) t) };
        t
    }
    #[cfg(target_arch = "riscv32")]
    loop {
        let (hi, lo, hi2): (u32, u32, u32);
        // SAFETY: reads the time CSR halves.
        unsafe {
            core::arch::asm!("rdtimeh {0}", "rdtime {1}", "rdtimeh {2}",
                out(reg) hi, out(reg) lo, out(reg) hi2)
        };
        if hi == hi2 {
            break (hi as u64) << 32 | lo as u64;
        }
    }
}

/// `mtime` ticks between two samples at the session's rate (0: none).
fn sample_every() -> u64 {
    match board::sample_hz() {
        0 => 0,
        hz => MTIME_HZ / hz as u64,
    }
}

fn set_timer(at: u64) {
    // SAFETY: hart 0's mtimecmp; the high word first so no early match fires.
    unsafe {
        let p = CLINT_MTIMECMP as *mut u32;
        core::ptr::write_volatile(p.add(1), u32::MAX);
        core::ptr::write_volatile(p, at as u32);
        core::ptr::write_volatile(p.add(1), (at >> 32) as u32);
    }
}

fn timer_interrupts(on: bool) {
    // SAFETY: machine-mode CSRs: mie.MTIE and mstatus.MIE.
    unsafe {
        if on {
            core::arch::asm!("csrs mie, {}", in(reg) 1usize << 7);
            core::arch::asm!("csrsi mstatus, 8");
        } else {
            core::arch::asm!("csrc mie, {}", in(reg) 1usize << 7);
        }
    }
}

fn instret() -> u64 {
    #[cfg(target_arch = "riscv64")]
    {
        let v: u64;
        // SAFETY: reads a counter CSR.
        unsafe { core::arch::asm!("csrr {}, minstret", out(reg) v) };
        v
    }
    #[cfg(target_arch = "riscv32")]
    loop {
        let (hi, lo, hi2): (u32, u32, u32);
        // SAFETY: reads counter CSRs.
        unsafe {
            core::arch::asm!("csrr {0}, minstreth", "csrr {1}, minstret", "csrr {2}, minstreth",
                out(reg) hi, out(reg) lo, out(reg) hi2)
        };
        if hi == hi2 {
            break (hi as u64) << 32 | lo as u64;
        }
    }
}

#[cfg(target_arch = "riscv64")]
macro_rules! rv {
    () => {
        ".equ REGBYTES, 8\n.macro STORE a, b\n sd \\a, \\b\n.endm\n.macro LOAD a, b\n ld \\a, \\b\n.endm\n"
    };
}
#[cfg(target_arch = "riscv32")]
macro_rules! rv {
    () => {
        ".equ REGBYTES, 4\n.macro STORE a, b\n sw \\a, \\b\n.endm\n.macro LOAD a, b\n lw \\a, \\b\n.endm\n"
    };
}

core::arch::global_asm!(
    rv!(),
    r#"
    .section .text.start
    .global _start
_start:
    .option push
    .option norelax
    la gp, __global_pointer$
    .option pop
    la sp, _stack_hi
    la t0, _sbss
    la t1, _ebss
1:  bgeu t0, t1, 2f
    sb zero, 0(t0)
    addi t0, t0, 1
    j 1b
2:  la t0, trap_entry
    csrw mtvec, t0
    li s0, 0
    call firmware_main
3:  j 3b

    .section .text
    .align 4
trap_entry:
    addi sp, sp, -16*REGBYTES
    STORE ra, 0*REGBYTES(sp)
    STORE t0, 1*REGBYTES(sp)
    STORE t1, 2*REGBYTES(sp)
    STORE t2, 3*REGBYTES(sp)
    STORE t3, 4*REGBYTES(sp)
    STORE t4, 5*REGBYTES(sp)
    STORE t5, 6*REGBYTES(sp)
    STORE t6, 7*REGBYTES(sp)
    STORE a0, 8*REGBYTES(sp)
    STORE a1, 9*REGBYTES(sp)
    STORE a2, 10*REGBYTES(sp)
    STORE a3, 11*REGBYTES(sp)
    STORE a4, 12*REGBYTES(sp)
    STORE a5, 13*REGBYTES(sp)
    STORE a6, 14*REGBYTES(sp)
    STORE a7, 15*REGBYTES(sp)
    csrr a0, mepc
    mv a1, ra
    mv a2, s0
    addi a3, sp, 16*REGBYTES
    csrr a4, mcause
    call rust_trap
    LOAD ra, 0*REGBYTES(sp)
    LOAD t0, 1*REGBYTES(sp)
    LOAD t1, 2*REGBYTES(sp)
    LOAD t2, 3*REGBYTES(sp)
    LOAD t3, 4*REGBYTES(sp)
    LOAD t4, 5*REGBYTES(sp)
    LOAD t5, 6*REGBYTES(sp)
    LOAD t6, 7*REGBYTES(sp)
    LOAD a0, 8*REGBYTES(sp)
    LOAD a1, 9*REGBYTES(sp)
    LOAD a2, 10*REGBYTES(sp)
    LOAD a3, 11*REGBYTES(sp)
    LOAD a4, 12*REGBYTES(sp)
    LOAD a5, 13*REGBYTES(sp)
    LOAD a6, 14*REGBYTES(sp)
    LOAD a7, 15*REGBYTES(sp)
    addi sp, sp, 16*REGBYTES
    mret
"#
);

#[no_mangle]
extern "C" fn rust_trap(mepc: usize, ra: usize, s0: usize, sp: usize, mcause: usize) {
    let interrupt = mcause >> (usize::BITS - 1) != 0;
    if interrupt && mcause & 0xff == 7 {
        // SAFETY: the trapped registers of this hart.
        unsafe { board::sample(mepc, ra, s0, sp) };
        // Traced code in the interrupt handler: recorded wherever the
        // interrupt lands (in a probe, in a buffer's handoff), part of the
        // ground truth like every other call.
        black_box(irq_tick(black_box(mepc as u32)));
        let every = sample_every();
        if every == 0 {
            timer_interrupts(false);
        } else {
            set_timer(mtime() + every);
        }
        return;
    }
    board::textf(format_args!(
        "unexpected trap: mcause {mcause:#x} mepc {mepc:#x}"
    ));
    exit(3);
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    board::on_panic();
    board::textf(format_args!("firmware panic: {info}"));
    exit(2);
}

extern "C" {
    static _stack_lo: u8;
    static _stack_hi: u8;
    static _stext: u8;
    static _etext: u8;
}

// ---------------------------------------------------------------- workload

/// Ground truth: each traced function counts its own calls here.
struct Truth {
    name: &'static str,
    calls: AtomicU32,
}

macro_rules! truth {
    ($($id:ident = $name:literal),* $(,)?) => {
        $(static $id: Truth = Truth { name: $name, calls: AtomicU32::new(0) };)*
        static ALL: &[&Truth] = &[$(&$id),*];
    };
}

truth!(
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
);

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
/// untraced leaf.
fn probe_cost() -> (u64, u64, u64) {
    let per_call = |f: fn(u32) -> u32, n: u32| {
        let a = instret();
        for i in 0..n {
            black_box(f(black_box(i)));
        }
        (instret() - a) / n as u64
    };
    board::flush();
    let probe = per_call(probe_cost_leaf, COST_PROBE_CALLS);
    let streamed = per_call(probe_cost_leaf, COST_STREAM_CALLS);
    let plain = per_call(plain_leaf, COST_STREAM_CALLS);
    (probe, streamed, plain)
}

#[no_mangle]
extern "C" fn firmware_main() -> ! {
    // SAFETY: linker symbols: only their addresses are used.
    let (stack, text) = unsafe {
        (
            (
                &_stack_lo as *const u8 as usize,
                &_stack_hi as *const u8 as usize,
            ),
            (&_stext as *const u8 as usize, &_etext as *const u8 as usize),
        )
    };
    board::init(Board {
        // SAFETY: the only reference to the UART sink, handed over once.
        sink: unsafe { &mut *core::ptr::addr_of_mut!(UART_SINK) },
        clock: board::Clock::mcycle(MCYCLE_HZ),
        name: env!("CARGO_PKG_NAME"),
        stack,
        text,
    });
    board::text("fgtrace board demo: send `record <ms> <hz>` or `flight <hz>`");
    // Wait for the host's command (2 s, then record with sampling at 1 kHz).
    let mut rx = Uart;
    let waited = mtime();
    while !board::recording() {
        board::poll(&mut rx);
        if mtime() - waited > 2 * MTIME_HZ {
            board::text("no command: recording with sampling at 1000 Hz");
            board::start(fgtrace::wire::MODE_STREAM, 1000, 0);
        }
    }
    let every = sample_every();
    if every > 0 {
        set_timer(mtime() + every);
        timer_interrupts(true);
    }
    let mut acc = 0u64;
    let mut rounds = 0;
    while rounds < ROUNDS && board::recording() && !board::expired() {
        acc = acc.wrapping_add(run_round(rounds, SPLIT_ITERS));
        rounds += 1;
        board::flush();
        board::poll(&mut rx);
    }
    timer_interrupts(false);
    let recorded = board::recording();
    let (probe, streamed, plain) = probe_cost();
    if recorded {
        T_COST
            .calls
            .fetch_add(COST_PROBE_CALLS + COST_STREAM_CALLS, Relaxed);
        board::stop();
    }
    let (off, _, _) = probe_cost();
    board::textf(format_args!("done: {rounds} rounds, result {acc:#x}"));
    board::textf(format_args!(
        "probe-cost instructions per call: recording {probe}, recording and streaming {streamed}, off {off}, untraced {plain}"
    ));
    for t in ALL {
        board::textf(format_args!("truth {} {}", t.name, t.calls.load(Relaxed)));
    }
    exit(0);
}
