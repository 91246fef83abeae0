//! Functions a compile-time plan made count-only: no timing probe, one
//! exact count.
//!
//! `#[traced]` built with a plan (`FGTRACE_PLAN`, see the guide's page on
//! plans) gives the functions the plan names a [`Counted`] instead of the
//! probe: while a session records, each call adds one to the function's
//! counter, and nothing else. No clock is read, no record is written, no
//! thread state is touched, so the function stays as small as the published
//! build's and inlines the same way. Without a session, a call costs one
//! load and one branch.
//!
//! A counter joins a lock-free list on its first count (the same intrusive
//! list as the sites', with its own head), so the session can read every
//! counter at its end without a table: [`reset_all`] when a session starts,
//! [`Counted::take`] for each of [`all`] when it stops. Counting is one
//! relaxed `fetch_add`: exact on every thread, and safe from signal and
//! interrupt handlers.

use crate::control_word::{CONTROL, SESSION_ON};
use crate::site::Site;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering::*};

/// A count-only function's counter (what a planned `#[traced]` puts in a
/// `static` beside its [`Site`]).
pub struct Counted {
    /// The function: name, module, file and line, as a probed one has.
    pub site: &'static Site,
    calls: AtomicUsize,
    listed: AtomicBool,
    next: AtomicPtr<Counted>,
}

static HEAD: AtomicPtr<Counted> = AtomicPtr::new(ptr::null_mut());

impl Counted {
    /// The counter of `site`, at zero.
    pub const fn new(site: &'static Site) -> Counted {
        Counted {
            site,
            calls: AtomicUsize::new(0),
            listed: AtomicBool::new(false),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The calls counted since the last [`take`](Counted::take) or
    /// [`reset_all`], and back to zero.
    pub fn take(&self) -> u64 {
        self.calls.swap(0, Relaxed) as u64
    }

    /// The calls counted so far (not reset).
    pub fn calls(&self) -> u64 {
        self.calls.load(Relaxed) as u64
    }

    #[cold]
    #[inline(never)]
    fn list(&'static self) {
        if self.listed.swap(true, AcqRel) {
            return;
        }
        let me = self as *const Counted as *mut Counted;
        let mut head = HEAD.load(Relaxed);
        loop {
            self.next.store(head, Relaxed);
            match HEAD.compare_exchange_weak(head, me, Release, Relaxed) {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
    }
}

/// One call of a count-only function: counted while a session records.
#[inline(always)]
pub fn count(c: &'static Counted) {
    count_under(&CONTROL, c)
}

#[inline(always)]
fn count_under(control: &AtomicU32, c: &'static Counted) {
    if control.load(Relaxed) & SESSION_ON != 0 && c.calls.fetch_add(1, Relaxed) == 0 {
        c.list();
    }
}

/// Every counter that has counted at least once, most recent first.
pub fn all() -> impl Iterator<Item = &'static Counted> {
    let mut p = HEAD.load(Acquire);
    core::iter::from_fn(move || {
        // SAFETY: only `&'static Counted`s are ever linked in.
        let c: &'static Counted = unsafe { p.as_ref()? };
        p = c.next.load(Acquire);
        Some(c)
    })
}

/// Every counter back to zero (a session starts).
pub fn reset_all() {
    for c in all() {
        c.take();
    }
}

/// Whether a function of module `module` is one of `planned`, the modules
/// in which a plan names a function of its name (evaluated at compile time
/// by the planned `#[traced]` expansion, with `module_path!()`).
pub const fn planned(module: &str, planned: &[&str]) -> bool {
    let mut i = 0;
    while i < planned.len() {
        if str_eq(module, planned[i]) {
            return true;
        }
        i += 1;
    }
    false
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    static SITE: Site = Site::new("tiny", "m", "f.rs", 1, false);
    static TINY: Counted = Counted::new(&SITE);

    #[test]
    fn counts_only_while_a_session_records_and_is_listed_once() {
        // A control word of the test's own: other tests of this binary
        // turn the process's session on and off.
        let control = AtomicU32::new(0);
        count_under(&control, &TINY);
        assert_eq!(TINY.calls(), 0, "no session, no count");
        assert_eq!(all().filter(|c| ptr::eq(*c, &TINY)).count(), 0);
        control.store(7 << crate::control_word::GEN_SHIFT | SESSION_ON, Relaxed);
        for _ in 0..1000 {
            count_under(&control, &TINY);
        }
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        count_under(&control, &TINY);
                    }
                });
            }
        });
        control.store(7 << crate::control_word::GEN_SHIFT, Relaxed);
        count_under(&control, &TINY);
        assert_eq!(TINY.calls(), 41_000, "exact on every thread");
        assert_eq!(all().filter(|c| ptr::eq(*c, &TINY)).count(), 1);
        assert_eq!(TINY.take(), 41_000);
        assert_eq!(TINY.calls(), 0);
    }

    #[test]
    fn planned_compares_whole_module_paths() {
        const P: bool = planned("regex::util", &["regex", "regex::util"]);
        assert!(P);
        assert!(!planned("regex::utils", &["regex::util"]));
        assert!(!planned("regex", &[]));
    }
}
