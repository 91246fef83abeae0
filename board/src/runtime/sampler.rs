//! The sampler: the timer interrupt walks the frame pointers and queues the
//! stack; queued stacks go out from the interrupted code's side.

use super::*;

/// The timer interrupt's sample: walks the frame pointers from the trapped
/// registers and queues the stack for the next flush.
///
/// # Safety
/// Called from the hart's timer interrupt handler with the trapped `pc`
/// (`mepc`), `ra`, `s0` (frame pointer) and `sp`.
#[cfg(any(target_arch = "riscv32", target_arch = "riscv64"))]
pub unsafe fn sample(pc: usize, ra: usize, fp: usize, sp: usize) {
    sample_regs(unwind::Regs {
        pc: pc as u64,
        fp: fp as u64,
        sp: sp as u64,
        lr: Some(ra as u64),
    })
}

/// The timer interrupt's sample: walks the frame pointers from the trapped
/// registers and queues the stack for the next flush.
///
/// # Safety
/// Called from the CPU's timer interrupt handler with the interrupted
/// `rip`, `rbp` (frame pointer) and `rsp`, from the interrupt frame.
#[cfg(target_arch = "x86_64")]
pub unsafe fn sample(rip: usize, rbp: usize, rsp: usize) {
    sample_regs(unwind::Regs {
        pc: rip as u64,
        fp: rbp as u64,
        sp: rsp as u64,
        lr: None,
    })
}

/// The timer interrupt's sample on Cortex-M: walks the `r7` frame records
/// from the interrupted code and queues the stack for the next flush.
///
/// # Safety
/// Called from the timer's exception handler (SysTick) with the interrupted
/// `pc` and `lr` from the hardware's exception frame, the interrupted `r7`
/// (still in `r7` at the handler's entry: the hardware does not stack it)
/// and the interrupted `sp` (just above the exception frame).
#[cfg(target_arch = "arm")]
pub unsafe fn sample(pc: usize, lr: usize, r7: usize, sp: usize) {
    sample_regs(unwind::Regs {
        pc: pc as u64,
        fp: r7 as u64,
        sp: sp as u64,
        lr: Some(lr as u64),
    })
}

unsafe fn sample_regs(regs: unwind::Regs) {
    if !recording() || SESSION.sample_hz.load(Relaxed) == 0 {
        return;
    }
    let h = hart();
    let q = h.queued.load(Relaxed);
    h.samples_taken.fetch_add(1, Relaxed);
    if q >= SAMPLE_SLOTS {
        h.samples_dropped.fetch_add(1, Relaxed);
        return;
    }
    let s = &SESSION;
    let bounds = unwind::StackBounds {
        lo: s.stack_lo.load(Relaxed) as u64,
        hi: s.stack_hi.load(Relaxed) as u64,
    };
    let (tlo, thi) = (
        s.text_lo.load(Relaxed) as u64,
        s.text_hi.load(Relaxed) as u64,
    );
    let Some(arch) = unwind::Arch::host() else {
        return;
    };
    let mem = unwind::RawMemory::new(bounds);
    let (depth, split_sp) = probe::shadow_top();
    let slot = &mut (*h.samples.get())[q];
    slot.fps = [0; MAX_FRAMES];
    let fps = &mut slot.fps;
    let (walk, cut) = unwind::walk_split_records(
        arch,
        &regs,
        bounds,
        &mem,
        |a| a >= tlo && a < thi,
        &mut slot.frames,
        split_sp,
        |i, fp| {
            if let Some(f) = fps.get_mut(i) {
                *f = fp;
            }
        },
    );
    slot.ticks = clock::ticks();
    slot.depth = depth.min(u16::MAX as u32) as u16;
    slot.cut = cut.map_or(NO_CUT, |c| c.min(NO_CUT as usize - 1) as u16);
    slot.n = walk.len as u8;
    h.queued.store(q + 1, Release);
}

/// Sends the hart's queued samples.
pub(super) fn flush_samples(id: usize) {
    let h = &HARTS[id];
    let saved = __fgtrace_irq_save();
    let n = h.queued.load(Acquire);
    if n > 0 {
        // SAFETY: interrupts masked: the sampler cannot add meanwhile.
        let samples = unsafe { &*h.samples.get() };
        with_out(|o| {
            let per_frame = MAX_PAYLOAD / (13 + 18 * MAX_FRAMES);
            for chunk in samples[..n].chunks(per_frame.max(1)) {
                o.maybe_repeat_meta();
                o.frame(SAMPLES_FP, id as u8, |w| {
                    for s in chunk {
                        w.u64(s.ticks).u16(s.depth).u16(s.cut).u8(s.n);
                        for &f in &s.frames[..s.n as usize] {
                            w.u64(f);
                        }
                        let mut fp = FpCoder::default();
                        for &f in &s.fps[..s.n as usize] {
                            w.varint(fp.encode(f));
                        }
                    }
                });
            }
        });
        h.queued.store(0, Relaxed);
    }
    __fgtrace_irq_restore(saved);
}

/// Sends what the running hart has queued: stream records not yet sent and
/// sampled stacks (the stream's buffers do it at every handoff too).
pub fn flush() {
    let id = hart_id();
    if recording() && SESSION.mode.load(Relaxed) == MODE_STREAM {
        flush_calls(id);
        if id == 0 {
            flush_lean();
        }
    }
    flush_samples(id);
}
