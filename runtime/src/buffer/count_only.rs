//! The per-thread table of a session with automatic exclusion of tiny
//! functions (`Config::auto_exclude`): one 64-bit word per site id, which
//! the probe's auto path reads on every call of the thread (see
//! `fgtrace_core::probe::COUNT_ONLY`). The collector switches a site to
//! count-only with one atomic `fetch_or`; from then on the thread adds its
//! calls to the word, and the session reads the counts at stop.
//!
//! [`MAX_SITES`] words are 2 MiB of address space per thread: the table is
//! an anonymous mapping, so only the pages of the site ids a thread
//! actually calls are ever touched (and backed by memory).

use super::MAX_SITES;
use fgtrace_core::probe::{CountWord, COUNT_ONLY};
use std::sync::atomic::Ordering::*;

const BYTES: usize = MAX_SITES as usize * std::mem::size_of::<CountWord>();

/// One thread's table, zeroed (every site recorded).
pub(crate) struct CountTable {
    words: std::ptr::NonNull<CountWord>,
}

// SAFETY: the words are atomics; the mapping is freed only on drop.
unsafe impl Send for CountTable {}
unsafe impl Sync for CountTable {}

impl CountTable {
    /// A fresh table, or `None` when the address space cannot be had (the
    /// thread then records every call, as without auto-exclude).
    pub(crate) fn new() -> Option<CountTable> {
        #[cfg(unix)]
        // SAFETY: a private anonymous mapping (zero-filled by the kernel);
        // unmapped in `drop`.
        let p = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            p as *mut CountWord
        };
        #[cfg(not(unix))]
        // SAFETY: a non-zero size; freed in `drop` with the same layout.
        let p = unsafe { std::alloc::alloc_zeroed(Self::layout()) as *mut CountWord };
        std::ptr::NonNull::new(p).map(|words| CountTable { words })
    }

    #[cfg(not(unix))]
    fn layout() -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(BYTES, 4096).expect("a valid layout")
    }

    /// The table as the probe reads it (`ThreadState::count_only`).
    pub(crate) fn as_ptr(&self) -> *const CountWord {
        self.words.as_ptr()
    }

    fn word(&self, site: u32) -> Option<&CountWord> {
        // SAFETY: in bounds; the mapping lives as long as `self`.
        (site < MAX_SITES).then(|| unsafe { &*self.words.as_ptr().add(site as usize) })
    }

    /// Switches `site` to count-only on this thread; `false` if it already was
    /// (or is not a site id).
    pub(crate) fn switch(&self, site: u32) -> bool {
        self.word(site)
            .is_some_and(|w| w.fetch_or(COUNT_ONLY, Relaxed) & COUNT_ONLY == 0)
    }

    /// The calls of `site` counted since its switch, or `None` if it was
    /// never switched.
    pub(crate) fn counted(&self, site: u32) -> Option<u64> {
        let v = self.word(site)?.load(Relaxed);
        (v & COUNT_ONLY != 0).then_some(v & !COUNT_ONLY)
    }
}

impl Drop for CountTable {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: mapped in `new` with this size; no probe points at it any
        // more (the owning thread's state drops its pointer with its buffer).
        unsafe {
            libc::munmap(self.words.as_ptr() as *mut libc::c_void, BYTES);
        }
        #[cfg(not(unix))]
        // SAFETY: allocated in `new` with this layout.
        unsafe {
            std::alloc::dealloc(self.words.as_ptr() as *mut u8, Self::layout())
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_happens_once_and_then_counts() {
        let t = CountTable::new().expect("2 MiB of address space");
        assert_eq!(t.counted(5), None);
        assert!(t.switch(5));
        assert!(!t.switch(5), "already switched");
        assert_eq!(t.counted(5), Some(0));
        // What the probe does on each call of the thread.
        // SAFETY: site 5 is in the table.
        let w = unsafe { &*t.as_ptr().add(5) };
        w.fetch_add(3, Relaxed);
        assert_eq!(t.counted(5), Some(3));
        assert_eq!(t.counted(MAX_SITES - 1), None, "the last word is mapped");
        assert!(!t.switch(MAX_SITES));
    }
}
