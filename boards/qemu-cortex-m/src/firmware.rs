// The example firmware, included by both binaries' roots (src/main.rs and
// src/bin/dwt.rs), which set `DWT_CLOCK`.
use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use fgtrace::runtime::{self as board, Board, CommandInput, Direction, Sink};

// ------------------------------------------------------------ board support

/// The CMSDK APB UART0.
const UART: usize = 0x4000_4000;
/// The CMSDK APB timer0.
const TIMER0: usize = 0x4000_0000;
/// The timer's and the core's clock on mps2 (SysTick counts it too).
const CLOCK_HZ: u64 = 25_000_000;
/// Instructions per clock tick under qemu `-icount shift=0` (run.sh): one
/// instruction per virtual nanosecond, a tick every 40 ns.
const INSTRUCTIONS_PER_TICK: u64 = 1_000_000_000 / CLOCK_HZ;
/// The external interrupt the SysTick handler pends (unused by any device).
const HIGH_IRQ: u32 = 30;

fn rd(addr: usize) -> u32 {
    // SAFETY: a device register of the mps2 board (or the core's).
    unsafe { (addr as *const u32).read_volatile() }
}

fn wr(addr: usize, v: u32) {
    // SAFETY: as above.
    unsafe { (addr as *mut u32).write_volatile(v) }
}

struct Uart;

impl Sink for Uart {
    fn write(&mut self, bytes: &[u8]) -> usize {
        for &b in bytes {
            // STATE bit 0: the transmit buffer is full.
            while rd(UART + 4) & 1 != 0 {
                core::hint::spin_loop();
            }
            wr(UART, b as u32);
        }
        bytes.len()
    }
}

impl CommandInput for Uart {
    fn read(&mut self) -> Option<u8> {
        // STATE bit 1: a byte has arrived.
        (rd(UART + 4) & 2 != 0).then(|| rd(UART) as u8)
    }
}

static mut UART_SINK: Uart = Uart;
static mut UART_RX: Uart = Uart;

/// Ends the run: semihosting `SYS_EXIT_EXTENDED` (`ADP_Stopped_ApplicationExit`
/// with `code`), which makes qemu exit with `code`.
fn exit(code: u32) -> ! {
    // Over RTT, the host reads the stream's tail from RAM, which is gone
    // once qemu exits: wait until it has.
    fgtrace::rtt::flush();
    let block = [0x20026u32, code];
    loop {
        // SAFETY: the semihosting call, which qemu (`-semihosting-config
        // enable=on`) serves by exiting.
        unsafe {
            core::arch::asm!("bkpt 0xab", in("r0") 0x20, in("r1") block.as_ptr(), options(nostack))
        };
    }
}

/// Instructions, for the probe-cost figures: the 25 MHz timer under
/// `-icount shift=0` ticks once per 40 instructions (the workload divides
/// by enough calls to make the figure exact).
fn instret() -> u64 {
    board::now() * INSTRUCTIONS_PER_TICK
}

/// The sampler's timer at the session's rate, on or off: SysTick from the
/// core's clock. Off after the rounds, while the session still records, it
/// makes the calls longer than 2^32 ticks ([`long_call`]).
fn sampling_timer(on: bool) {
    let hz = board::sample_hz();
    if on && hz > 0 {
        wr(0xE000_E014, (CLOCK_HZ as u32 / hz).clamp(2, 1 << 24) - 1);
        wr(0xE000_E018, 0);
        wr(0xE000_E010, 7);
    } else {
        wr(0xE000_E010, 0);
    }
    // Twice: a site's first call in a session takes the general entry
    // and exit, the next ones the plain ones.
    if !on && board::recording() {
        black_box(long_call());
        black_box(long_call());
    }
}

/// Ticks [`long_call`] moves the clock on by, in steps of a quarter of the
/// timer's period (the clock's extension follows a step under half of it,
/// read after each): 5 x 2^30, more than 2^32 (215 s at 25 MHz).
const LONG_STEP: u32 = 1 << 30;
const LONG_STEPS: u32 = 5;

/// Ground truth of the calls longer than 2^32 ticks.
static T_LONG: Truth = Truth {
    name: "long_call",
    calls: AtomicU32::new(0),
};

/// A call longer than 2^32 ticks, made in a moment: it moves the timer's
/// value on (the CMSDK timer's count is writable), so its record shows
/// whether the probe keeps 64-bit times whole (the test checks its
/// duration), and every call after it starts past 2^32 ticks.
#[fgtrace::traced]
fn long_call() {
    count(&T_LONG);
    for _ in 0..LONG_STEPS {
        // Counting down: less is later.
        wr(TIMER0 + 4, rd(TIMER0 + 4).wrapping_sub(LONG_STEP));
        black_box(board::now());
    }
}

/// Priorities (lower is more urgent): SysTick 0xC0, the pended interrupt
/// 0x40; the timer0 free-running, no interrupt; the UART on.
fn board_init() {
    // SHPR3: SysTick's priority in bits 31:24.
    wr(0xE000_ED20, (rd(0xE000_ED20) & 0x00ff_ffff) | 0xC0 << 24);
    // NVIC_IPR: one byte per interrupt.
    // SAFETY: the NVIC's priority byte of HIGH_IRQ.
    unsafe { ((0xE000_E400 + HIGH_IRQ as usize) as *mut u8).write_volatile(0x40) };
    wr(0xE000_E100, 1 << HIGH_IRQ);
    wr(TIMER0 + 8, 0xffff_ffff);
    wr(TIMER0 + 4, 0xffff_ffff);
    wr(TIMER0, 1);
    // BAUDDIV (qemu wants at least 16), then transmit and receive on.
    wr(UART + 0x10, 16);
    wr(UART + 8, 3);
}

core::arch::global_asm!(
    r#"
    .section .vectors, "a"
    .p2align 2
    .global __vectors
__vectors:
    .word _stack_hi
    .word reset
    .rept 9
    .word fault_entry
    .endr
    .word fault_entry
    .word fault_entry
    .word 0
    .word fault_entry
    .word systick_entry
    .rept 30
    .word fault_entry
    .endr
    .word high_entry
    .word fault_entry

    .section .text.reset, "ax"
    .thumb_func
    .global reset
reset:
    ldr r0, =_sbss
    ldr r1, =_ebss
    movs r2, #0
1:  cmp r0, r1
    bhs 2f
    str r2, [r0], #4
    b 1b
2:  movs r7, #0
    mov lr, r7
    bl firmware_main
3:  b 3b
"#
);

// SysTick's entry: the interrupted `r7` is still in r7 (the hardware
// stacks r0-r3, r12, lr, pc and xPSR only); the handler's own frame
// record `{r7, EXC_RETURN}` keeps the chain, and `pop {r7, pc}` returns
// from the exception.
core::arch::global_asm!(
    r#"
    .section .text.systick_entry, "ax"
    .thumb_func
    .global systick_entry
systick_entry:
    push {{r7, lr}}
    add r0, sp, #8
    mov r1, r7
    mov r2, lr
    mov r7, sp
    bl rust_systick
    pop {{r7, pc}}
"#
);

/// SysTick: the sampler and the timer interrupt's traced call, at the low
/// priority. `frame`: the exception frame (r0, r1, r2, r3, r12, lr, pc,
/// xPSR, then the FP registers if `exc_return` says so); `r7`: the
/// interrupted code's.
#[no_mangle]
extern "C" fn rust_systick(frame: *const usize, r7: usize, exc_return: usize) {
    // SAFETY: the hardware's exception frame, on this stack.
    let (lr, pc, xpsr) = unsafe { (*frame.add(5), *frame.add(6), *frame.add(7)) };
    // The interrupted sp: past the frame (8 words, 26 with the FP state:
    // EXC_RETURN bit 4 clear), and the word of padding the hardware added
    // to align it (xPSR bit 9).
    let words = if exc_return & 0x10 == 0 { 26 } else { 8 };
    let sp = frame as usize + 4 * words + if xpsr & 1 << 9 != 0 { 4 } else { 0 };
    // SAFETY: the interrupted registers.
    unsafe { board::sample(pc, lr, r7, sp) };
    black_box(irq_low(black_box(7)));
}

/// The pended interrupt, at the high priority: preempts `irq_low`.
#[no_mangle]
extern "C" fn high_entry() {
    black_box(irq_tick(black_box(board::now() as u32)));
}

#[no_mangle]
extern "C" fn fault_entry() -> ! {
    // ICSR's active exception number, and the fault status registers.
    board::textf(format_args!(
        "unexpected exception {}: CFSR {:#x} HFSR {:#x}",
        rd(0xE000_ED04) & 0x1ff,
        rd(0xE000_ED28),
        rd(0xE000_ED2C)
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

/// Ground truth of the low-priority handler's traced call.
static T_IRQ_LOW: Truth = Truth {
    name: "irq_low",
    calls: AtomicU32::new(0),
};

/// The low-priority interrupt's traced call: pends the high-priority
/// interrupt, which preempts it at once (its `irq_tick` nests inside).
#[fgtrace::traced]
fn irq_low(x: u32) -> u32 {
    count(&T_IRQ_LOW);
    // NVIC_ISPR: pend it; the barriers make it taken here.
    wr(0xE000_E200, 1 << HIGH_IRQ);
    // SAFETY: barriers, no memory effect beyond ordering.
    unsafe { core::arch::asm!("dsb", "isb", options(nostack)) };
    black_box(x) ^ 1
}

#[no_mangle]
extern "C" fn firmware_main() -> ! {
    // The FPU on (CPACR: CP10 and CP11, full access) for the hard-float ABI.
    #[cfg(target_abi = "eabihf")]
    {
        wr(0xE000_ED88, rd(0xE000_ED88) | 0xf << 20);
        // SAFETY: barriers.
        unsafe { core::arch::asm!("dsb", "isb", options(nostack)) };
    }
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
    board_init();
    let clock = if DWT_CLOCK {
        board::Clock::dwt_cyccnt(CLOCK_HZ)
    } else {
        board::Clock::counter("timer0", TIMER0 + 4, Direction::Down, CLOCK_HZ)
    };
    let (sink, rx): (&'static mut dyn Sink, &'static mut dyn CommandInput) = if RTT {
        // 16 KiB: the host's polls through qemu's GDB stub take about a
        // millisecond each, in which the firmware runs on.
        static mut RTT_UP: [u8; 16384] = [0; 16384];
        // SAFETY: the only reference to it, handed over once.
        let buf = unsafe { &mut *core::ptr::addr_of_mut!(RTT_UP) };
        let (up, down) =
            fgtrace::rtt::init_with(fgtrace::rtt::Mode::Block, buf).expect("set up once");
        (up, down)
    } else {
        // SAFETY: the only references to the UART sink and input, handed
        // over once.
        unsafe {
            (
                &mut *core::ptr::addr_of_mut!(UART_SINK),
                &mut *core::ptr::addr_of_mut!(UART_RX),
            )
        }
    };
    board::init(Board {
        sink,
        clock,
        name: env!("CARGO_PKG_NAME"),
        stack,
        text,
        // No instruction counter on Armv7-M.
        count_instructions: false,
        hpm_counters: &[],
    });
    if board::clock_refusal().is_some() {
        // init said why on the stream.
        exit(4);
    }
    demo(rx, sampling_timer, || {
        board::now() / (CLOCK_HZ / 1000)
    });
    for t in [&T_IRQ_LOW, &T_LONG] {
        board::textf(format_args!("truth {} {}", t.name, t.calls.load(Relaxed)));
    }
    exit(0);
}
