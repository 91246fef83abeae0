//! fgtrace on bare-metal RISC-V (qemu `virt`, machine mode, no OS).
//!
//! The workload (`../common/workload.rs`, the same on every example board)
//! is ordinary `#[fgtrace::traced]` code: a recursive-descent parser and
//! evaluator, a CRC, integer matrix math, recursion, a 3:1 split of untraced
//! work under one traced call for the sampler, and traced calls from the
//! timer interrupt. Every traced function also counts its own calls in a
//! plain static, independently of fgtrace: the ground truth, printed as
//! `truth NAME CALLS` at the end.
//!
//! Board support, all in this file: the UART at 0x1000_0000 (a 16550,
//! FIFOs on) is the sink and the command input, the CLINT timer interrupt
//! drives the sampler, the SiFive test device at 0x10_0000 ends the run;
//! the probe's clock is `mcycle` (the timer's is `mtime`). Every hart but
//! the first parks (`wfi`) at `_start`, before touching memory; the `harts2`
//! build (run.sh with HARTS=2, qemu `-smp 2`) gives hart 1 a stack and a
//! traced workload of its own (see the end of this file).
#![no_std]
#![no_main]
// The `losses` build (a test's) runs three small sessions instead of the rounds.
#![cfg_attr(feature = "losses", allow(dead_code))]

use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use fgtrace::runtime::{self as board, Board, CommandInput, Sink};

// ------------------------------------------------------------ board support

const UART: usize = 0x1000_0000;
const CLINT_MTIMECMP: usize = 0x200_4000;
const TEST_DEVICE: usize = 0x10_0000;
/// `mtime` (`rdtime`) ticks per second on qemu `virt`: the timer's clock.
const MTIME_HZ: u64 = 10_000_000;
/// `mcycle` per second: the probe's clock. Under qemu `-icount shift=0`
/// (run.sh) one instruction is one virtual nanosecond and `mcycle` counts
/// instructions, so 1 GHz; on a real board, its core clock.
#[cfg(feature = "mcycle")]
const MCYCLE_HZ: u64 = 1_000_000_000;

struct Uart;

/// The 16550's transmit FIFO holds this many bytes.
const FIFO: usize = 16;

impl Sink for Uart {
    fn write(&mut self, bytes: &[u8]) -> usize {
        // Waits until the transmitter is empty (LSR.THRE: with the FIFO on,
        // all of it), then fills the FIFO: one wait for 16 bytes. A byte
        // written to a full FIFO is lost, and qemu keeps it full while the
        // host reads the serial output more slowly than the firmware writes.
        let thre = || {
            // SAFETY: the 16550's line status register.
            while unsafe { core::ptr::read_volatile((UART + 5) as *const u8) } & 0x20 == 0 {
                core::hint::spin_loop();
            }
        };
        // SAFETY: the 16550's transmit register.
        let put = |b: u8| unsafe { core::ptr::write_volatile(UART as *mut u8, b) };
        let mut chunks = bytes.chunks_exact(FIFO);
        for chunk in &mut chunks {
            thre();
            let chunk: &[u8; FIFO] = chunk.try_into().expect("chunks of FIFO bytes");
            for &b in chunk {
                put(b);
            }
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            thre();
            for &b in rest {
                put(b);
            }
        }
        bytes.len()
    }
}

impl CommandInput for Uart {
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
    let v = if code == 0 {
        0x5555
    } else {
        (code << 16) | 0x3333
    };
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

/// The sampler's timer at the session's rate, on or off.
fn sampling_timer(on: bool) {
    let every = sample_every();
    if on && every > 0 {
        set_timer(mtime() + every);
        timer_interrupts(true);
    } else {
        timer_interrupts(false);
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
    csrr t0, mhartid
    bnez t0, 5f
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

    // Every other hart: the same trap entry, on a stack of its own; hart 1
    // goes to `hart1_main` (which parks it unless the firmware was built
    // with `harts2`), any further hart parks here. None touches memory
    // before hart 0 has cleared .bss and set the runtime up.
5:  la t1, trap_entry
    csrw mtvec, t1
    li t1, 1
    bne t0, t1, 6f
    la sp, _stack1_hi
    li s0, 0
    call hart1_main
6:  wfi
    j 6b

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

include!("../../common/workload.rs");

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
    if cfg!(feature = "instructions") {
        // mhpmcounter3 counts retired instructions (qemu's event 2), from 0.
        // SAFETY: machine-mode counter CSRs.
        unsafe {
            core::arch::asm!("csrw mhpmevent3, {}", in(reg) 2usize);
            core::arch::asm!("csrw mhpmcounter3, zero");
        }
    }
    // The FIFOs on (FCR: enable, both cleared), before the first byte out:
    // the host sends its commands once it has heard the board, so nothing
    // it sends is cleared.
    // SAFETY: the 16550's FIFO control register.
    unsafe { core::ptr::write_volatile((UART + 2) as *mut u8, 0x07) };
    board::init(Board {
        // SAFETY: the only reference to the UART sink, handed over once.
        sink: unsafe { &mut *core::ptr::addr_of_mut!(UART_SINK) },
        #[cfg(feature = "mcycle")]
        clock: board::Clock::mcycle(MCYCLE_HZ),
        // Built without the `mcycle` feature (run.sh with CLOCK=rdtime).
        #[cfg(not(feature = "mcycle"))]
        clock: board::Clock::rdtime(MTIME_HZ),
        name: env!("CARGO_PKG_NAME"),
        stack,
        text,
        // Built with the `instructions` feature (run.sh with
        // COUNT_INSTRUCTIONS=1): every call records its minstret delta, and
        // that of mhpmcounter3, programmed above to count instructions too.
        count_instructions: cfg!(feature = "instructions"),
        hpm_counters: &[(3, "hpm3_instructions")],
    });
    #[cfg(feature = "harts2")]
    HART1_GO.store(GO, Release);
    #[cfg(not(feature = "harts2"))]
    demo(&mut Uart, sampling_timer, || mtime() * 1000 / MTIME_HZ);
    // The rounds' timer hook also parks hart 1 when the rounds are done
    // (before the probe's cost is measured and the session stops).
    #[cfg(feature = "harts2")]
    demo(&mut Uart, timer_then_park, || mtime() * 1000 / MTIME_HZ);
    #[cfg(feature = "harts2")]
    for t in HART1 {
        board::textf(format_args!("truth {} {}", t.name, t.calls.load(Relaxed)));
    }
    exit(0);
}

/// Hart 1's entry (`_start`, on its own stack): parked for good in a
/// firmware built for one hart's work.
#[cfg(not(feature = "harts2"))]
#[no_mangle]
extern "C" fn hart1_main() -> ! {
    loop {
        // SAFETY: waits for an interrupt (none is enabled on this hart).
        unsafe { core::arch::asm!("wfi") };
    }
}

// ------------------------------------------------- a second hart (`harts2`)

// Built with the `harts2` feature (run.sh with HARTS=2, qemu `-smp 2`), for
// the test that checks what a session's stop does to the calls of a hart
// other than the one that stops it: hart 1 runs a traced workload of its
// own beside hart 0's rounds (its buffers handed off and sent from it),
// then parks inside three traced calls, with calls recorded since its last
// flush; hart 0 waits for that after its rounds and stops the session:
// hart 1's unsent records and its open calls must be counted, never
// silently lost. A fixed number of rounds rather than a loop until the
// stop: under qemu's `-icount` the harts take turns, and a hart that never
// sleeps would take most of them. Its own ground truth, counted as hart
// 0's, is printed by hart 0 at the end.

#[cfg(feature = "harts2")]
use core::sync::atomic::Ordering::{Acquire, Release};

/// Hart 0 sets it to [`GO`] once .bss is clear and the runtime set up
/// (hart 1 waits for that value: .bss holds 0 before and after clearing).
#[cfg(feature = "harts2")]
static HART1_GO: AtomicU32 = AtomicU32::new(0);
#[cfg(feature = "harts2")]
const GO: u32 = 0x600d;
/// Hart 1 says it has parked.
#[cfg(feature = "harts2")]
static HART1_PARKED: AtomicU32 = AtomicU32::new(0);
/// Hart 1's workload rounds.
#[cfg(feature = "harts2")]
const HART1_ROUNDS: u32 = 300;
/// Records hart 1 makes after its last flush, before it parks.
#[cfg(feature = "harts2")]
const HART1_UNSENT: u32 = 5;
/// Calls open on hart 1 while it is parked.
#[cfg(feature = "harts2")]
const HART1_OPEN: u32 = 3;

#[cfg(feature = "harts2")]
truth!(
    HART1:
    T_H1_WORK = "hart1_work",
    T_H1_LEAF = "hart1_leaf",
    T_H1_PARK = "hart1_park",
);

#[cfg(feature = "harts2")]
#[fgtrace::traced]
fn hart1_leaf(x: u32) -> u32 {
    count(&T_H1_LEAF);
    x.wrapping_mul(0x9e37_79b9).rotate_left(5)
}

/// A few leaf calls, then untraced work, so that hart 1's stream stays a
/// fraction of hart 0's.
#[cfg(feature = "harts2")]
#[fgtrace::traced]
fn hart1_work(seed: u32) -> u32 {
    count(&T_H1_WORK);
    let mut x = seed;
    for _ in 0..6 {
        x = black_box(hart1_leaf(black_box(x)));
    }
    light_one(black_box(2000)) ^ x
}

/// `n` nested calls, the innermost making [`HART1_UNSENT`] leaf calls and
/// then parking the hart for good (`wfi`): its calls stay open, its
/// records unsent.
#[cfg(feature = "harts2")]
#[fgtrace::traced]
fn hart1_park(n: u32) {
    count(&T_H1_PARK);
    if black_box(n) > 1 {
        return hart1_park(n - 1);
    }
    for i in 0..HART1_UNSENT {
        black_box(hart1_leaf(black_box(i)));
    }
    HART1_PARKED.store(1, Release);
    loop {
        // SAFETY: waits for an interrupt (none is enabled on this hart).
        unsafe { core::arch::asm!("wfi") };
    }
}

#[cfg(feature = "harts2")]
#[no_mangle]
extern "C" fn hart1_main() -> ! {
    while HART1_GO.load(Acquire) != GO {
        core::hint::spin_loop();
    }
    while !board::recording() {
        core::hint::spin_loop();
    }
    let mut seed = 1u32;
    for _ in 0..HART1_ROUNDS {
        seed = black_box(hart1_work(seed));
    }
    // Its records so far sent (from this hart), so that exactly
    // HART1_UNSENT are in its buffer when it parks.
    board::flush();
    hart1_park(HART1_OPEN);
    unreachable!("hart 1 parks in hart1_park")
}

/// The rounds' sampling timer (see [`sampling_timer`]); when the rounds are
/// done (`false`), hart 0 waits for hart 1 to have parked.
#[cfg(feature = "harts2")]
fn timer_then_park(on: bool) {
    sampling_timer(on);
    if !on {
        while HART1_PARKED.load(Acquire) == 0 {
            core::hint::spin_loop();
        }
    }
}
