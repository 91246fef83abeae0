//! `perf_event_open` on the own process, the parts the sampler and off-CPU
//! recording share: opening a per-thread event, explaining a refusal, and
//! reading the records of an event's mmap ring buffer.

use perf_event_open_sys as sys;
use std::io;
use std::sync::atomic::{fence, Ordering};

/// An open per-thread event; closed on drop.
pub struct Fd(pub i32);

impl Fd {
    /// The descriptor, no longer closed on drop (its new owner closes it).
    pub fn into_raw(self) -> i32 {
        std::mem::ManuallyDrop::new(self).0
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// Explains a refused `perf_event_open`, naming the setting to change.
pub fn explain(err: io::Error, what: &str) -> io::Error {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let hint = match err.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "the kernel refused: kernel.perf_event_paranoid is {paranoid} (user-space self-monitoring needs <= 2; \
             containers often block perf_event_open with seccomp)"
        ),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            "this CPU or VM does not expose that event (no PMU?)".to_string()
        }
        Some(libc::ENOSYS) => "this kernel has no perf_event_open".to_string(),
        Some(libc::EINVAL) => "this kernel does not support these event settings (too old?)".to_string(),
        _ => String::new(),
    };
    io::Error::new(
        err.kind(),
        format!("perf_event_open({what}) failed: {err}; {hint}"),
    )
}

/// Opens `a` on thread `tid` (any CPU, no group, close-on-exec).
pub fn open(a: &mut sys::bindings::perf_event_attr, tid: i32, what: &str) -> io::Result<Fd> {
    a.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
    // SAFETY: valid attr; pid = tid, cpu = -1 (any), no group.
    let fd =
        unsafe { sys::perf_event_open(a, tid, -1, -1, sys::bindings::PERF_FLAG_FD_CLOEXEC as u64) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            // The thread exited: nothing was refused, keep the code for callers.
            return Err(e);
        }
        return Err(explain(e, what));
    }
    Ok(Fd(fd))
}

pub fn enable(fd: &Fd) {
    // SAFETY: ioctls on our descriptor.
    unsafe {
        sys::ioctls::RESET(fd.0, 0);
        sys::ioctls::ENABLE(fd.0, 0);
    }
}

pub fn disable(fd: &Fd) {
    // SAFETY: ioctl on our descriptor.
    unsafe { sys::ioctls::DISABLE(fd.0, 0) };
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// An event's mmap ring buffer: one header page and `2^n` data pages.
pub struct MmapRing {
    base: *mut u8,
    len: usize,
    data_size: u64,
    /// The record being read, copied out of the ring (it may wrap).
    rec: Vec<u8>,
}

// SAFETY: the ring is read by one thread at a time (its owner).
unsafe impl Send for MmapRing {}

/// One record of a ring, as `drain` hands it over.
pub struct Record<'a> {
    /// `PERF_RECORD_*`.
    pub ty: u32,
    pub misc: u16,
    /// What follows the 8-byte header.
    pub body: &'a [u8],
}

impl Record<'_> {
    /// The native-endian u64 at byte `off` of the body, if the body holds it.
    pub fn u64_at(&self, off: usize) -> Option<u64> {
        let b = self.body.get(off..off.checked_add(8)?)?;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }
}

impl MmapRing {
    /// Maps the ring of `fd` with `data_pages` (a power of two) data pages.
    pub fn map(fd: &Fd, data_pages: usize) -> io::Result<MmapRing> {
        let page = page_size();
        let len = page * (data_pages + 1);
        // SAFETY: mapping the event's ring, as perf_event_open(2) describes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.0,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::other(format!(
                "mmap of the perf ring failed: {} (raise kernel.perf_event_mlock_kb?)",
                io::Error::last_os_error()
            )));
        }
        Ok(MmapRing {
            base: base as *mut u8,
            len,
            data_size: (page * data_pages) as u64,
            rec: Vec::new(),
        })
    }

    /// Hands every complete record to `f`, oldest first, and frees their space.
    pub fn drain(&mut self, mut f: impl FnMut(&Record<'_>)) {
        let h = self.base as *mut sys::bindings::perf_event_mmap_page;
        // SAFETY: the header page is mapped; data_head is written by the kernel.
        let head = unsafe { std::ptr::read_volatile(&(*h).data_head) };
        fence(Ordering::Acquire);
        // SAFETY: as above; data_tail is ours.
        let mut tail = unsafe { (*h).data_tail };
        // SAFETY: the data area follows the header page.
        let data = unsafe { self.base.add(page_size()) };
        let size = self.data_size;
        // Two copies at most (the part before the ring's end, the rest from
        // its start): a sample with a stack copy is kilobytes.
        let read = |off: u64, buf: &mut [u8]| {
            let start = (off % size) as usize;
            let first = buf.len().min(size as usize - start);
            // SAFETY: `start + first <= size` and `buf.len() - first <= size`
            // (a record is smaller than the ring): both within the data area.
            unsafe {
                std::ptr::copy_nonoverlapping(data.add(start), buf.as_mut_ptr(), first);
                std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr().add(first), buf.len() - first);
            }
        };
        while tail + 8 <= head {
            let mut hb = [0u8; 8];
            read(tail, &mut hb);
            let ty = u32::from_ne_bytes([hb[0], hb[1], hb[2], hb[3]]);
            let misc = u16::from_ne_bytes([hb[4], hb[5]]);
            let rec_size = u16::from_ne_bytes([hb[6], hb[7]]) as u64;
            if rec_size < 8 || tail + rec_size > head {
                break;
            }
            self.rec.resize(rec_size as usize - 8, 0);
            read(tail + 8, &mut self.rec);
            f(&Record {
                ty,
                misc,
                body: &self.rec,
            });
            tail += rec_size;
        }
        fence(Ordering::Release);
        // SAFETY: tells the kernel the space up to `tail` is free.
        unsafe { std::ptr::write_volatile(&mut (*h).data_tail, tail) };
    }
}

impl Drop for MmapRing {
    fn drop(&mut self) {
        // SAFETY: unmapping what `map` mapped.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_perf_event_open_names_the_setting() {
        let e = explain(io::Error::from_raw_os_error(libc::EACCES), "cycles");
        let s = e.to_string();
        assert!(
            s.contains("perf_event_open(cycles)") && s.contains("kernel.perf_event_paranoid"),
            "{s}"
        );
        let e = explain(io::Error::from_raw_os_error(libc::ENOENT), "cache-misses").to_string();
        assert!(e.contains("no PMU"), "{e}");
    }

    #[test]
    fn record_fields_out_of_the_body_are_none() {
        let body = [1u8, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0];
        assert_eq!(body.len(), 12);
        let r = Record {
            ty: 0,
            misc: 0,
            body: &body,
        };
        assert_eq!(r.u64_at(0), Some(1));
        assert_eq!(r.u64_at(8), None);
        assert_eq!(r.u64_at(usize::MAX), None);
    }
}
