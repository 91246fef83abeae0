//! The first hart's lean records (a board whose clock never reads the same
//! twice): two buffers of their own, handed over through
//! `__fgtrace_lean_full` and sent as `LEAN_CALLS` frames.

use super::*;

/// The first hart's lean records (a board whose clock never reads the same
/// twice: its plain calls are one record each, written at exit, nested by
/// time on the host): two buffers as for the other records, the flight
/// recorder's ring the first.
pub(super) struct Lean {
    pub(super) bufs: UnsafeCell<[[LeanCall; BUF_CALLS]; 2]>,
    /// A buffer is being sent (the other one records).
    pub(super) sending: AtomicBool,
    /// Stream: records handed over this session; flight: the ring's laps,
    /// in records.
    pub(super) written: AtomicU64,
    /// Records no buffer could take (the other one still being sent).
    pub(super) dropped: AtomicU64,
    /// Lean calls open at the last stop that have ended since.
    pub(super) late: AtomicU64,
}

// SAFETY: the first hart's and its interrupt handlers', which change it with
// interrupts masked.
unsafe impl Sync for Lean {}

fn lean_buf(i: usize) -> *mut LeanCall {
    // SAFETY: one of the two buffers.
    unsafe { (LEAN.bufs.get() as *mut LeanCall).add(i * BUF_CALLS) }
}

/// The first hart joins a session: its lean writer at the first buffer.
pub(super) fn lean_join() {
    let saved = __fgtrace_irq_save();
    // SAFETY: the first hart's writer, interrupts masked.
    unsafe {
        let w = &mut *lean_writer();
        w.ptr = lean_buf(0);
        w.lim = lean_buf(0).add(BUF_CALLS);
    }
    LEAN.sending.store(false, Relaxed);
    __fgtrace_irq_restore(saved);
}

/// A lean record the first hart's buffer could not take: in stream mode the
/// full buffer is swapped for the other one, which takes the record, then
/// sent with interrupts as they were (as [`drain`] does); the flight
/// recorder's ring starts over. What no buffer can take is counted.
#[no_mangle]
pub fn __fgtrace_lean_full(start: u64, end: u64, site: usize, sp: usize) {
    let c = &LeanCall {
        start,
        end,
        site,
        sp,
    };
    let saved = __fgtrace_irq_save();
    // SAFETY: the first hart's writer (lean records are made only there),
    // interrupts masked.
    let w = unsafe { &mut *lean_writer() };
    let put = |w: &mut probe::board::LeanWriter| {
        // SAFETY: below `lim`, in a buffer.
        unsafe {
            w.ptr.write(*c);
            w.ptr = w.ptr.add(1);
        }
    };
    if !w.ptr.is_null() && w.ptr < w.lim {
        // An interrupt handed the buffer over meanwhile.
        put(w);
        __fgtrace_irq_restore(saved);
        return;
    }
    if w.ptr.is_null() && !recording() {
        // A lean call open at stop, ended now: its session never records
        // it; the host adds it to that session's calls open at stop
        // ([`LATE`], the running total: a frame the output cannot take now,
        // from an interrupt during output, the next one makes up for).
        let late = LEAN.late.fetch_add(1, Relaxed) + 1;
        __fgtrace_irq_restore(saved);
        let gen = SESSION.gen.load(Relaxed);
        with_out(|o| {
            o.frame(LATE, 0, |w| {
                w.u32(gen).u64(late);
            })
        });
        return;
    }
    if w.ptr.is_null() || LEAN.sending.load(Relaxed) {
        LEAN.dropped.fetch_add(1, Relaxed);
        __fgtrace_irq_restore(saved);
        return;
    }
    if SESSION.mode.load(Relaxed) == MODE_FLIGHT {
        LEAN.written.fetch_add(BUF_CALLS as u64, Relaxed);
        w.ptr = lean_buf(0);
        put(w);
        __fgtrace_irq_restore(saved);
        return;
    }
    // SAFETY: `lim` ends one of the two buffers.
    let full = unsafe { w.lim.sub(BUF_CALLS) };
    lean_swap(w, full);
    put(w);
    lean_send(full, BUF_CALLS, saved);
}

/// Points the writer at the lean buffer that is not `base` (interrupts
/// masked).
fn lean_swap(w: &mut probe::board::LeanWriter, base: *mut LeanCall) {
    let other = if base == lean_buf(0) {
        lean_buf(1)
    } else {
        lean_buf(0)
    };
    w.ptr = other;
    // SAFETY: the other buffer's end.
    w.lim = unsafe { other.add(BUF_CALLS) };
}

/// Sends `n` lean records at `buf` (swapped out, interrupts masked by
/// `saved`): unmasks, sends, and lets the next handoff go.
fn lean_send(buf: *mut LeanCall, n: usize, saved: usize) {
    LEAN.sending.store(true, Relaxed);
    let first = LEAN.written.fetch_add(n as u64, Relaxed);
    __fgtrace_irq_restore(saved);
    // SAFETY: swapped out: nothing writes it until `sending` is cleared.
    let recs = unsafe { core::slice::from_raw_parts(buf, n) };
    if with_out_open(|o| o.lean_calls(first, recs)).is_none() {
        LEAN.dropped.fetch_add(n as u64, Relaxed);
    }
    LEAN.sending.store(false, Release);
}

/// Sends the first hart's unsent lean records (stream mode).
pub(super) fn flush_lean() {
    let saved = __fgtrace_irq_save();
    // SAFETY: the first hart's writer, interrupts masked.
    let w = unsafe { &mut *lean_writer() };
    if w.ptr.is_null() || LEAN.sending.load(Relaxed) {
        __fgtrace_irq_restore(saved);
        return;
    }
    // SAFETY: `lim` ends one of the two buffers, `ptr` is in it.
    let base = unsafe { w.lim.sub(BUF_CALLS) };
    // SAFETY: as above.
    let n = unsafe { w.ptr.offset_from(base) } as usize;
    if n == 0 {
        __fgtrace_irq_restore(saved);
        return;
    }
    lean_swap(w, base);
    lean_send(base, n, saved);
}

/// The first hart's lean records this session: handed over (stream), or
/// written into the ring (flight recorder: its laps and where it is).
pub(super) fn lean_written() -> u64 {
    let laps = LEAN.written.load(Relaxed);
    if SESSION.mode.load(Relaxed) != MODE_FLIGHT {
        return laps;
    }
    // SAFETY: a plain read of the first hart's writer.
    let p = unsafe { (*lean_writer()).ptr };
    if p.is_null() {
        return laps;
    }
    // SAFETY: the ring's `ptr` is in its first buffer.
    laps + unsafe { p.offset_from(lean_buf(0)) } as u64
}

/// Sends the flight recorder's lean ring, oldest first (interrupts masked
/// by the caller).
pub(super) fn dump_lean(o: &mut Out) {
    // SAFETY: the first hart's writer, interrupts masked.
    let w = unsafe { &mut *lean_writer() };
    if w.ptr.is_null() {
        return;
    }
    let laps = LEAN.written.load(Relaxed);
    // SAFETY: the ring's `ptr` is in its first buffer.
    let at = unsafe { w.ptr.offset_from(lean_buf(0)) } as usize;
    // SAFETY: the first buffer.
    let ring = unsafe { core::slice::from_raw_parts(lean_buf(0), BUF_CALLS) };
    let total = laps + at as u64;
    if laps > 0 {
        o.lean_calls(total - BUF_CALLS as u64, &ring[at..]);
    }
    o.lean_calls(total - at as u64, &ring[..at]);
}
