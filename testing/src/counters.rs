//! Retired user-space instructions per call, for captures that ask for them.
//!
//! Each capturing thread opens one `perf_event` counter on itself
//! (`PERF_COUNT_HW_INSTRUCTIONS`, user space only), maps its first page and
//! reads it with `rdpmc` under the page's seqlock: no syscall per read on
//! bare metal. Where the counter is not on a PMU register at that moment
//! (or on CPUs without user `rdpmc`) a `read(2)` of the fd gives the same
//! count. Instruction counts are deterministic for a given binary and input,
//! unlike time; they are what CI budgets should use where the CPU exposes them.
//!
//! Each read is expensive inside a VM that traps `rdpmc` (about 8 µs here), so
//! counters are off unless a capture asks for them.

use fgtrace_core::probe::{self as core_probe, CounterReader};
use fgtrace_core::site::Site;
use fgtrace_runtime::recorder::{self, CounterSrc};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// Whether a capture counts instructions per call.
///
/// The environment variable `FGTRACE_COUNTERS` overrides what the code asks
/// for: `off` makes counters unavailable everywhere (what a container or a VM
/// without a PMU gives, to test the skip path), `required` turns `Auto` into
/// `Required` (for CI machines known to have counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Counters {
    /// No counters (the default: cheaper calls, and durations without the
    /// counter reads of callees in them).
    #[default]
    Off,
    /// Count where the CPU allows it; otherwise instruction assertions are
    /// skipped with a message on stderr.
    Auto,
    /// Count, or panic when the capture starts if counting is impossible.
    Required,
}

/// What a capture's instruction counts are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CounterStatus {
    /// Not asked for ([`Counters::Off`]).
    Off,
    /// Asked for, but this machine cannot count; the reason.
    Unavailable(String),
    /// Retired user-space instructions per call, the probes' own excluded.
    Instructions,
}

impl CounterStatus {
    /// Whether the capture has instruction counts (`false`: off, or this machine
    /// cannot count).
    pub fn is_counting(&self) -> bool {
        matches!(self, CounterStatus::Instructions)
    }
}

/// `FGTRACE_COUNTERS`, read at every capture (cheap, and tests may set it).
fn env_mode() -> Option<&'static str> {
    match std::env::var("FGTRACE_COUNTERS")
        .ok()?
        .to_ascii_lowercase()
        .as_str()
    {
        "off" | "0" | "no" | "false" => Some("off"),
        "required" | "require" => Some("required"),
        _ => None,
    }
}

/// The counter source and status for a capture starting on this thread.
/// Panics when counters are required and unavailable.
#[track_caller]
pub(crate) fn resolve(mode: Counters) -> (Option<CounterSrc>, CounterStatus) {
    if mode == Counters::Off {
        return (None, CounterStatus::Off);
    }
    let env = env_mode();
    let required = mode == Counters::Required || env == Some("required");
    let got = if env == Some("off") {
        Err("counters forced off by FGTRACE_COUNTERS=off".to_string())
    } else {
        thread_counter().and_then(|src| overhead(src).map(|_| src))
    };
    match got {
        Ok(src) => (Some(src), CounterStatus::Instructions),
        Err(why) if required => {
            panic!("fgtrace: instruction counters are required but unavailable: {why}")
        }
        Err(why) => (None, CounterStatus::Unavailable(why)),
    }
}

/// The calling thread's counter, if it has one (for resuming a capture on
/// another thread); never panics.
pub(crate) fn this_thread() -> Option<CounterSrc> {
    if env_mode() == Some("off") {
        return None;
    }
    thread_counter().ok()
}

/// One thread's open counter.
type ThreadCounter = fgtrace_runtime::pmu::SelfCounter;

thread_local! {
    /// Opened on first use, kept for the thread's life: captures repeat.
    static COUNTER: RefCell<Option<Result<ThreadCounter, String>>> = const { RefCell::new(None) };
}

fn thread_counter() -> Result<CounterSrc, String> {
    COUNTER.with(|c| {
        let mut c = c.borrow_mut();
        let c = c.get_or_insert_with(open);
        match c {
            Ok(t) => Ok(CounterSrc {
                page: t.page as *const u8,
                fd: t.fd,
                read: read_counter,
                uncounted: uncounted_counter,
            }),
            Err(e) => Err(e.clone()),
        }
    })
}

/// The thread's instruction counter (opened as `Config::counters` opens
/// one), then checked against this module's own reads: `rdpmc` under the
/// page's seqlock must move too.
fn open() -> Result<ThreadCounter, String> {
    let t = fgtrace_runtime::pmu::open_self(fgtrace_runtime::pmu::Counter::Instructions)?;
    // SAFETY: this thread's open counter.
    let a = unsafe { read(t.page as *const u8, t.fd) };
    std::hint::black_box((0..64u64).fold(0u64, |s, i| {
        s.wrapping_mul(31).wrapping_add(std::hint::black_box(i))
    }));
    let b = unsafe { read(t.page as *const u8, t.fd) };
    if b.wrapping_sub(a) == 0 || b.wrapping_sub(a) > 1 << 40 {
        return Err(
            "the instruction counter does not count here (a virtual PMU that reads 0)".into(),
        );
    }
    Ok(t)
}

thread_local! {
    /// Failed seqlock rounds of this thread's reads so far.
    static RETRIES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Instructions this thread spent in work no call should be charged for
    /// (`uncounted`).
    static EXCLUDED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Instructions of one failed seqlock round (measured by `calibrate`).
static RETRY_COST: AtomicU64 = AtomicU64::new(0);
/// What a call of `uncounted` costs its callers beyond its `[a, b]` window
/// (its own reads, the bookkeeping): measured by `calibrate`.
static UNCOUNTED_COST: AtomicU64 = AtomicU64::new(0);

/// Runs `f` without charging its instructions to the calls open around it:
/// one-time work whose cost depends on what ran before (registering a site
/// that another test may have registered first, growing a buffer), which
/// would make counts differ between runs.
///
/// # Safety
/// As for [`read`].
pub(crate) unsafe fn uncounted(page: *const u8, fd: i32, f: &mut dyn FnMut()) {
    let a = read_raw(page, fd, 0);
    f();
    let b = read_raw(page, fd, 0);
    let spent = b.wrapping_sub(a).wrapping_add(UNCOUNTED_COST.load(Relaxed));
    EXCLUDED.with(|e| e.set(e.get().wrapping_add(spent)));
}

/// The counter's value now, minus the instructions of every failed seqlock
/// round this thread's reads have made so far: a round fails when the
/// kernel moves the counter mid-read (likely where `rdpmc` traps to a
/// hypervisor), and its instructions would otherwise land, at random, in the
/// count of whichever calls were open.
///
/// # Safety
/// `page` and `fd` come from this thread's open counter.
#[inline(always)]
pub(crate) unsafe fn read(page: *const u8, fd: i32) -> u64 {
    let v = read_raw(page, fd, 0);
    v.wrapping_sub(
        RETRIES
            .with(|r| r.get())
            .wrapping_mul(RETRY_COST.load(Relaxed)),
    )
    .wrapping_sub(EXCLUDED.with(|e| e.get()))
}

/// [`read`] as the core's [`CounterReader`] calls it.
unsafe fn read_counter(c: &CounterReader) -> u64 {
    read(c.page, c.fd)
}

/// [`uncounted`] as the core's [`CounterReader`] calls it.
unsafe fn uncounted_counter(c: &CounterReader, f: &mut dyn FnMut()) {
    uncounted(c.page, c.fd, f)
}

/// The raw value; `force = 1` fails the first round (for calibration). One
/// out-of-line copy, so every round costs the same wherever it is called from.
#[inline(never)]
unsafe fn read_raw(page: *const u8, fd: i32, force: u32) -> u64 {
    use fgtrace_runtime::pmu::{rdpmc_round, Round};
    // Opaque, so the optimizer cannot make a copy specialised for the
    // calibration's `force = 1` whose rounds cost more or less.
    let mut force = std::hint::black_box(force);
    loop {
        match rdpmc_round(page, force) {
            Round::Value(v) => return v,
            Round::NoRdpmc => return fgtrace_runtime::pmu::read_fd(fd),
            Round::Retry => {
                force = 0;
                RETRIES.with(|r| r.set(r.get() + 1));
            }
        }
    }
}

/// What the probes themselves add to the counts, measured once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Overhead {
    /// One failed seqlock round (subtracted by `read` itself).
    pub retry: u64,
    /// What `uncounted` adds beyond the work it excludes (subtracted too).
    pub uncounted: u64,
    /// Counted in an empty traced fn: probe work inside its own window.
    pub floor: u64,
    /// What one traced call adds to its caller's count beyond its own body:
    /// both probes, entry to exit, including `floor`.
    pub per_call: u64,
}

static OVERHEAD: OnceLock<Result<Overhead, String>> = OnceLock::new();

/// The probes' overhead, calibrated on first use (on the calling thread).
pub(crate) fn overhead(src: CounterSrc) -> Result<Overhead, String> {
    OVERHEAD.get_or_init(|| calibrate(src)).clone()
}

/// The calibrated overhead if counters were ever used.
pub(crate) fn known_overhead() -> Option<Overhead> {
    OVERHEAD.get().and_then(|o| o.as_ref().ok().copied())
}

static CAL_LEAF: Site = Site::new("calibrate_leaf", module_path!(), file!(), line!(), false);
static CAL_2: Site = Site::new("calibrate_2", module_path!(), file!(), line!(), false);
static CAL_10: Site = Site::new("calibrate_10", module_path!(), file!(), line!(), false);

/// Shaped like a `#[traced]` fn: the guard first, then the body.
#[inline(never)]
fn cal_leaf() {
    let _g = core_probe::enter(&CAL_LEAF);
}

/// Two and ten calls written out (a loop's iterations would be charged to
/// the probes): their difference is eight traced calls.
#[inline(never)]
fn cal_2() {
    let _g = core_probe::enter(&CAL_2);
    cal_leaf();
    cal_leaf();
}

#[inline(never)]
fn cal_10() {
    let _g = core_probe::enter(&CAL_10);
    cal_leaf();
    cal_leaf();
    cal_leaf();
    cal_leaf();
    cal_leaf();
    cal_leaf();
    cal_leaf();
    cal_leaf();
    cal_leaf();
    cal_leaf();
}

/// Measures, in this order: a failed seqlock round, what `uncounted` leaves
/// behind, an empty traced fn's own count, and what a traced call adds to
/// its caller. Minimum over rounds: a retry, an interrupt or a buffer
/// hand-off only ever adds.
fn calibrate(src: CounterSrc) -> Result<Overhead, String> {
    // One failed round: a read that fails once, minus one that does not.
    let (mut plain, mut forced) = (u64::MAX, u64::MAX);
    for _ in 0..16 {
        // SAFETY: this thread's counter.
        unsafe {
            let a = read_raw(src.page, src.fd, 0);
            let b = read_raw(src.page, src.fd, 1);
            let c = read_raw(src.page, src.fd, 0);
            let d = read_raw(src.page, src.fd, 0);
            forced = forced.min(b.wrapping_sub(a));
            plain = plain.min(d.wrapping_sub(c));
        }
    }
    RETRY_COST.store(forced.saturating_sub(plain), Relaxed);
    // What a first call's uncounted registration still leaves in its
    // callers' windows, beyond what an ordinary call's id lookup costs.
    CAL_LEAF.id();
    let saved = recorder::capture_begin(8, Some(src));
    let (mut fast, mut slow) = (u64::MAX, u64::MAX);
    for _ in 0..16 {
        // SAFETY: this thread's counter.
        unsafe {
            let a = read(src.page, src.fd);
            core_probe::capture_site_id(&CAL_LEAF, false);
            let b = read(src.page, src.fd);
            core_probe::capture_site_id(&CAL_LEAF, true);
            let c = read(src.page, src.fd);
            fast = fast.min(b.wrapping_sub(a));
            slow = slow.min(c.wrapping_sub(b));
        }
    }
    recorder::capture_end(saved);
    UNCOUNTED_COST.store(slow.saturating_sub(fast), Relaxed);
    let (mut floor, mut per8) = (u64::MAX, u64::MAX);
    for _ in 0..5 {
        let saved = recorder::capture_begin(8, Some(src));
        cal_2();
        cal_10();
        let out = recorder::capture_end(saved);
        let Some(ctr) = out.counters else {
            return Err("calibration captured no counters".into());
        };
        let (mut d2, mut d10) = (None, None);
        for (r, &d) in out.records.iter().zip(&ctr) {
            match fgtrace_core::site::site_by_id(r.site()) {
                Some(s) if std::ptr::eq(s, &CAL_LEAF) => floor = floor.min(d),
                Some(s) if std::ptr::eq(s, &CAL_2) => d2 = Some(d),
                Some(s) if std::ptr::eq(s, &CAL_10) => d10 = Some(d),
                _ => {}
            }
        }
        if let (Some(a), Some(b)) = (d2, d10) {
            per8 = per8.min(b.saturating_sub(a));
        }
    }
    if floor == u64::MAX || per8 == u64::MAX {
        return Err("calibration recorded no calls".into());
    }
    Ok(Overhead {
        retry: RETRY_COST.load(Relaxed),
        uncounted: UNCOUNTED_COST.load(Relaxed),
        floor,
        per_call: per8 / 8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_moves_and_calibration_is_stable() {
        let Ok(src) = thread_counter() else {
            eprintln!("no counters on this machine: nothing to check");
            return;
        };
        let a = unsafe { read(src.page, src.fd) };
        let b = unsafe { read(src.page, src.fd) };
        assert!(b > a);
        let o = overhead(src).unwrap();
        assert!(o.per_call >= o.floor && o.floor > 0, "{o:?}");
        // Calibrating again measures the same costs; `uncounted` is then
        // already compensated, so what it leaves behind is nothing.
        // (An interrupt inside a calibration round adds a few instructions;
        // under a loaded test run a round can miss its quiet minimum.)
        let again = calibrate(src).unwrap();
        let close = |x: u64, y: u64| x.abs_diff(y) <= 16;
        assert!(
            again.uncounted == 0
                && close(again.retry, o.retry)
                && close(again.floor, o.floor)
                && close(again.per_call, o.per_call),
            "a second calibration differs: {again:?} vs {o:?}"
        );
    }
}
