//! The calling thread's OS id and name, as traces record them.

/// The calling thread's `std::thread` name, or `tid-N`.
pub fn name() -> String {
    std::thread::current()
        .name()
        .map(String::from)
        .unwrap_or_else(|| format!("tid-{}", os_tid()))
}

/// The calling thread's OS id.
pub fn os_tid() -> u32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as u32 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
        static NEXT: AtomicU32 = AtomicU32::new(1);
        thread_local!(static TID: u32 = NEXT.fetch_add(1, Relaxed));
        TID.with(|t| *t)
    }
}
