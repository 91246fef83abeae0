//! The output: frames built in place and written to the board's sink, one
//! hart at a time; console text.

use super::*;

// Aligned, the frame's first: the CRC, from the frame's fifth byte, reads
// whole words.
#[repr(C, align(8))]
pub(super) struct Out {
    /// The frame being built: its payload is filled in place.
    pub(super) scratch: [u8; HEADER + MAX_PAYLOAD + TRAILER],
    pub(super) sink: Option<&'static mut dyn Sink>,
    pub(super) seq: u16,
    pub(super) since_meta: u32,
}

pub(super) struct OutCell(pub(super) UnsafeCell<Out>);
// SAFETY: only touched with interrupts masked and `OUT_LOCK` held.
unsafe impl Sync for OutCell {}

/// Locks the output for this hart, with interrupts masked while it spins;
/// `None` if this hart holds it already (an interrupt handler that
/// interrupted this hart's own output: waiting would never end).
fn lock_out() -> Option<()> {
    let me = hart_id() + 1;
    let saved = __fgtrace_irq_save();
    let mut got = Some(());
    while let Err(owner) = OUT_OWNER.compare_exchange_weak(0, me, Acquire, Relaxed) {
        if owner == me {
            got = None;
            break;
        }
        core::hint::spin_loop();
    }
    __fgtrace_irq_restore(saved);
    got
}

/// Runs `f` on the output with interrupts masked and the output locked;
/// `None` if this hart's own output was interrupted (see [`lock_out`]).
pub(super) fn with_out<R>(f: impl FnOnce(&mut Out) -> R) -> Option<R> {
    let saved = __fgtrace_irq_save();
    let r = with_out_open(f);
    __fgtrace_irq_restore(saved);
    r
}

/// As [`with_out`], with interrupts left as they are: an interrupt handler
/// may run (and record) meanwhile, but cannot use the output.
pub(super) fn with_out_open<R>(f: impl FnOnce(&mut Out) -> R) -> Option<R> {
    lock_out()?;
    // SAFETY: locked by this hart; an interrupt handler on this hart finds
    // it locked and stays out.
    let r = f(unsafe { &mut *OUT.0.get() });
    OUT_OWNER.store(0, Release);
    Some(r)
}

impl Out {
    /// Builds a payload with `fill` and sends it as one frame.
    pub(super) fn frame(&mut self, kind: u8, hart: u8, fill: impl FnOnce(&mut Writer<'_>)) {
        let mut w = Writer::new(&mut self.scratch[HEADER..HEADER + MAX_PAYLOAD]);
        fill(&mut w);
        let len = w.len;
        self.send_scratch(kind, hart, len);
    }

    pub(super) fn meta(&mut self) {
        let s = &SESSION;
        let (tps, start, name, clock) = (
            s.ticks_per_sec.load(Relaxed),
            s.start_ticks.load(Relaxed),
            // SAFETY: written once in `init`, before any output.
            unsafe { *NAME.0.get() },
            // SAFETY: as above.
            unsafe { *CLOCK_NAME.0.get() },
        );
        let mode = s.mode.load(Relaxed);
        let gen = s.gen.load(Relaxed);
        let hz = s.sample_hz.load(Relaxed);
        self.frame(META, 0, |w| {
            w.u8(VERSION)
                .u8(mode)
                .u8(MAX_HARTS as u8)
                .u64(tps)
                .u64(start)
                .u32(gen)
                .u32(hz)
                .str(clock)
                .u8(counter_names().len() as u8);
            for c in counter_names() {
                w.str(c);
            }
            w.bytes(name.as_bytes());
        });
        for site in site::sites() {
            self.site(site);
        }
        self.since_meta = 0;
        // The counters too, so a host that misses the last ones still knows
        // roughly what was sent.
        for (h, x) in HARTS.iter().enumerate() {
            if x.written.load(Relaxed) != 0 {
                self.stats(h);
            }
        }
    }

    pub(super) fn site(&mut self, s: &Site) {
        let Some(id) = s.known_id() else { return };
        self.frame(SITE, 0, |w| {
            w.u32(id)
                .u32(s.line)
                .u8(s.is_async as u8)
                .str(s.name)
                .str(s.module_path)
                .str(s.file)
                // The names of the values its calls record (`#[traced(values(..))]`).
                .u8(s.values.len() as u8);
            for v in s.values {
                w.str(v);
            }
        });
    }

    pub(super) fn maybe_repeat_meta(&mut self) {
        if self.since_meta >= REPEAT_EVERY {
            self.meta();
        }
    }

    /// `first`: the index of `recs[0]` among the hart's records this
    /// session, so the host can tell exactly which records never arrived.
    /// Packed ([`CALLS_PACKED`]: a plain call in about 6 bytes, where the
    /// record has 16) straight into the frame, which goes to the sink whole.
    /// Returns how many of `recs` are not calls ([`RawCall::non_calls`](fgtrace_core::record::RawCall::non_calls)).
    pub(super) fn calls(&mut self, hart: u8, first: u64, recs: &[RawCall]) -> u64 {
        let mut at = 0;
        let mut non_calls = 0;
        while at < recs.len() {
            self.maybe_repeat_meta();
            let body = &mut self.scratch[HEADER..HEADER + MAX_PAYLOAD];
            body[..8].copy_from_slice(&(first + at as u64).to_le_bytes());
            let (n, used) = wire::pack_calls_counting(&mut body[8..], &recs[at..], &mut non_calls);
            at += n;
            self.send_scratch(CALLS_PACKED, hart, 8 + used);
        }
        non_calls
    }

    /// The first hart's lean records, `first` their index this session
    /// ([`LEAN_CALLS`], packed straight into the frame).
    pub(super) fn lean_calls(&mut self, first: u64, recs: &[LeanCall]) {
        let mut at = 0;
        while at < recs.len() {
            self.maybe_repeat_meta();
            let body = &mut self.scratch[HEADER..HEADER + MAX_PAYLOAD];
            body[..8].copy_from_slice(&(first + at as u64).to_le_bytes());
            let (n, used) = wire::pack_lean(&mut body[8..], &recs[at..], |c| LeanRecord {
                start: c.start,
                dur: c.end.wrapping_sub(c.start),
                // SAFETY: a lean call's site is the `&'static Site` its
                // traced fn passed, decided this session (so it has an id).
                site: unsafe { &*(c.site as *const Site) }.id_decided(),
                sp: c.sp as u64,
            });
            at += n;
            self.send_scratch(LEAN_CALLS, 0, 8 + used);
        }
    }

    /// Sends the payload of `len` bytes already in `scratch[HEADER..]`.
    fn send_scratch(&mut self, kind: u8, hart: u8, len: usize) {
        let n = wire::seal(&mut self.scratch, self.seq, kind, hart, len);
        self.seq = self.seq.wrapping_add(1);
        self.since_meta += 1;
        if let Some(sink) = self.sink.as_deref_mut() {
            let took = sink.write(&self.scratch[..n]);
            if took < n {
                REFUSED.fetch_add((n - took) as u64, Relaxed);
            }
        }
    }

    pub(super) fn stats(&mut self, h: usize) {
        let x = &HARTS[h];
        self.frame(STATS, h as u8, |w| {
            // Records left unsent at stop were written too: the host counts
            // the ones it never received as lost.
            w.u64(x.written.load(Relaxed) + x.unsent.load(Relaxed) as u64)
                .u64(x.dropped.load(Relaxed) + x.nested_dropped.load(Relaxed) as u64)
                .u64(x.samples_taken.load(Relaxed))
                .u64(x.samples_dropped.load(Relaxed))
                .u64(x.overruns.load(Relaxed) as u64)
                .u64(REFUSED.load(Relaxed))
                .u64(x.open_at_stop.load(Relaxed) as u64);
            // The first hart's lean records (none elsewhere).
            let (lw, ld) = if h == 0 {
                (lean_written(), LEAN.dropped.load(Relaxed))
            } else {
                (0, 0)
            };
            w.u64(lw).u64(ld).u64(x.non_calls.load(Relaxed));
        });
    }
}

pub(super) struct NameCell(pub(super) UnsafeCell<&'static str>);
// SAFETY: written once in `init`.
unsafe impl Sync for NameCell {}

/// Sends console text as a [`TEXT`] frame (the host prints it).
pub fn text(s: &str) {
    with_out(|o| {
        for chunk in s.as_bytes().chunks(MAX_PAYLOAD) {
            o.frame(TEXT, hart_id() as u8, |w| {
                w.bytes(chunk);
            });
        }
    });
}

/// Formats into a [`TEXT`] frame without allocating (up to 256 bytes).
pub fn textf(args: core::fmt::Arguments<'_>) {
    struct Buf {
        b: [u8; 256],
        n: usize,
    }
    impl core::fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let take = s.len().min(self.b.len() - self.n);
            self.b[self.n..self.n + take].copy_from_slice(&s.as_bytes()[..take]);
            self.n += take;
            Ok(())
        }
    }
    let mut b = Buf { b: [0; 256], n: 0 };
    let _ = core::fmt::write(&mut b, args);
    text(core::str::from_utf8(&b.b[..b.n]).unwrap_or("?"));
}
