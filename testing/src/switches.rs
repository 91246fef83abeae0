//! Recording a capture's context switches (`Options::new().off_cpu(true)`):
//! a switch ring per captured thread, opened before the capture starts and
//! read when it ends (for a future: per poll, on the polling thread), and
//! the result as the trace's `off_cpu`. The queries are in `offcpu`.

use fgtrace_runtime::offcpu::{self, MonoInterval};
use fgtrace_trace::clock::Calibration;
use fgtrace_trace::OffCpu;

/// What one thread of a capture recorded of its switches: the intervals and
/// the records lost, or why nothing could be recorded. `None`: not asked.
pub(crate) type PartOff = Option<Result<(Vec<MonoInterval>, u64), String>>;

/// Opens the calling thread's switch ring for a capture (a cold path, before
/// the capture starts). Panics where a refusal is not allowed.
#[cfg(target_os = "linux")]
pub(crate) fn begin(wanted: bool) -> Option<Result<offcpu::SwitchRing, String>> {
    if !wanted {
        return None;
    }
    let r = offcpu::SwitchRing::open_current(offcpu::CAPTURE_PAGES);
    if let Err(why) = &r {
        if offcpu::env_mode() == offcpu::EnvMode::Required {
            panic!("fgtrace: off-CPU time is required (FGTRACE_OFFCPU=required) but unavailable: {why}");
        }
    }
    Some(r)
}

/// Reads the ring after the capture.
#[cfg(target_os = "linux")]
pub(crate) fn end(ring: Option<Result<offcpu::SwitchRing, String>>) -> PartOff {
    ring.map(|r| r.map(|r| r.finish(fgtrace_trace::clock::monotonic_ns())))
}

/// Why a capture records no off-CPU time where there is no perf_event.
#[cfg(not(target_os = "linux"))]
fn unsupported() -> String {
    fgtrace_runtime::unsupported("off-CPU time (the kernel's context switches, from perf_event)")
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn begin(wanted: bool) -> Option<Result<(), String>> {
    wanted.then(|| Err(unsupported()))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn end(ring: Option<Result<(), String>>) -> PartOff {
    ring.map(|r| r.map(|()| (Vec::new(), 0)))
}

/// The capture's threads' switches as the trace's `off_cpu` (thread `i` of
/// the trace is part `i`).
pub(crate) fn to_meta(cal: &Calibration, end_ns: u64, parts: Vec<PartOff>) -> Option<OffCpu> {
    if parts.iter().all(Option::is_none) {
        return None;
    }
    let mut o = OffCpu::default();
    for (i, p) in parts.into_iter().enumerate() {
        match p {
            Some(Ok((iv, lost))) => {
                o.threads
                    .push(offcpu::to_trace(cal, end_ns, &iv, lost, i as u32));
            }
            Some(Err(why)) => {
                o.unavailable.get_or_insert(why);
            }
            None => {
                o.unavailable
                    .get_or_insert_with(|| "a thread of the capture did not record it".into());
            }
        }
    }
    Some(o)
}

/// Off-CPU time of a captured future: each poll runs on some thread, whose
/// switches during the poll are the future's.
pub(crate) struct AsyncOff {
    wanted: bool,
    #[cfg(target_os = "linux")]
    rings: Vec<offcpu::SwitchRing>,
    refused: Option<String>,
    /// (thread, poll start, poll end) on `CLOCK_MONOTONIC`.
    windows: Vec<(u32, u64, u64)>,
}

impl AsyncOff {
    pub(crate) fn new(wanted: bool) -> AsyncOff {
        AsyncOff {
            wanted,
            #[cfg(target_os = "linux")]
            rings: Vec::new(),
            refused: None,
            windows: Vec::new(),
        }
    }

    /// A poll starts on this thread: its ring is open from here on.
    pub(crate) fn poll_begins(&mut self) -> Option<(u32, u64)> {
        if !self.wanted || self.refused.is_some() {
            return None;
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.refused = Some(unsupported());
            None
        }
        #[cfg(target_os = "linux")]
        {
            let tid = fgtrace_runtime::thread::os_tid();
            if !self.rings.iter().any(|r| r.tid == tid) {
                match begin(true) {
                    Some(Ok(r)) => self.rings.push(r),
                    Some(Err(why)) => {
                        self.refused = Some(why);
                        return None;
                    }
                    None => return None,
                }
            }
            Some((tid, fgtrace_trace::clock::monotonic_ns()))
        }
    }

    pub(crate) fn poll_ends(&mut self, started: Option<(u32, u64)>) {
        if let Some((tid, t0)) = started {
            self.windows
                .push((tid, t0, fgtrace_trace::clock::monotonic_ns()));
        }
    }

    /// The future's off-CPU intervals: each poll's thread's, within the poll.
    pub(crate) fn finish(self) -> PartOff {
        if !self.wanted {
            return None;
        }
        if let Some(why) = self.refused {
            return Some(Err(why));
        }
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut out = Vec::new();
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut lost = 0u64;
        #[cfg(target_os = "linux")]
        {
            let now = fgtrace_trace::clock::monotonic_ns();
            let read: Vec<(u32, Vec<MonoInterval>, u64)> = self
                .rings
                .into_iter()
                .map(|r| {
                    let tid = r.tid;
                    let (iv, l) = r.finish(now);
                    (tid, iv, l)
                })
                .collect();
            for &(tid, a, b) in &self.windows {
                let Some((_, ivs, l)) = read.iter().find(|(t, _, _)| *t == tid) else {
                    continue;
                };
                lost = lost.max(*l);
                for iv in ivs {
                    let (s, e) = (iv.out_ns.max(a), iv.in_ns.min(b));
                    if e > s {
                        out.push(MonoInterval {
                            out_ns: s,
                            in_ns: e,
                            kind: iv.kind,
                        });
                    }
                }
            }
        }
        Some(Ok((out, lost)))
    }
}
