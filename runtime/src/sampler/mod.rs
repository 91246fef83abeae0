//! Stack sampling, on the trace clock, beside the traced calls.
//!
//! Two backends (Linux):
//! * `timer` (per-thread CPU time) and `wall`: a per-thread timer raises a
//!   signal on the thread itself, whose handler walks the frame pointers
//!   ([`unwind`]) into a preallocated per-thread buffer, as Zephyr's timer
//!   interrupt does. CPU time is measured by a `perf_event` `cpu-clock`
//!   counter (hrtimer based: 10 kHz per thread works); where perf_event is
//!   refused it falls back to POSIX thread CPU-time timers, which only fire at
//!   the scheduler tick (250 Hz here) — with a warning that says so.
//! * a `perf_event` event (`cpu-clock`, `cycles`, `cache-misses`, ...): the
//!   kernel samples user-space call chains into an mmap ring buffer.
//!
//! `timer` takes the second path wherever `perf_event_open` allows it (a
//! `cpu-clock` ring with kernel call chains: no signal, about perf's cost) and
//! the signal path only where it does not ([`Backend`]); `wall` always takes
//! the signal path (a CPU-clock event cannot see blocked threads). Ring samples
//! carry neither the shadow depth nor the cut: both are joined from the trace
//! when it is read (`trace::SHADOW_DEPTH_FROM_TRACE`, and the chain join of `fgtrace-view`).
//!
//! With the feature `unwind`, both paths also copy each sample's registers
//! and the top of its stack, and the sampler thread unwinds the copies
//! through `.eh_frame` (`cfi`): stacks of code built without frame pointers.
//!
//! A sampler thread registers every thread of the process (rescanning
//! `/proc/self/task`, so threads started later are sampled too), drains the
//! buffers, and hands the samples to the session at stop.

pub use fgtrace_core::unwind;

#[cfg(target_os = "linux")]
pub use fgtrace_trace::maps;
#[cfg(all(target_os = "linux", feature = "unwind"))]
mod cfi;
#[cfg(all(
    target_os = "linux",
    feature = "unwind",
    not(any(target_arch = "x86_64", target_arch = "aarch64"))
))]
compile_error!("fgtrace's `unwind` feature unwinds x86_64 and AArch64 stacks only");
#[cfg(target_os = "linux")]
mod perf;
#[cfg(target_os = "linux")]
mod signal;

#[cfg(target_os = "linux")]
pub use perf::PerfEvent;

use std::fmt;

/// What drives the samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleSource {
    /// Per-thread CPU-time timer, frame-pointer walk in a signal handler.
    Timer,
    /// Per-thread wall-clock timer (samples blocked threads too: off-CPU time).
    Wall,
    /// A `perf_event` event with kernel-collected call chains.
    #[cfg(target_os = "linux")]
    Perf(PerfEvent),
}

/// How `timer` samples are taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// A `cpu-clock` perf ring with kernel call chains where `perf_event_open`
    /// allows it, the signal path where it does not (the default). With
    /// [`Sampling::ring`] (keep the newest samples) the signal path, whose
    /// per-thread buffers do that.
    #[default]
    Auto,
    /// Always the signal handler's frame-pointer walk (records the shadow
    /// depth and the cut at the sample itself).
    Signal,
    /// Always the perf ring; refused is an error.
    Ring,
}

/// How to sample: `Config::default().sampling(Sampling::timer(999))`, or
/// `FGTRACE_SAMPLE=<source>[:<rate>]` in the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sampling {
    /// What drives the samples.
    pub source: SampleSource,
    /// Hz for clock sources; events per sample (the period) for counted events.
    pub rate: u64,
    /// Samples buffered per thread between drains (or kept, in ring mode).
    pub buffer: usize,
    /// Keep the newest samples when a buffer is full (flight recorder)
    /// instead of counting new ones as lost (Zephyr's behaviour, the default).
    pub ring: bool,
    /// `timer` only: perf ring or signal handler (see [`Backend`]).
    pub backend: Backend,
}

impl Sampling {
    /// CPU-time sampling at `hz` per thread.
    pub fn timer(hz: u64) -> Sampling {
        Sampling {
            source: SampleSource::Timer,
            rate: hz.max(1),
            buffer: 4096,
            ring: false,
            backend: Backend::Auto,
        }
    }
    /// Wall-clock sampling at `hz` per thread.
    pub fn wall(hz: u64) -> Sampling {
        Sampling {
            source: SampleSource::Wall,
            ..Sampling::timer(hz)
        }
    }
    /// Sampling on a `perf_event` event: `rate` in Hz for `cpu-clock` and
    /// `task-clock`, events per sample for the others.
    #[cfg(target_os = "linux")]
    pub fn perf(event: PerfEvent, rate: u64) -> Sampling {
        Sampling {
            source: SampleSource::Perf(event),
            ..Sampling::timer(rate)
        }
    }
    /// Per-thread buffer size, in samples.
    pub fn buffer(mut self, samples: usize) -> Sampling {
        self.buffer = samples.max(16);
        self
    }
    /// Keep the newest samples instead of dropping new ones when full.
    pub fn ring(mut self, yes: bool) -> Sampling {
        self.ring = yes;
        self
    }
    /// How `timer` samples are taken (`Backend::Auto` by default).
    pub fn backend(mut self, b: Backend) -> Sampling {
        self.backend = b;
        self
    }

    fn is_clock(&self) -> bool {
        match self.source {
            SampleSource::Timer | SampleSource::Wall => true,
            #[cfg(target_os = "linux")]
            SampleSource::Perf(e) => e.is_clock(),
        }
    }

    /// Parses `FGTRACE_SAMPLE`: `timer`, `wall`, or a perf event name, with
    /// an optional `:rate` (Hz for clocks, period for counted events).
    pub fn parse(s: &str) -> Result<Sampling, String> {
        let s = s.trim();
        let (name, rate) = match s.split_once(':') {
            Some((n, r)) => {
                let r: u64 = r
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{s}`: rate `{r}` is not a positive number"))?;
                if r == 0 {
                    return Err(format!("`{s}`: the rate must be positive"));
                }
                (n.trim(), Some(r))
            }
            None => (s, None),
        };
        let mut sp = match name {
            "timer" => Sampling::timer(999),
            "timer-signal" => Sampling::timer(999).backend(Backend::Signal),
            "timer-ring" => Sampling::timer(999).backend(Backend::Ring),
            "wall" => Sampling::wall(999),
            #[cfg(target_os = "linux")]
            n => match PerfEvent::from_name(n) {
                Some(e) => Sampling::perf(e, default_rate(e)),
                None => {
                    let names: Vec<_> = PerfEvent::ALL.iter().map(|e| e.name()).collect();
                    return Err(format!(
                        "unknown sample source `{n}` (timer, timer-signal, timer-ring, wall, {})",
                        names.join(", ")
                    ));
                }
            },
            #[cfg(not(target_os = "linux"))]
            n => return Err(format!("unknown sample source `{n}` (timer, wall)")),
        };
        if let Some(r) = rate {
            if sp.is_clock() && r > 100_000 {
                return Err(format!(
                    "`{s}`: {r} Hz is more than the 100 kHz fgtrace allows"
                ));
            }
            sp.rate = r;
        }
        Ok(sp)
    }

    /// `timer@999Hz`, `cycles/1000000`: how the trace says it was sampled.
    pub fn describe(&self) -> String {
        let name = match self.source {
            SampleSource::Timer => "timer",
            SampleSource::Wall => "wall",
            #[cfg(target_os = "linux")]
            SampleSource::Perf(e) => e.name(),
        };
        if self.is_clock() {
            format!("{name}@{}Hz", self.rate)
        } else {
            format!("{name} every {} events", self.rate)
        }
    }
}

#[cfg(target_os = "linux")]
fn default_rate(e: PerfEvent) -> u64 {
    match e {
        PerfEvent::CpuClock | PerfEvent::TaskClock => 999,
        PerfEvent::Cycles | PerfEvent::Instructions => 1_000_000,
        PerfEvent::CacheMisses | PerfEvent::BranchMisses => 10_000,
        PerfEvent::PageFaults | PerfEvent::ContextSwitches => 1,
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Samples of one thread, converted to the trace clock.
pub(crate) struct ThreadSamples {
    pub tid: u32,
    pub name: String,
    /// (ns since session start, shadow depth, cut, frames innermost first)
    pub samples: Vec<(u64, u32, Option<u32>, Vec<u64>)>,
    pub lost: u64,
}

/// What the sampler hands the session at stop.
pub(crate) struct Sampled {
    pub threads: Vec<ThreadSamples>,
    pub mappings: Vec<fgtrace_trace::Mapping>,
    pub description: String,
    /// Which path took the samples (`TraceMeta::sampler`).
    pub backend: Option<String>,
}

#[cfg(target_os = "linux")]
pub(crate) use running::{
    forked_child, register_current_thread, unregister_current_thread, Sampler,
};

/// Sample buffers allocated in the process (each about 4 MiB at the default
/// size): one per sampled thread while it lives, none after `stop`. For tests.
#[doc(hidden)]
pub fn live_buffers() -> usize {
    #[cfg(target_os = "linux")]
    {
        running::LIVE_BUFS.load(std::sync::atomic::Ordering::SeqCst)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// Thread ids that hold a sample buffer right now. For tests.
#[doc(hidden)]
pub fn buffered_threads() -> Vec<u32> {
    #[cfg(target_os = "linux")]
    {
        running::buffered_threads()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

#[cfg(target_os = "linux")]
mod running;

#[cfg(test)]
mod tests;
