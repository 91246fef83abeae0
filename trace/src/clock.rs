//! The trace clock: a raw cycle counter read on the hot path, calibrated to
//! nanoseconds once, off the hot path.
//!
//! `ticks()` is the only clock read a probe makes: `rdtsc` on x86/x86_64,
//! `rdtime` on RISC-V, `cntvct_el0` on AArch64, and the monotonic clock
//! elsewhere. A [`Calibration`] pairs tick readings with the system's
//! monotonic clock ([`monotonic_ns`]) and the wall clock so that traced
//! calls, samples from `perf_event` (which stamps with `CLOCK_MONOTONIC`) and
//! exported spans (which want unix time) all land on one time line:
//! nanoseconds since session start.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use fgtrace_core::clock::{ticks, SOURCE};

/// The system's monotonic clock in nanoseconds: `CLOCK_MONOTONIC` on Unix
/// (the clock `perf_event` stamps samples with on Linux),
/// `QueryPerformanceCounter` on Windows. The tick counter is calibrated
/// against it, so the trace clock is calibrated on every system.
pub fn monotonic_ns() -> u64 {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid pointer to a timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::System::Performance::{
            QueryPerformanceCounter, QueryPerformanceFrequency,
        };
        // The frequency is fixed at boot.
        static FREQ: OnceLock<u64> = OnceLock::new();
        let freq = *FREQ.get_or_init(|| {
            let mut f = 0i64;
            // SAFETY: valid pointer; never fails on Windows XP and later.
            unsafe { QueryPerformanceFrequency(&mut f) };
            (f as u64).max(1)
        });
        let mut c = 0i64;
        // SAFETY: valid pointer; never fails on Windows XP and later.
        unsafe { QueryPerformanceCounter(&mut c) };
        (u128::from(c as u64) * 1_000_000_000 / u128::from(freq)) as u64
    }
    #[cfg(not(any(unix, windows)))]
    {
        // No system clock we know: the process's own, from its first read.
        static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
        ORIGIN
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One simultaneous reading of the tick counter, `CLOCK_MONOTONIC` and the wall clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockPoint {
    /// The tick counter (`tsc`, `rdtime`, `cntvct_el0`, or nanoseconds for the
    /// `monotonic` source).
    pub ticks: u64,
    /// `CLOCK_MONOTONIC` (`QueryPerformanceCounter` on Windows), nanoseconds.
    pub mono_ns: u64,
    /// Wall-clock time, nanoseconds since the Unix epoch (0 if the system clock
    /// is before 1970).
    pub unix_ns: u64,
}

impl ClockPoint {
    /// Reads the three clocks as close together as possible: the tick reading is
    /// the midpoint of two reads bracketing the monotonic read.
    pub fn now() -> Self {
        let mut best = None::<(u64, u64, u64)>;
        for _ in 0..5 {
            let a = ticks();
            let m = monotonic_ns();
            let b = ticks();
            let width = b.wrapping_sub(a);
            if best.is_none_or(|(w, _, _)| width < w) {
                best = Some((width, a + width / 2, m));
            }
        }
        let (_, ticks, mono_ns) = best.unwrap();
        ClockPoint {
            ticks,
            mono_ns,
            unix_ns: unix_ns(),
        }
    }
}

/// Tick-to-nanosecond conversion for one session: an origin and a rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    /// Clock reading at session start: tick `origin.ticks` is nanosecond 0.
    pub origin: ClockPoint,
    /// Ticks per nanosecond.
    pub ticks_per_ns: f64,
}

impl Calibration {
    /// A calibration starting now, using the process-wide rate measurement.
    pub fn start() -> Self {
        Calibration {
            origin: ClockPoint::now(),
            ticks_per_ns: process_rate(),
        }
    }

    /// Refines the rate with the whole session's span when it is long enough
    /// to be more accurate than the start-up measurement.
    pub fn refine(&mut self, end: ClockPoint) {
        let dn = end.mono_ns.saturating_sub(self.origin.mono_ns);
        let dt = end.ticks.wrapping_sub(self.origin.ticks);
        if dn >= 200_000_000 && dt > 0 && dt < u64::MAX / 2 {
            self.ticks_per_ns = dt as f64 / dn as f64;
        }
    }

    /// Nanoseconds since session start for a tick reading (saturating at 0 for
    /// readings before the start).
    #[inline]
    pub fn ns(&self, ticks: u64) -> u64 {
        let d = ticks.wrapping_sub(self.origin.ticks);
        if d > u64::MAX / 2 {
            return 0;
        }
        (d as f64 / self.ticks_per_ns) as u64
    }

    /// A tick-count duration in nanoseconds.
    #[inline]
    pub fn dur_ns(&self, ticks: u64) -> u64 {
        (ticks as f64 / self.ticks_per_ns) as u64
    }

    /// A nanosecond duration in ticks (for thresholds compared on the hot path).
    pub fn ticks_for(&self, d: Duration) -> u64 {
        (d.as_nanos() as f64 * self.ticks_per_ns).min(u64::MAX as f64) as u64
    }

    /// Converts a `CLOCK_MONOTONIC` timestamp (as `perf_event` gives) to
    /// nanoseconds since session start.
    pub fn mono_to_ns(&self, mono_ns: u64) -> u64 {
        mono_ns.saturating_sub(self.origin.mono_ns)
    }
}

/// Ticks per nanosecond, measured once per process over about 10 ms.
pub fn process_rate() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        if SOURCE == "monotonic" {
            return 1.0;
        }
        let a = ClockPoint::now();
        std::thread::sleep(Duration::from_millis(10));
        let b = ClockPoint::now();
        let dn = b.mono_ns.saturating_sub(a.mono_ns).max(1);
        let dt = b.ticks.wrapping_sub(a.ticks);
        let rate = dt as f64 / dn as f64;
        if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            1.0
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_monotonic_and_calibrated_against_monotonic_clock() {
        let cal = Calibration::start();
        let t0 = ticks();
        let m0 = monotonic_ns();
        std::thread::sleep(Duration::from_millis(30));
        let t1 = ticks();
        let m1 = monotonic_ns();
        assert!(t1 > t0);
        let by_ticks = cal.dur_ns(t1 - t0) as f64;
        let by_mono = (m1 - m0) as f64;
        let err = (by_ticks - by_mono).abs() / by_mono;
        assert!(err < 0.02, "tick calibration off by {:.3}%", err * 100.0);
        let d = cal.ticks_for(Duration::from_micros(100));
        assert!((cal.dur_ns(d) as i64 - 100_000).abs() < 100);
    }
}
