//! Call sites: the static descriptor `#[traced]` makes for every instrumented
//! function, its cached filter decision, and the registry that numbers them.
//!
//! A site gets a process-wide id on its first call: an atomic counter hands
//! out the number and a compare-and-swap on the site's id word keeps the
//! first one handed to it (a loser's number is simply never used). The site
//! then joins an intrusive lock-free list, so the layers above can find every
//! site by id without a table the core would have to allocate. Registration
//! takes no lock, so it is safe from signal handlers, interrupt handlers and
//! the allocator: nothing in it can deadlock or recurse.
//!
//! The decision word caches what the session's filters decided for this site,
//! tagged with the session generation: one relaxed load on the hot path says
//! whether the cache is current.

use crate::record::MAX_SITES;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering::*};

/// What the filters decided for a site (3 bits in the decision word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Decision {
    /// Record the call.
    Record = 1,
    /// Do not record it; its callees may be recorded.
    Skip = 2,
    /// Hide it and its whole subtree.
    Hide = 3,
    /// Record it and enable recording below it (graph function).
    GraphRoot = 4,
}

impl Decision {
    /// From the low bits of a decision word; 0 (none yet) is `None`.
    #[inline(always)]
    pub const fn from_bits(b: u32) -> Option<Decision> {
        match b & 7 {
            1 => Some(Decision::Record),
            2 => Some(Decision::Skip),
            3 => Some(Decision::Hide),
            4 => Some(Decision::GraphRoot),
            _ => None,
        }
    }
}

/// A static descriptor of one instrumented function, made by `#[traced]`.
pub struct Site {
    /// Display name (`Type::method` in a traced `impl`, or `name = ".."`).
    pub name: &'static str,
    /// `module_path!()` of the function.
    pub module_path: &'static str,
    /// `file!()`.
    pub file: &'static str,
    /// `line!()`.
    pub line: u32,
    /// An `async fn`.
    pub is_async: bool,
    /// id + 1; 0 = not registered yet.
    id: AtomicU32,
    /// `generation << 3 | Decision`; 0 = no decision yet.
    decision: AtomicU32,
    /// The next site in the registry.
    next: AtomicPtr<Site>,
    /// Names of the values `#[traced(values(..))]` records for each call
    /// (`ret` last when it records the return value); empty for most sites.
    pub values: &'static [&'static str],
}

/// Sites registered so far: the head of the list and the next id.
static HEAD: AtomicPtr<Site> = AtomicPtr::new(ptr::null_mut());
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

impl Site {
    /// A site (what `#[traced]` puts in a `static`).
    pub const fn new(
        name: &'static str,
        module_path: &'static str,
        file: &'static str,
        line: u32,
        is_async: bool,
    ) -> Site {
        Site {
            name,
            module_path,
            file,
            line,
            is_async,
            id: AtomicU32::new(0),
            decision: AtomicU32::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            values: &[],
        }
    }

    /// A site whose calls record values named `values` (what
    /// `#[traced(values(..))]` puts in a `static`): at most
    /// [`crate::values::MAX_VALUES`] names.
    pub const fn with_values(
        name: &'static str,
        module_path: &'static str,
        file: &'static str,
        line: u32,
        is_async: bool,
        values: &'static [&'static str],
    ) -> Site {
        let mut s = Site::new(name, module_path, file, line, is_async);
        s.values = values;
        s
    }

    /// The process-wide id of this site, assigned on first use. `MAX_SITES`
    /// or more: the process has more sites than records can name, and this
    /// one is not recorded.
    #[inline]
    pub fn id(&'static self) -> u32 {
        match self.id.load(Acquire) {
            0 => self.register(),
            n => n - 1,
        }
    }

    /// The id if the site has one already.
    #[inline(always)]
    pub fn known_id(&self) -> Option<u32> {
        self.id.load(Acquire).checked_sub(1)
    }

    /// Where a site keeps its id + 1 (a board probe written in assembly
    /// reads it).
    #[cfg(all(
        target_arch = "arm",
        feature = "irq-mask",
        not(any(feature = "std", test))
    ))]
    pub(crate) const ID_OFFSET: usize = core::mem::offset_of!(Site, id);
    /// Where a site keeps its decision word (see [`Site::decision_word`]).
    #[cfg(all(
        target_arch = "arm",
        feature = "irq-mask",
        not(any(feature = "std", test))
    ))]
    pub(crate) const DECISION_OFFSET: usize = core::mem::offset_of!(Site, decision);

    /// The id of a site whose decision for the running session is cached
    /// (a decision is cached only once the site has its id): one plain load,
    /// for the board's entry, which has just compared the decision word.
    #[inline(always)]
    pub fn id_decided(&self) -> u32 {
        self.id.load(Relaxed).wrapping_sub(1)
    }

    #[cold]
    #[inline(never)]
    fn register(&'static self) -> u32 {
        let id = NEXT_ID.fetch_add(1, Relaxed);
        if id >= MAX_SITES {
            // Keep the counter from wrapping back into valid ids.
            NEXT_ID.store(MAX_SITES, Relaxed);
            return MAX_SITES;
        }
        match self.id.compare_exchange(0, id + 1, AcqRel, Acquire) {
            Ok(_) => {
                let me = self as *const Site as *mut Site;
                let mut head = HEAD.load(Relaxed);
                loop {
                    self.next.store(head, Relaxed);
                    match HEAD.compare_exchange_weak(head, me, Release, Relaxed) {
                        Ok(_) => break,
                        Err(h) => head = h,
                    }
                }
                id
            }
            // Another thread (or an interrupt) registered it first.
            Err(won) => won - 1,
        }
    }

    /// The cached decision for generation `gen`, if there is one.
    #[inline(always)]
    pub fn decision(&self, gen: u32) -> Option<Decision> {
        let w = self.decision.load(Relaxed);
        if w >> 3 == gen {
            Decision::from_bits(w)
        } else {
            None
        }
    }

    /// The raw decision word (`generation << 3 | Decision`).
    #[inline(always)]
    pub fn decision_word(&self) -> u32 {
        self.decision.load(Relaxed)
    }

    /// Caches `d` for generation `gen`.
    pub fn set_decision(&self, gen: u32, d: Decision) {
        self.decision.store(gen << 3 | d as u32, Relaxed);
    }
}

/// Every registered site, most recent first.
pub fn sites() -> impl Iterator<Item = &'static Site> {
    let mut p = HEAD.load(Acquire);
    core::iter::from_fn(move || {
        // SAFETY: only `&'static Site`s are ever linked in.
        let s: &'static Site = unsafe { p.as_ref()? };
        p = s.next.load(Acquire);
        Some(s)
    })
}

/// The site with id `id` (a walk of the registry: for cold paths only).
pub fn site_by_id(id: u32) -> Option<&'static Site> {
    sites().find(|s| s.known_id() == Some(id))
}

/// How many ids have been handed out (an upper bound on the number of sites).
pub fn ids_issued() -> u32 {
    NEXT_ID.load(Relaxed).min(MAX_SITES)
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: Site = Site::new("a", "m", "f.rs", 1, false);
    static B: Site = Site::new("b", "m", "f.rs", 2, false);

    #[test]
    fn ids_are_stable_distinct_and_found_again() {
        let a = A.id();
        let b = B.id();
        assert_ne!(a, b);
        assert_eq!(A.id(), a);
        assert!(ptr::eq(site_by_id(a).unwrap(), &A));
        assert!(ptr::eq(site_by_id(b).unwrap(), &B));
        assert_eq!(sites().filter(|s| ptr::eq(*s, &A)).count(), 1);
    }

    #[test]
    fn racing_registrations_agree_on_one_id() {
        static S: Site = Site::new("raced", "m", "f.rs", 3, false);
        let ids: std::vec::Vec<u32> = std::thread::scope(|sc| {
            let hs: std::vec::Vec<_> = (0..8).map(|_| sc.spawn(|| S.id())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|&i| i == ids[0]), "{ids:?}");
        assert_eq!(sites().filter(|s| ptr::eq(*s, &S)).count(), 1);
    }

    #[test]
    fn decisions_are_per_generation() {
        static S: Site = Site::new("d", "m", "f.rs", 4, false);
        assert_eq!(S.decision(7), None);
        S.set_decision(7, Decision::Hide);
        assert_eq!(S.decision(7), Some(Decision::Hide));
        assert_eq!(S.decision(8), None);
    }
}
