//! fgtrace on bare-metal x86_64 (qemu `-kernel` with a PVH entry, ring 0,
//! one CPU, no OS).
//!
//! The workload is the RISC-V example's (`../common/workload.rs`): the same
//! traced functions, the same ground truth (`truth NAME CALLS`), the same
//! traced calls from the timer interrupt.
//!
//! Board support, all in this file: qemu enters `_start32` in 32-bit
//! protected mode (the PVH note); it identity-maps the first 1 GiB, switches
//! to long mode and calls `firmware_main`. COM1 (port 0x3f8, a 16550, FIFOs
//! on) is the sink and the command input; the PIT's channel 0 through the legacy PIC
//! (IRQ 0 at vector 32) drives the sampler; `isa-debug-exit` at port 0xf4
//! ends the run; the probe's clock is the TSC.
#![no_std]
#![no_main]
// The `losses` build (a test's) runs three small sessions instead of the rounds.
#![cfg_attr(feature = "losses", allow(dead_code))]

use core::hint::black_box;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
use fgtrace::runtime::{self as board, Board, CommandInput, Sink};

// ------------------------------------------------------------ board support

const COM1: u16 = 0x3f8;
const DEBUG_EXIT: u16 = 0xf4;
/// TSC ticks per second under qemu `-icount shift=0` (run.sh): one tick per
/// instruction, one instruction per virtual nanosecond.
const TSC_HZ: u64 = 1_000_000_000;
/// The PIT's input clock.
const PIT_HZ: u32 = 1_193_182;
/// The timer interrupt's vector (the PIC's IRQ 0, remapped past the
/// exceptions).
const TIMER_VECTOR: usize = 32;

fn outb(port: u16, v: u8) {
    // SAFETY: port output, ring 0; the ports used here are qemu's devices.
    unsafe { core::arch::asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack)) };
}

fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: port input, ring 0.
    unsafe { core::arch::asm!("in al, dx", in("dx") port, out("al") v, options(nomem, nostack)) };
    v
}

struct Com1;

/// The 16550's transmit FIFO holds this many bytes.
const FIFO: usize = 16;

impl Sink for Com1 {
    fn write(&mut self, bytes: &[u8]) -> usize {
        // Waits until the transmitter is empty (LSR.THRE: with the FIFO on,
        // all of it), then fills the FIFO: one wait for 16 bytes. A byte
        // written to a full FIFO is lost, and qemu keeps it full while the
        // host reads the serial output more slowly than the firmware writes.
        let thre = || {
            while inb(COM1 + 5) & 0x20 == 0 {
                core::hint::spin_loop();
            }
        };
        let mut chunks = bytes.chunks_exact(FIFO);
        for chunk in &mut chunks {
            thre();
            let chunk: &[u8; FIFO] = chunk.try_into().expect("chunks of FIFO bytes");
            for &b in chunk {
                outb(COM1, b);
            }
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            thre();
            for &b in rest {
                outb(COM1, b);
            }
        }
        bytes.len()
    }
}

impl CommandInput for Com1 {
    fn read(&mut self) -> Option<u8> {
        (inb(COM1 + 5) & 1 != 0).then(|| inb(COM1))
    }
}

static mut COM1_SINK: Com1 = Com1;

/// Ends the run: `isa-debug-exit` makes qemu exit with `(code << 1) | 1`
/// (run.sh takes 33, code 0x10, as success).
fn exit(code: u8) -> ! {
    outb(DEBUG_EXIT, if code == 0 { 0x10 } else { code });
    loop {
        // SAFETY: halts until the next interrupt.
        unsafe { core::arch::asm!("cli", "hlt") };
    }
}

fn rdtsc() -> u64 {
    // SAFETY: every x86_64 CPU has rdtsc.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Instructions, for the probe-cost figures: the TSC under `-icount
/// shift=0` counts one per instruction.
fn instret() -> u64 {
    rdtsc()
}

/// One IDT gate: a 64-bit interrupt gate to `handler` in the code segment.
fn gate(handler: usize) -> [u64; 2] {
    let h = handler as u64;
    [
        (h & 0xffff) | (0x08 << 16) | (0x8e << 40) | ((h >> 16) & 0xffff) << 48,
        h >> 32,
    ]
}

static mut IDT: [[u64; 2]; 48] = [[0; 2]; 48];

#[repr(C, packed)]
struct Idtr {
    limit: u16,
    base: u64,
}

/// Exceptions go to `fault_entry` (print, exit), the timer to
/// `timer_entry`; the PIC's IRQs move to vectors 32..48, all masked.
fn interrupts_init() {
    extern "C" {
        fn fault_entry();
        fn timer_entry();
    }
    // SAFETY: before interrupts are enabled; the IDT is static.
    unsafe {
        let idt = &mut *core::ptr::addr_of_mut!(IDT);
        for g in idt.iter_mut() {
            *g = gate(fault_entry as *const () as usize);
        }
        idt[TIMER_VECTOR] = gate(timer_entry as *const () as usize);
        let idtr = Idtr {
            limit: (core::mem::size_of::<[[u64; 2]; 48]>() - 1) as u16,
            base: idt.as_ptr() as u64,
        };
        core::arch::asm!("lidt [{}]", in(reg) &idtr, options(nostack));
    }
    // The 8259 pair: ICW1..ICW4, IRQ 0..7 at 32, 8..15 at 40, all masked.
    for (port, v) in [
        (0x20, 0x11),
        (0xa0, 0x11),
        (0x21, 0x20),
        (0xa1, 0x28),
        (0x21, 0x04),
        (0xa1, 0x02),
        (0x21, 0x01),
        (0xa1, 0x01),
        (0x21, 0xff),
        (0xa1, 0xff),
    ] {
        outb(port, v);
    }
}

/// The sampler's timer at the session's rate, on or off: the PIT's channel
/// 0 as a rate generator, IRQ 0 unmasked at the PIC.
fn sampling_timer(on: bool) {
    let hz = board::sample_hz();
    if on && hz > 0 {
        let div = (PIT_HZ / hz).clamp(1, 0xffff);
        outb(0x43, 0x34);
        outb(0x40, div as u8);
        outb(0x40, (div >> 8) as u8);
        outb(0x21, 0xfe);
        // SAFETY: the IDT is set up.
        unsafe { core::arch::asm!("sti", options(nomem, nostack)) };
    } else {
        outb(0x21, 0xff);
    }
}

core::arch::global_asm!(
    r#"
    .section .note.pvh, "a", @note
    .p2align 2
    .long 4
    .long 4
    .long 18
    .asciz "Xen"
    .p2align 2
    .long _start32

    .section .bss.paging, "aw", @nobits
    .p2align 12
pml4: .skip 4096
pdpt: .skip 4096
pd:   .skip 4096

    .section .rodata.gdt, "a"
    .p2align 3
gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
gdt_ptr:
    .word gdt_ptr - gdt - 1
    .long gdt

    .section .text.start32, "ax"
    .code32
    .global _start32
_start32:
    cli
    cld
    movl $_sbss, %edi
    movl $_ebss, %ecx
    subl %edi, %ecx
    xorl %eax, %eax
    rep stosb
    movl $pdpt, %eax
    orl $3, %eax
    movl %eax, pml4
    movl $pd, %eax
    orl $3, %eax
    movl %eax, pdpt
    xorl %ecx, %ecx
1:  movl %ecx, %eax
    shll $21, %eax
    orl $0x83, %eax
    movl %eax, pd(,%ecx,8)
    movl $0, pd+4(,%ecx,8)
    incl %ecx
    cmpl $512, %ecx
    jne 1b
    movl $pml4, %eax
    movl %eax, %cr3
    movl %cr4, %eax
    orl $0x20, %eax
    movl %eax, %cr4
    movl $0xC0000080, %ecx
    rdmsr
    orl $0x100, %eax
    wrmsr
    movl %cr0, %eax
    orl $0x80000001, %eax
    movl %eax, %cr0
    lgdt gdt_ptr
    ljmp $0x08, $_start64

    .code64
_start64:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movw %ax, %fs
    movw %ax, %gs
    movq $_stack_hi, %rsp
    xorl %ebp, %ebp
    call firmware_main
2:  hlt
    jmp 2b

    .section .text
    .p2align 4
    .global timer_entry
timer_entry:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    cld
    movq 72(%rsp), %rdi
    movq %rbp, %rsi
    movq 96(%rsp), %rdx
    call rust_timer
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    iretq

    .p2align 4
    .global fault_entry
fault_entry:
    movq (%rsp), %rdi
    movq 8(%rsp), %rsi
    andq $-16, %rsp
    call rust_fault
"#,
    options(att_syntax)
);

#[no_mangle]
extern "C" fn rust_timer(rip: usize, rbp: usize, rsp: usize) {
    // SAFETY: the interrupted registers, from the interrupt frame.
    unsafe { board::sample(rip, rbp, rsp) };
    // Traced code in the interrupt handler: recorded wherever the interrupt
    // lands (in a probe, in a buffer's handoff), part of the ground truth
    // like every other call.
    black_box(irq_tick(black_box(rip as u32)));
    outb(0x20, 0x20); // end of interrupt at the PIC
}

#[no_mangle]
extern "C" fn rust_fault(top: usize, next: usize) -> ! {
    board::textf(format_args!(
        "unexpected exception: stack top {top:#x} {next:#x}"
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
    interrupts_init();
    // The FIFOs on (FCR: enable, both cleared), before the first byte out:
    // the host sends its commands once it has heard the board, so nothing
    // it sends is cleared.
    outb(COM1 + 2, 0x07);
    board::init(Board {
        // SAFETY: the only reference to the COM1 sink, handed over once.
        sink: unsafe { &mut *core::ptr::addr_of_mut!(COM1_SINK) },
        clock: board::Clock::tsc(TSC_HZ),
        name: env!("CARGO_PKG_NAME"),
        stack,
        text,
        // No instruction counter without a PMU.
        count_instructions: false,
        hpm_counters: &[],
    });
    demo(&mut Com1, sampling_timer, || rdtsc() / (TSC_HZ / 1000));
    exit(0);
}
