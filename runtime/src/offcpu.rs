//! Recording off-CPU time (`Config::off_cpu`, `testing::Options::off_cpu`).
//!
//! Each recording thread opens, from a cold path (the core's `join` hook, or
//! the start of a capture), one `perf_event` software event on itself
//! (`PERF_COUNT_SW_DUMMY`, user space only) with `context_switch` set: the
//! kernel then writes a `PERF_RECORD_SWITCH` record into the event's ring
//! each time the thread is switched out or in, with its TID and a
//! `CLOCK_MONOTONIC` time (`sample_id_all`). The switch-out record says in
//! its `misc` whether the thread was still runnable
//! (`PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`, kernel >= 4.17): preempted, else
//! blocked. Nothing runs on the probe's hot path: a session's rings are read
//! by a reader thread of their own every few ms, a capture's at its end, and
//! the pairs become [`OffInterval`]s on the trace's time line at stop.
//!
//! `FGTRACE_OFFCPU=unavailable` makes every open fail (to test the refusal
//! path); `FGTRACE_OFFCPU=required` makes a refusal an error.

use fgtrace_trace::clock::Calibration;
use fgtrace_trace::{OffCpuThread, OffInterval, OffKind};
#[cfg(target_os = "linux")]
pub use linux::*;

/// What `FGTRACE_OFFCPU` asks of the off-CPU recording itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvMode {
    /// Nothing special.
    Normal,
    /// Make every open fail, as a kernel that refuses would.
    Unavailable,
    /// A refusal is an error (`Session::start` fails, a capture panics).
    Required,
}

pub fn env_mode() -> EnvMode {
    match std::env::var("FGTRACE_OFFCPU")
        .unwrap_or_default()
        .to_ascii_lowercase()
        .as_str()
    {
        "unavailable" | "refuse" | "refused" => EnvMode::Unavailable,
        "required" | "require" => EnvMode::Required,
        _ => EnvMode::Normal,
    }
}

/// An interval in `CLOCK_MONOTONIC` nanoseconds, as the kernel stamped it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonoInterval {
    pub out_ns: u64,
    pub in_ns: u64,
    pub kind: OffKind,
}

/// `CLOCK_MONOTONIC` intervals to trace time, clipped to `[0, end_ns]`.
pub fn to_trace(
    cal: &Calibration,
    end_ns: u64,
    intervals: &[MonoInterval],
    lost: u64,
    thread: u32,
) -> OffCpuThread {
    OffCpuThread {
        thread,
        lost,
        intervals: to_trace_after(cal, 0, end_ns, intervals),
    }
}

/// `CLOCK_MONOTONIC` intervals to trace time, clipped to `[floor_ns,
/// end_ns]`: sorted and apart whatever rounding did, none before `floor_ns`
/// (the end of the intervals already converted).
pub(crate) fn to_trace_after(
    cal: &Calibration,
    floor_ns: u64,
    end_ns: u64,
    intervals: &[MonoInterval],
) -> Vec<OffInterval> {
    let mut out: Vec<OffInterval> = Vec::with_capacity(intervals.len());
    let mut floor = floor_ns;
    for i in intervals {
        let s = cal.mono_to_ns(i.out_ns).min(end_ns).max(floor);
        let e = cal.mono_to_ns(i.in_ns).min(end_ns).max(s);
        if e > s {
            out.push(OffInterval {
                start_ns: s,
                dur_ns: e - s,
                kind: i.kind,
            });
            floor = e;
        }
    }
    out
}

/// The perf_event side: rings, their reader, the session's recorder.
#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use crate::perf_ring::{self, Fd, MmapRing};
    use crate::thread;
    use fgtrace_trace::clock;
    use fgtrace_trace::{OffCpu, ThreadInfo};
    use parking_lot::Mutex;
    use perf_event_open_sys as sys;
    use std::sync::atomic::{AtomicBool, Ordering::*};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::Duration;

    /// Data pages of a session thread's ring (drained every 5 ms): 16 KB,
    /// about 340 switches, so up to 68,000 switches a second per thread
    /// before the kernel counts records as lost. Small because ring memory
    /// is locked and limited per user (`perf_event_mlock_kb`), and every
    /// recording thread has one.
    const SESSION_PAGES: usize = 4;
    /// Data pages of a capture thread's ring (drained at the end of the
    /// capture): 64 KB, about 1,360 switches; more are counted as lost.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub const CAPTURE_PAGES: usize = 16;
    /// How often a session's reader drains the rings.
    const READ_EVERY: Duration = Duration::from_millis(5);

    /// Switch records of one thread turned into intervals as they are read.
    #[derive(Default)]
    pub(super) struct Pairer {
        /// The last switch-out not yet matched: time, preempted.
        out: Option<(u64, bool)>,
        intervals: Vec<MonoInterval>,
        lost: u64,
    }

    impl Pairer {
        pub(super) fn record(&mut self, r: &perf_ring::Record<'_>) {
            match r.ty {
                sys::bindings::PERF_RECORD_SWITCH => {
                    // sample_id: pid u32, tid u32, time u64.
                    let Some(time) = r.u64_at(8) else { return };
                    let misc = r.misc as u32;
                    if misc & sys::bindings::PERF_RECORD_MISC_SWITCH_OUT != 0 {
                        let preempted =
                            misc & sys::bindings::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0;
                        self.out = Some((time, preempted));
                    } else {
                        self.switched_in(time);
                    }
                }
                sys::bindings::PERF_RECORD_LOST => {
                    self.lost = self.lost.saturating_add(r.u64_at(8).unwrap_or(0));
                    // The matching record may be among the lost: pair nothing across.
                    self.out = None;
                }
                _ => {}
            }
        }

        /// Closes an interval still open at `end_ns` (the thread is off the CPU
        /// when recording ends) and returns the intervals.
        pub(super) fn finish(mut self, end_ns: u64) -> (Vec<MonoInterval>, u64) {
            self.switched_in(end_ns);
            (self.intervals, self.lost)
        }

        /// The thread runs again at `in_ns`: the pending switch-out becomes
        /// an interval (none if there is none, or if the clock went back).
        fn switched_in(&mut self, in_ns: u64) {
            if let Some((out_ns, preempted)) = self.out.take() {
                if in_ns > out_ns {
                    self.intervals.push(MonoInterval {
                        out_ns,
                        in_ns,
                        kind: if preempted {
                            OffKind::Preempted
                        } else {
                            OffKind::Blocked
                        },
                    });
                }
            }
        }
    }

    /// How much of one ring's intervals and losses went to the trace file
    /// while recording ([`Recorder::publish`]).
    #[derive(Clone, Copy, Default)]
    pub(super) struct Published {
        /// Intervals already handed out.
        intervals: usize,
        /// Lost records already handed out.
        lost: u64,
        /// The ring was announced (even with no interval yet).
        announced: bool,
    }

    /// The switch records of one thread.
    pub struct SwitchRing {
        pub tid: u32,
        ring: MmapRing,
        pairer: Pairer,
        published: Published,
        _fd: Fd,
    }

    /// A ring of a thread that exited, read for the last time.
    struct Finished {
        tid: u32,
        intervals: Vec<MonoInterval>,
        lost: u64,
        published: Published,
    }

    /// Hands `f` the part of one ring not yet published; advances the
    /// cursor when `f` takes it.
    fn publish_one(
        tid: u32,
        intervals: &[MonoInterval],
        lost: u64,
        p: &mut Published,
        f: &mut dyn FnMut(u32, &[MonoInterval], u64) -> bool,
    ) {
        let new = &intervals[p.intervals.min(intervals.len())..];
        let lost_new = lost.saturating_sub(p.lost);
        if p.announced && new.is_empty() && lost_new == 0 {
            return;
        }
        if f(tid, new, lost_new) {
            p.intervals = intervals.len();
            p.lost = lost;
            p.announced = true;
        }
    }

    impl SwitchRing {
        /// Opens the calling thread's switch event and its ring.
        pub fn open_current(data_pages: usize) -> Result<SwitchRing, String> {
            let what = "context switches of this thread";
            if env_mode() == EnvMode::Unavailable {
                return Err(format!(
                    "perf_event_open({what}) refused: forced by FGTRACE_OFFCPU=unavailable"
                ));
            }
            let tid = thread::os_tid();
            let mut a = sys::bindings::perf_event_attr {
                type_: sys::bindings::PERF_TYPE_SOFTWARE,
                config: sys::bindings::PERF_COUNT_SW_DUMMY as u64,
                sample_type: (sys::bindings::PERF_SAMPLE_TID | sys::bindings::PERF_SAMPLE_TIME)
                    as u64,
                ..Default::default()
            };
            a.set_sample_id_all(1);
            a.set_context_switch(1);
            a.set_exclude_kernel(1);
            a.set_exclude_hv(1);
            a.set_use_clockid(1);
            a.clockid = libc::CLOCK_MONOTONIC;
            // Nobody polls the descriptor: wake (nobody) only when half full.
            a.set_watermark(1);
            a.__bindgen_anon_2.wakeup_watermark = (perf_ring::page_size() * data_pages / 2) as u32;
            let fd = perf_ring::open(&mut a, tid as i32, what).map_err(|e| e.to_string())?;
            let ring = MmapRing::map(&fd, data_pages).map_err(|e| e.to_string())?;
            Ok(SwitchRing {
                tid,
                ring,
                pairer: Pairer::default(),
                published: Published::default(),
                _fd: fd,
            })
        }

        /// Reads the records written so far.
        pub fn drain(&mut self) {
            let p = &mut self.pairer;
            self.ring.drain(|r| p.record(r));
        }

        /// The last read, then the intervals (one still open ends at
        /// `end_mono_ns`) and the number of records lost.
        pub fn finish(mut self, end_mono_ns: u64) -> (Vec<MonoInterval>, u64) {
            self.drain();
            self.pairer.finish(end_mono_ns)
        }
    }

    /// A session's off-CPU recording: the rings of its threads and their reader.
    pub struct Recorder {
        rings: Mutex<Vec<SwitchRing>>,
        /// Rings of threads that exited, already read.
        done: Mutex<Vec<Finished>>,
        /// The first refusal (later ones are the same, or close).
        refused: Mutex<Option<String>>,
        stop: AtomicBool,
        reader: Mutex<Option<JoinHandle<()>>>,
    }

    impl Recorder {
        /// Starts off-CPU recording: opens the calling thread's ring first, so
        /// a refusal is known (and said, in one line) at once. `Err` only when
        /// `FGTRACE_OFFCPU=required` and the kernel refused.
        pub fn start() -> Result<Arc<Recorder>, String> {
            let r = Arc::new(Recorder {
                rings: Mutex::new(Vec::new()),
                done: Mutex::new(Vec::new()),
                refused: Mutex::new(None),
                stop: AtomicBool::new(false),
                reader: Mutex::new(None),
            });
            match SwitchRing::open_current(SESSION_PAGES) {
                Ok(ring) => r.rings.lock().push(ring),
                Err(why) => {
                    if env_mode() == EnvMode::Required {
                        return Err(format!("off-CPU time is required (FGTRACE_OFFCPU=required) but unavailable: {why}"));
                    }
                    eprintln!("fgtrace: off-CPU time unavailable: {why}");
                    *r.refused.lock() = Some(why);
                    return Ok(r);
                }
            }
            let me = r.clone();
            let h = std::thread::Builder::new()
                .name("fgtrace-offcpu".into())
                .spawn(move || me.read_loop())
                .map_err(|e| format!("cannot start the off-CPU reader thread: {e}"))?;
            *r.reader.lock() = Some(h);
            Ok(r)
        }

        /// Opens the calling thread's ring (once per thread; a cold path: the
        /// core's `join` hook). A refusal leaves that thread without off-CPU time.
        pub fn register_current_thread(&self) {
            if self.refused.lock().is_some() || self.stop.load(Acquire) {
                return;
            }
            let tid = thread::os_tid();
            let mut rings = self.rings.lock();
            if rings.iter().any(|r| r.tid == tid) {
                return;
            }
            match SwitchRing::open_current(SESSION_PAGES) {
                Ok(r) => rings.push(r),
                Err(why) => {
                    drop(rings);
                    let mut refused = self.refused.lock();
                    if refused.is_none() {
                        eprintln!("fgtrace: off-CPU time unavailable for thread {tid}: {why}");
                        *refused = Some(why);
                    }
                }
            }
        }

        /// Why off-CPU time is missing (the first refusal), if it is.
        pub fn refused(&self) -> Option<String> {
            self.refused.lock().clone()
        }

        /// Stops the reader (a session that failed to start).
        pub fn cancel(&self) {
            self.stop.store(true, Release);
        }

        fn read_loop(self: Arc<Self>) {
            fgtrace_core::probe::mark_internal_thread();
            let mut rounds = 0u32;
            while !self.stop.load(Acquire) {
                std::thread::sleep(READ_EVERY);
                let mut rings = self.rings.lock();
                for r in rings.iter_mut() {
                    r.drain();
                }
                rounds = rounds.wrapping_add(1);
                if rounds % 20 == 0 {
                    // Rings of threads that exited: read them one last time and
                    // free them (each is locked memory the kernel limits).
                    let mut i = 0;
                    while i < rings.len() {
                        let alive =
                            std::path::Path::new(&format!("/proc/self/task/{}", rings[i].tid))
                                .exists();
                        if alive {
                            i += 1;
                        } else {
                            let r = rings.swap_remove(i);
                            let (tid, published) = (r.tid, r.published);
                            let (intervals, lost) = r.finish(clock::monotonic_ns());
                            self.done.lock().push(Finished {
                                tid,
                                intervals,
                                lost,
                                published,
                            });
                        }
                    }
                }
            }
        }

        /// While recording: hands `f` each ring's intervals closed since the
        /// last call and the records lost since, as `f(tid, intervals,
        /// lost)`: every ring once even with nothing (so a thread that never
        /// left the CPU is known as recorded), then only when there is news.
        /// `f` returns whether it took them (else they come again next time).
        /// Intervals are the reader thread's (drained every few ms): one
        /// still open is not among them.
        pub fn publish(&self, mut f: impl FnMut(u32, &[MonoInterval], u64) -> bool) {
            for d in self.done.lock().iter_mut() {
                publish_one(d.tid, &d.intervals, d.lost, &mut d.published, &mut f);
            }
            for r in self.rings.lock().iter_mut() {
                let p = &r.pairer;
                publish_one(r.tid, &p.intervals, p.lost, &mut r.published, &mut f);
            }
        }

        /// Stops reading and returns the off-CPU time of `threads` on the
        /// trace's time line (`end_ns`: the session's length).
        pub fn finish(&self, cal: &Calibration, end_ns: u64, threads: &[ThreadInfo]) -> OffCpu {
            self.stop.store(true, Release);
            if let Some(h) = self.reader.lock().take() {
                let _ = h.join();
            }
            let end_mono = cal.origin.mono_ns.saturating_add(end_ns);
            let mut all: Vec<(u32, Vec<MonoInterval>, u64)> =
                std::mem::take(&mut *self.done.lock())
                    .into_iter()
                    .map(|d| (d.tid, d.intervals, d.lost))
                    .collect();
            for r in self.rings.lock().drain(..) {
                let tid = r.tid;
                let (iv, lost) = r.finish(end_mono);
                all.push((tid, iv, lost));
            }
            let refused = self.refused.lock().clone();
            let mut out = Vec::new();
            for (i, t) in threads.iter().enumerate() {
                let mut mine: Vec<&(u32, Vec<MonoInterval>, u64)> =
                    all.iter().filter(|(tid, _, _)| *tid == t.tid).collect();
                if mine.is_empty() {
                    continue;
                }
                mine.sort_by_key(|(_, iv, _)| iv.first().map_or(0, |i| i.out_ns));
                let ivs: Vec<MonoInterval> = mine
                    .iter()
                    .flat_map(|(_, iv, _)| iv.iter().copied())
                    .collect();
                let lost = mine.iter().map(|(_, _, l)| *l).sum();
                out.push(to_trace(cal, end_ns, &ivs, lost, i as u32));
            }
            let unavailable = match refused {
                Some(r) => Some(r),
                None if out.len() < threads.len() => {
                    Some("some threads were not recorded (no traced call while recording)".into())
                }
                None => None,
            };
            OffCpu {
                unavailable,
                threads: out,
            }
        }
    }

    impl Drop for Recorder {
        fn drop(&mut self) {
            self.stop.store(true, Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_os = "linux")]
    use perf_event_open_sys as sys;

    #[cfg(target_os = "linux")]
    fn switch(time: u64) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        b[8..16].copy_from_slice(&time.to_ne_bytes());
        b
    }

    #[cfg(target_os = "linux")]
    fn feed(p: &mut Pairer, ty: u32, misc: u32, body: &[u8]) {
        p.record(&crate::perf_ring::Record {
            ty,
            misc: misc as u16,
            body,
        });
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn switches_pair_into_blocked_and_preempted_intervals() {
        let out = sys::bindings::PERF_RECORD_MISC_SWITCH_OUT;
        let pre = out | sys::bindings::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT;
        let sw = sys::bindings::PERF_RECORD_SWITCH;
        let mut p = Pairer::default();
        feed(&mut p, sw, 0, &switch(50)); // an in without an out: ignored
        feed(&mut p, sw, out, &switch(100));
        feed(&mut p, sw, 0, &switch(130));
        feed(&mut p, sw, pre, &switch(200));
        feed(&mut p, sw, 0, &switch(205));
        let mut lost = vec![0u8; 16];
        lost[8..16].copy_from_slice(&3u64.to_ne_bytes());
        feed(&mut p, sw, out, &switch(300));
        feed(&mut p, sys::bindings::PERF_RECORD_LOST, 0, &lost);
        feed(&mut p, sw, 0, &switch(400)); // its out may be lost: not paired
        feed(&mut p, sw, out, &switch(500)); // still out at the end
        let (iv, lost) = p.finish(520);
        assert_eq!(lost, 3);
        let got: Vec<_> = iv.iter().map(|i| (i.out_ns, i.in_ns, i.kind)).collect();
        assert_eq!(
            got,
            [
                (100, 130, OffKind::Blocked),
                (200, 205, OffKind::Preempted),
                (500, 520, OffKind::Blocked)
            ]
        );
    }

    #[test]
    fn monotonic_intervals_land_on_the_trace_clock_sorted_and_clipped() {
        let cal = Calibration::start();
        let o = cal.origin.mono_ns;
        let iv = |a: u64, b: u64| MonoInterval {
            out_ns: o + a,
            in_ns: o + b,
            kind: OffKind::Blocked,
        };
        let t = to_trace(&cal, 1000, &[iv(10, 20), iv(15, 40), iv(900, 2000)], 0, 3);
        let got: Vec<_> = t.intervals.iter().map(|i| (i.start_ns, i.dur_ns)).collect();
        assert_eq!(got, [(10, 10), (20, 20), (900, 100)]);
        assert_eq!(t.thread, 3);
    }
}
