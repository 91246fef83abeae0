//! Functions a compile-time plan made count-only: no timing probe, one
//! exact count.
//!
//! `#[traced]` built with a plan (`FGTRACE_PLAN`, see the guide's page on
//! plans) gives the functions the plan names a [`Counted`] instead of the
//! probe: while a session records, each call adds one to the function's
//! counter, and nothing else. No clock is read, no record is written, and
//! the function stays small enough to inline as the published build does.
//!
//! The functions a plan names are the tiniest (a few instructions), so the
//! count is built to add as little as it can:
//!
//! - Each counter has its own gate word, in the same `static`, so a call
//!   without a session is one compare of a word beside the code's own
//!   statics and one branch: not the control word, which a crate reaches
//!   through the GOT. The gates follow the session: [`open_all`] and
//!   [`close_all`] run where the control word's session bit changes.
//! - An atomic add (`lock xadd`, about 20 cycles) on every call would cost
//!   more than the probe it replaces, yet the count must be exact on every
//!   thread. So the first thread to count in a session owns the counter: the
//!   gate then holds its token ([`crate::probe::thread_token`]) and it adds
//!   without a lock prefix (see `Counted::add_own`); any other thread adds to a second counter
//!   with an atomic add, out of line. Without `std` every call takes that
//!   path.
//! - A counter joins a lock-free list on its first call (its gate starts
//!   at `UNLISTED`, which sends the call out of line once), so the
//!   session finds every counter without a table. Nothing here allocates or
//!   locks: safe from signal and interrupt handlers.

use crate::control_word::{CONTROL, SESSION_ON};
use crate::site::Site;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::*};

/// Gate: no session records; calls do nothing.
const CLOSED: usize = 0;
/// Gate: a session records and no thread owns the counter yet.
const OPEN: usize = 1;
/// Gate: the counter has never been called, so it is not in the list.
const UNLISTED: usize = 2;
// Any other gate value is the owning thread's token (an address: never 0, 1 or 2).

/// A count-only function's counter (what a planned `#[traced]` puts in a
/// `static` beside its [`Site`]).
pub struct Counted {
    /// The function: name, module, file and line, as a probed one has.
    pub site: &'static Site,
    /// [`CLOSED`], [`OPEN`], [`UNLISTED`], or the owner's token.
    gate: AtomicUsize,
    /// The owner's calls: only the owner writes them (a load and a store).
    own: AtomicUsize,
    /// Every other thread's calls (atomic adds).
    others: AtomicUsize,
    next: AtomicPtr<Counted>,
}

static HEAD: AtomicPtr<Counted> = AtomicPtr::new(ptr::null_mut());

impl Counted {
    /// The counter of `site`, at zero.
    pub const fn new(site: &'static Site) -> Counted {
        Counted {
            site,
            gate: AtomicUsize::new(UNLISTED),
            own: AtomicUsize::new(0),
            others: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The calls counted since the last [`take`](Counted::take), and back to
    /// zero. Called while no session records, when nothing counts.
    pub fn take(&self) -> u64 {
        (self.own.swap(0, Relaxed) as u64).saturating_add(self.others.swap(0, Relaxed) as u64)
    }

    /// The calls counted so far (not reset).
    pub fn calls(&self) -> u64 {
        (self.own.load(Relaxed) as u64).saturating_add(self.others.load(Relaxed) as u64)
    }

    /// A call that the gate did not let through as the owner's: the first
    /// call ever, the first of a session, or another thread's.
    #[cold]
    #[inline(never)]
    fn slow(&'static self, me: usize) {
        let mut gate = self.gate.load(SeqCst);
        if gate == UNLISTED {
            self.list();
            // Closed, then opened if a session records: a session that
            // starts meanwhile either sees the gate closed in its walk or
            // is seen here (both orders are sequentially consistent).
            let _ = self.gate.compare_exchange(UNLISTED, CLOSED, SeqCst, SeqCst);
            if CONTROL.load(SeqCst) & SESSION_ON != 0 {
                let _ = self.gate.compare_exchange(CLOSED, OPEN, SeqCst, SeqCst);
            }
            gate = self.gate.load(SeqCst);
        }
        match gate {
            CLOSED | UNLISTED => {}
            OPEN if me != 0
                && self
                    .gate
                    .compare_exchange(OPEN, me, Relaxed, Relaxed)
                    .is_ok() =>
            {
                self.add_own()
            }
            g if g == me => self.add_own(),
            _ => {
                self.others.fetch_add(1, Relaxed);
            }
        }
    }

    /// One call by the owner, the only thread that writes `own`: no atomic
    /// read-modify-write is needed between threads. A signal handler on the
    /// owner's thread may count too, between the owner's read and write: on
    /// x86_64 the read, add and write compile to one `inc` on memory, which
    /// a handler cannot split; elsewhere they would be three instructions,
    /// so the add is atomic there.
    #[inline(always)]
    fn add_own(&self) {
        #[cfg(target_arch = "x86_64")]
        self.own
            .store(self.own.load(Relaxed).wrapping_add(1), Relaxed);
        #[cfg(not(target_arch = "x86_64"))]
        self.own.fetch_add(1, Relaxed);
    }

    fn list(&'static self) {
        let me = self as *const Counted as *mut Counted;
        let mut head = HEAD.load(Relaxed);
        loop {
            self.next.store(head, Relaxed);
            match HEAD.compare_exchange_weak(head, me, SeqCst, Relaxed) {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
    }
}

/// One call of a count-only function: counted while a session records.
#[inline(always)]
pub fn count(c: &'static Counted) {
    let gate = c.gate.load(Relaxed);
    if gate != CLOSED {
        let me = me();
        if gate == me {
            c.add_own();
        } else {
            c.slow(me);
        }
    }
}

/// The running thread's token; 0 (never an owner) without `std`.
#[inline(always)]
fn me() -> usize {
    #[cfg(any(feature = "std", test))]
    {
        crate::probe::thread_token()
    }
    #[cfg(not(any(feature = "std", test)))]
    {
        0
    }
}

/// Every counter that has been called at least once, most recent first.
pub fn all() -> impl Iterator<Item = &'static Counted> {
    let mut p = HEAD.load(SeqCst);
    core::iter::from_fn(move || {
        // SAFETY: only `&'static Counted`s are ever linked in.
        let c: &'static Counted = unsafe { p.as_ref()? };
        p = c.next.load(Acquire);
        Some(c)
    })
}

/// Sets the control word's session bit for generation `gen`, then opens
/// the counters' gates: what a session that starts or resumes recording
/// calls (rather than [`control_word::session_on`](crate::control_word::session_on)).
pub fn session_on(gen: u32) {
    crate::control_word::session_on(gen);
    open_all();
}

/// Clears the session bit, then closes the counters' gates.
pub fn session_off() {
    crate::control_word::session_off();
    close_all();
}

/// A session starts recording (after the control word's session bit is
/// set): every listed counter's gate opens, with no owner yet.
pub fn open_all() {
    for c in all() {
        let _ = c.gate.compare_exchange(CLOSED, OPEN, SeqCst, SeqCst);
    }
}

/// The session stops recording (after the session bit is cleared): every
/// gate closes.
pub fn close_all() {
    for c in all() {
        let _ = c
            .gate
            .fetch_update(SeqCst, SeqCst, |g| (g != UNLISTED).then_some(CLOSED));
    }
}

/// Every counter back to zero (a session starts; before its gates open).
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

    /// Opens and closes one counter's gate as `open_all`/`close_all` would
    /// (the tests of this binary share the process's session bit).
    fn set(c: &Counted, open: bool) {
        let _ = c.gate.fetch_update(SeqCst, SeqCst, |g| {
            (g != UNLISTED).then_some(if open { OPEN } else { CLOSED })
        });
    }

    #[test]
    fn counts_exactly_on_every_thread_only_while_open_and_is_listed_once() {
        static TINY: Counted = Counted::new(&SITE);
        // The probe's tests in this binary turn the session bit on, at any
        // time, and never off: it is on before the first call here.
        crate::probe::tests::start();
        // The first call lists it and, a session recording, opens its gate
        // and counts, owned by this thread.
        count(&TINY);
        assert_eq!(all().filter(|c| ptr::eq(*c, &TINY)).count(), 1);
        assert_eq!((TINY.own.load(Relaxed), TINY.others.load(Relaxed)), (1, 0));
        assert_eq!(TINY.take(), 1);
        // Closed, it counts nothing.
        set(&TINY, false);
        count(&TINY);
        assert_eq!(TINY.calls(), 0, "no session, no count");
        set(&TINY, true);
        for _ in 0..1000 {
            count(&TINY);
        }
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        count(&TINY);
                    }
                });
            }
            // The owner counts at the same time as the others.
            for _ in 0..5_000 {
                count(&TINY);
            }
        });
        set(&TINY, false);
        count(&TINY);
        assert_eq!(TINY.calls(), 46_000, "exact on every thread");
        assert_eq!(
            TINY.own.load(Relaxed),
            6_000,
            "the first thread owns the counter"
        );
        assert_eq!(all().filter(|c| ptr::eq(*c, &TINY)).count(), 1);
        assert_eq!(TINY.take(), 46_000);
        assert_eq!(TINY.calls(), 0);
        // The next session: the owner is claimed again, by whoever is first.
        set(&TINY, true);
        std::thread::spawn(|| count(&TINY)).join().unwrap();
        count(&TINY);
        set(&TINY, false);
        assert_eq!((TINY.own.load(Relaxed), TINY.others.load(Relaxed)), (1, 1));
    }

    #[test]
    fn planned_compares_whole_module_paths() {
        // Usable where the expansion uses it: in a `const`.
        const { assert!(planned("regex::util", &["regex", "regex::util"])) };
        assert!(!planned("regex::utils", &["regex::util"]));
        assert!(!planned("regex", &[]));
    }
}
