//! Off-CPU time: when each recording thread was switched out, from the
//! kernel's `PERF_RECORD_SWITCH` records, on the trace's time line.
//!
//! A trace keeps, per thread, the sorted list of intervals the thread spent
//! off the CPU, each marked *blocked* (it switched out voluntarily: a sleep,
//! a lock, I/O) or *preempted* (switched out while still runnable). A call's
//! off-CPU time is the overlap of its `[start, end]` with them: views compute
//! it as they read ([`OffCpuThread::within`]). The intervals are stored in the
//! metadata (`off_cpu`), a few dozen bytes per context switch; files written
//! before it existed read as "not recorded".

use serde::{Deserialize, Serialize};

/// Why a thread left the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OffKind {
    /// Switched out voluntarily (sleep, lock, I/O, futex wait...).
    Blocked,
    /// Switched out while still runnable (time slice over, a higher-priority task).
    Preempted,
}

impl OffKind {
    /// `blocked` or `preempted`, as the views print it.
    pub fn name(self) -> &'static str {
        match self {
            OffKind::Blocked => "blocked",
            OffKind::Preempted => "preempted",
        }
    }
}

/// One stretch of time a thread was off the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "(u64, u64, u8)", into = "(u64, u64, u8)")]
pub struct OffInterval {
    /// Switch-out time, nanoseconds since session start.
    pub start_ns: u64,
    /// Until the thread ran again.
    pub dur_ns: u64,
    /// Why the thread was off the CPU.
    pub kind: OffKind,
}

impl OffInterval {
    /// An interval of `dur_ns` from `start_ns` (nanoseconds since session start).
    pub const fn new(start_ns: u64, dur_ns: u64, kind: OffKind) -> OffInterval {
        OffInterval {
            start_ns,
            dur_ns,
            kind,
        }
    }

    /// End of the interval (saturating; validated intervals never saturate).
    pub fn end_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.dur_ns)
    }
}

impl TryFrom<(u64, u64, u8)> for OffInterval {
    type Error = String;
    fn try_from((start_ns, dur_ns, k): (u64, u64, u8)) -> Result<Self, String> {
        let kind = match k {
            0 => OffKind::Blocked,
            1 => OffKind::Preempted,
            k => return Err(format!("unknown off-CPU kind {k}")),
        };
        Ok(OffInterval {
            start_ns,
            dur_ns,
            kind,
        })
    }
}

impl From<OffInterval> for (u64, u64, u8) {
    fn from(i: OffInterval) -> Self {
        (i.start_ns, i.dur_ns, (i.kind == OffKind::Preempted) as u8)
    }
}

/// Off-CPU time split by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OffTime {
    /// Time switched out voluntarily, nanoseconds.
    pub blocked_ns: u64,
    /// Time switched out while runnable, nanoseconds.
    pub preempted_ns: u64,
}

impl OffTime {
    /// Both kinds, nanoseconds (saturating).
    pub fn total_ns(&self) -> u64 {
        self.blocked_ns.saturating_add(self.preempted_ns)
    }

    /// Adds `o`, kind by kind (saturating).
    pub fn add(&mut self, o: OffTime) {
        self.blocked_ns = self.blocked_ns.saturating_add(o.blocked_ns);
        self.preempted_ns = self.preempted_ns.saturating_add(o.preempted_ns);
    }

    /// Subtracts `o`, kind by kind (saturating at 0).
    pub fn sub(&mut self, o: OffTime) {
        self.blocked_ns = self.blocked_ns.saturating_sub(o.blocked_ns);
        self.preempted_ns = self.preempted_ns.saturating_sub(o.preempted_ns);
    }
}

/// One thread's off-CPU intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpuThread {
    /// Index into `TraceMeta::threads`.
    pub thread: u32,
    /// Switch records the kernel could not deliver (its ring was full):
    /// off-CPU time of this thread may be missing where they were lost.
    #[serde(default)]
    pub lost: u64,
    /// Sorted by start, not overlapping.
    #[serde(default)]
    pub intervals: Vec<OffInterval>,
}

impl OffCpuThread {
    /// Off-CPU time within `[start_ns, end_ns)`.
    pub fn within(&self, start_ns: u64, end_ns: u64) -> OffTime {
        let mut t = OffTime::default();
        let first = self.intervals.partition_point(|i| i.end_ns() <= start_ns);
        for i in &self.intervals[first..] {
            if i.start_ns >= end_ns {
                break;
            }
            let d = i
                .end_ns()
                .min(end_ns)
                .saturating_sub(i.start_ns.max(start_ns));
            match i.kind {
                OffKind::Blocked => t.blocked_ns = t.blocked_ns.saturating_add(d),
                OffKind::Preempted => t.preempted_ns = t.preempted_ns.saturating_add(d),
            }
        }
        t
    }

    /// The intervals overlapping `[start_ns, end_ns)`.
    pub fn overlapping(&self, start_ns: u64, end_ns: u64) -> &[OffInterval] {
        let first = self.intervals.partition_point(|i| i.end_ns() <= start_ns);
        let n = self.intervals[first..].partition_point(|i| i.start_ns < end_ns);
        &self.intervals[first..first + n]
    }

    /// Everything this thread spent off the CPU.
    pub fn total(&self) -> OffTime {
        self.within(0, u64::MAX)
    }
}

/// Off-CPU recording of a trace: [`TraceMeta::off_cpu`](super::TraceMeta::off_cpu).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpu {
    /// Why off-CPU time is missing: for the whole trace when `threads` is
    /// empty, else for the threads not listed (never zeros that look real).
    #[serde(default)]
    pub unavailable: Option<String>,
    /// Sorted by thread.
    #[serde(default)]
    pub threads: Vec<OffCpuThread>,
}

impl OffCpu {
    /// Off-CPU time was not recorded at all, for this reason.
    pub fn unavailable(reason: impl Into<String>) -> OffCpu {
        OffCpu {
            unavailable: Some(reason.into()),
            threads: Vec::new(),
        }
    }

    /// The intervals of thread `t`; `None` where they were not recorded.
    pub fn thread(&self, t: u32) -> Option<&OffCpuThread> {
        self.threads
            .binary_search_by_key(&t, |x| x.thread)
            .ok()
            .map(|i| &self.threads[i])
    }

    /// Off-CPU time of a call of thread `t`; `None` where not recorded.
    pub fn within(&self, t: u32, start_ns: u64, end_ns: u64) -> Option<OffTime> {
        self.thread(t).map(|x| x.within(start_ns, end_ns))
    }

    /// Whether any thread has off-CPU time (else views say why not).
    pub fn is_available(&self) -> bool {
        !self.threads.is_empty()
    }

    /// Why it is unavailable, for views: `off-CPU unavailable: <reason>`.
    pub fn reason(&self) -> &str {
        self.unavailable.as_deref().unwrap_or("not recorded")
    }

    /// Switch records lost on all threads.
    pub fn lost(&self) -> u64 {
        super::saturating_sum(self.threads.iter().map(|t| t.lost))
    }

    /// Checks what a file said: threads exist and are sorted, intervals are
    /// sorted, do not overlap and end within `u64` (checked arithmetic).
    pub fn validate(&self, threads: usize) -> Result<(), String> {
        let mut prev_thread = None;
        for t in &self.threads {
            if t.thread as usize >= threads {
                return Err(format!(
                    "off-CPU intervals of thread {} of {threads}",
                    t.thread
                ));
            }
            if prev_thread.is_some_and(|p| p >= t.thread) {
                return Err(format!(
                    "off-CPU threads out of order at thread {}",
                    t.thread
                ));
            }
            prev_thread = Some(t.thread);
            let mut end = 0u64;
            for (k, i) in t.intervals.iter().enumerate() {
                if i.start_ns < end {
                    return Err(format!(
                        "off-CPU interval {k} of thread {} overlaps the one before",
                        t.thread
                    ));
                }
                end = i.start_ns.checked_add(i.dur_ns).ok_or_else(|| {
                    format!(
                        "off-CPU interval {k} of thread {} ends past every valid time",
                        t.thread
                    )
                })?;
            }
        }
        Ok(())
    }
}

impl super::Trace {
    /// Off-CPU time of a call (blocked and preempted), computed from its
    /// thread's intervals; `None` where the trace has none for that thread
    /// (not recorded, or refused: [`OffCpu::reason`]).
    pub fn off_cpu_of(&self, c: &super::Call) -> Option<OffTime> {
        self.meta
            .off_cpu
            .as_ref()?
            .within(c.thread, c.start_ns, c.end_ns())
    }
}

/// Unit tests, and the off-CPU intervals the file format's tests write
/// ([`tests::thread`]).
#[cfg(test)]
pub mod tests {
    use super::*;

    use OffInterval as I;

    fn iv(start_ns: u64, dur_ns: u64, kind: OffKind) -> OffInterval {
        I::new(start_ns, dur_ns, kind)
    }

    /// Thread 0: blocked 100..150, preempted 200..210, blocked 300..400.
    pub fn thread() -> OffCpuThread {
        OffCpuThread {
            thread: 0,
            lost: 0,
            intervals: vec![
                iv(100, 50, OffKind::Blocked),
                iv(200, 10, OffKind::Preempted),
                iv(300, 100, OffKind::Blocked),
            ],
        }
    }

    #[test]
    fn a_call_gets_the_overlap_with_the_intervals_by_kind() {
        let t = thread();
        assert_eq!(
            t.within(0, 1000),
            OffTime {
                blocked_ns: 150,
                preempted_ns: 10
            }
        );
        assert_eq!(
            t.within(120, 205),
            OffTime {
                blocked_ns: 30,
                preempted_ns: 5
            }
        );
        assert_eq!(t.within(150, 200), OffTime::default());
        assert_eq!(
            t.within(350, 360),
            OffTime {
                blocked_ns: 10,
                preempted_ns: 0
            }
        );
        assert_eq!(t.overlapping(120, 205).len(), 2);
        assert_eq!(t.overlapping(150, 200).len(), 0);
    }

    #[test]
    fn round_trips_as_compact_json_and_rejects_bad_kinds() {
        let o = OffCpu {
            unavailable: None,
            threads: vec![thread()],
        };
        let s = serde_json::to_string(&o).unwrap();
        assert!(s.contains("[100,50,0]"), "{s}");
        assert_eq!(serde_json::from_str::<OffCpu>(&s).unwrap(), o);
        let bad = s.replace("[200,10,1]", "[200,10,7]");
        assert!(serde_json::from_str::<OffCpu>(&bad).is_err());
    }

    #[test]
    fn validation_rejects_overflow_overlap_and_unknown_threads() {
        let mut o = OffCpu {
            unavailable: None,
            threads: vec![thread()],
        };
        assert!(o.validate(1).is_ok());
        assert!(o.validate(0).unwrap_err().contains("thread 0 of 0"));
        o.threads[0]
            .intervals
            .push(iv(u64::MAX - 1, 5, OffKind::Blocked));
        assert!(o.validate(1).unwrap_err().contains("past every valid time"));
        o.threads[0].intervals.pop();
        o.threads[0].intervals.push(iv(350, 5, OffKind::Blocked));
        assert!(o.validate(1).unwrap_err().contains("overlaps"));
    }
}
