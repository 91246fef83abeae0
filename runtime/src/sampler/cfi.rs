//! `.eh_frame` unwinding of sampled stacks (feature `unwind`), for code built
//! without frame pointers, where the frame-pointer walk skips every function.
//!
//! A sample brings the registers the unwinder starts from (IP, SP and the
//! frame pointer; on AArch64 also LR) and a copy of the stack from SP up
//! (bounded). [`Unwinder`] runs on the sampler thread, never on the sampled
//! one: it knows the loaded objects by their program headers
//! (`dl_iterate_phdr`: each object's `PT_GNU_EH_FRAME`, i.e. `.eh_frame_hdr`,
//! and the `.eh_frame` it points to, copied out of memory once), and hands
//! them to framehop, which looks each address up in the binary-search table
//! of `.eh_frame_hdr` and applies the CFI rules (cached per address). Only the
//! return addresses it finds are kept.

use framehop::{
    CacheNative, ExplicitModuleSectionInfo, FrameAddress, MayAllocateDuringUnwind, Module,
    UnwindRegsNative, Unwinder as _, UnwinderNative,
};
use std::time::{Duration, Instant};

/// Return addresses kept per sample (the kernel's call chains stop at 127).
pub const MAX_FRAMES: usize = 256;

/// The registers `PERF_SAMPLE_REGS_USER` is asked for, as bits of
/// `sample_regs_user` (arch/x86/include/uapi/asm/perf_regs.h: BP 6, SP 7,
/// IP 8); the kernel writes them in increasing bit order.
#[cfg(target_arch = "x86_64")]
pub const PERF_REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);
/// arch/arm64/include/uapi/asm/perf_regs.h: X29 (FP) 29, LR 30, SP 31, PC 32.
#[cfg(target_arch = "aarch64")]
pub const PERF_REGS_MASK: u64 = (1 << 29) | (1 << 30) | (1 << 31) | (1 << 32);

/// Registers a sample was taken with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    pub ip: u64,
    pub sp: u64,
    pub fp: u64,
    /// AArch64's link register (0 on x86_64).
    pub lr: u64,
}

impl Regs {
    /// From the `PERF_SAMPLE_REGS_USER` values, in the mask's bit order.
    #[cfg(target_arch = "x86_64")]
    pub fn from_perf(v: &[u64]) -> Option<Regs> {
        match *v {
            [bp, sp, ip] => Some(Regs {
                ip,
                sp,
                fp: bp,
                lr: 0,
            }),
            _ => None,
        }
    }

    /// From the `PERF_SAMPLE_REGS_USER` values, in the mask's bit order.
    #[cfg(target_arch = "aarch64")]
    pub fn from_perf(v: &[u64]) -> Option<Regs> {
        match *v {
            [fp, lr, sp, pc] => Some(Regs { ip: pc, sp, fp, lr }),
            _ => None,
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn native(&self) -> UnwindRegsNative {
        UnwindRegsNative::new(self.ip, self.sp, self.fp)
    }

    #[cfg(target_arch = "aarch64")]
    fn native(&self) -> UnwindRegsNative {
        UnwindRegsNative::new(self.lr, self.sp, self.fp)
    }
}

/// The loaded objects' unwind tables and framehop's cache.
pub struct Unwinder {
    unwinder: UnwinderNative<Vec<u8>, MayAllocateDuringUnwind>,
    cache: CacheNative<MayAllocateDuringUnwind>,
    /// Code ranges of the objects added, sorted: an IP outside all of them
    /// means an object loaded since the last scan.
    code: Vec<(u64, u64)>,
    last_scan: Option<Instant>,
}

impl Default for Unwinder {
    fn default() -> Self {
        Self::new()
    }
}

impl Unwinder {
    pub fn new() -> Unwinder {
        let mut u = Unwinder {
            unwinder: UnwinderNative::new(),
            cache: CacheNative::new(),
            code: Vec::new(),
            last_scan: None,
        };
        u.scan();
        u
    }

    /// Adds the objects loaded since the last scan.
    fn scan(&mut self) {
        self.last_scan = Some(Instant::now());
        for o in loaded_objects() {
            if self.code.iter().any(|&(s, _)| s == o.code.0) {
                continue;
            }
            let code = o.code;
            let Some(module) = o.module() else { continue };
            self.unwinder.add_module(module);
            self.code.push(code);
        }
        self.code.sort_unstable();
    }

    fn known(&self, a: u64) -> bool {
        let i = self.code.partition_point(|r| r.0 <= a);
        i > 0 && a < self.code[i - 1].1
    }

    /// Unwinds a sample taken at `regs` whose stack from `regs.sp` up is
    /// `stack` into `out` (the IP first, then return addresses), until the
    /// outermost frame, a frame without unwind information, or the end of
    /// the copy. `false`: nothing past the IP was found.
    pub fn unwind(&mut self, regs: Regs, stack: &[u8], out: &mut Vec<u64>) -> bool {
        out.clear();
        if !self.known(regs.ip)
            && self
                .last_scan
                .is_none_or(|t| t.elapsed() > Duration::from_millis(100))
        {
            self.scan();
        }
        let sp = regs.sp;
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_ne_bytes(b.try_into().map_err(|_| ())?))
        };
        let mut it = self
            .unwinder
            .iter_frames(regs.ip, regs.native(), &mut self.cache, &mut read);
        while out.len() < MAX_FRAMES {
            match it.next() {
                Ok(Some(FrameAddress::InstructionPointer(ip))) => out.push(ip),
                Ok(Some(f @ FrameAddress::ReturnAddress(_))) => out.push(f.address()),
                Ok(None) | Err(_) => break,
            }
        }
        out.len() > 1
    }
}

/// One loaded object as its program headers describe it.
struct Object {
    /// Load bias: run-time address minus the file's virtual address.
    bias: u64,
    name: String,
    /// Run-time range of its executable segments.
    code: (u64, u64),
    /// `.eh_frame_hdr` (file addresses) and its bytes.
    hdr: (u64, Vec<u8>),
    /// `.eh_frame` (file address) and its bytes: up to the end of the
    /// segment holding it (the header says where it starts, not its length;
    /// lookups go through the header's table, so trailing bytes are never read).
    eh_frame: (u64, Vec<u8>),
    /// `.text`'s stand-in: the executable segments' file addresses.
    text_svma: (u64, u64),
}

impl Object {
    fn module(self) -> Option<Module<Vec<u8>>> {
        let (hdr_svma, hdr) = self.hdr;
        let (eh_svma, eh) = self.eh_frame;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: Some(self.text_svma.0..self.text_svma.1),
            eh_frame_hdr_svma: Some(hdr_svma..hdr_svma + hdr.len() as u64),
            eh_frame_hdr: Some(hdr),
            eh_frame_svma: Some(eh_svma..eh_svma + eh.len() as u64),
            eh_frame: Some(eh),
            ..Default::default()
        };
        Some(Module::new(
            self.name,
            self.code.0..self.code.1,
            self.bias,
            info,
        ))
    }
}

/// Where `.eh_frame` starts, from `.eh_frame_hdr` at file address
/// `hdr_svma`: its `eh_frame_ptr` field, in the encoding the header names
/// (absolute or relative to the field, 4 or 8 bytes). `None`: an encoding
/// this does not read, or a header too short.
fn eh_frame_svma(hdr_svma: u64, hdr: &[u8]) -> Option<u64> {
    const PCREL: u8 = 0x10;
    let (&version, &enc) = (hdr.first()?, hdr.get(1)?);
    if version != 1 || enc & !(PCREL | 0x0f) != 0 {
        return None;
    }
    let field = hdr.get(4..)?;
    let v = match enc & 0x0f {
        0x03 => u32::from_ne_bytes(field.get(..4)?.try_into().ok()?) as u64,
        0x0b => i32::from_ne_bytes(field.get(..4)?.try_into().ok()?) as i64 as u64,
        0x04 | 0x0c | 0x00 => u64::from_ne_bytes(field.get(..8)?.try_into().ok()?),
        _ => return None,
    };
    Some(if enc & PCREL != 0 {
        (hdr_svma + 4).wrapping_add(v)
    } else {
        v
    })
}

/// The objects loaded now that have unwind tables.
fn loaded_objects() -> Vec<Object> {
    let mut out: Vec<Object> = Vec::new();
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` whose program
        // headers and segments stay mapped during the callback; `data` is
        // the `Vec` below.
        unsafe {
            let out = &mut *(data as *mut Vec<Object>);
            if let Some(o) = object(&*info) {
                out.push(o);
            }
        }
        0
    }
    // SAFETY: the callback only reads what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut Vec<Object> as *mut _) };
    out
}

/// # Safety
/// `info` is what `dl_iterate_phdr` passes: its headers and loaded
/// segments are mapped and readable.
unsafe fn object(info: &libc::dl_phdr_info) -> Option<Object> {
    if info.dlpi_phdr.is_null() {
        return None;
    }
    // SAFETY: the loader's program header table.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let mut hdr_seg = None;
    for p in phdrs {
        if p.p_type == libc::PT_LOAD && p.p_flags & libc::PF_X != 0 {
            lo = lo.min(p.p_vaddr);
            hi = hi.max(p.p_vaddr + p.p_memsz);
        } else if p.p_type == libc::PT_GNU_EH_FRAME {
            hdr_seg = Some((p.p_vaddr, p.p_memsz));
        }
    }
    let (hdr_svma, hdr_len) = hdr_seg?;
    if lo >= hi || hdr_len < 8 {
        return None;
    }
    // SAFETY: PT_GNU_EH_FRAME lies inside a loaded segment.
    let hdr = unsafe { copy(bias.wrapping_add(hdr_svma), hdr_len) };
    let eh_svma = eh_frame_svma(hdr_svma, &hdr)?;
    // The loaded (file-backed) segment that holds `.eh_frame`.
    let seg = phdrs.iter().find(|p| {
        p.p_type == libc::PT_LOAD && p.p_vaddr <= eh_svma && eh_svma < p.p_vaddr + p.p_filesz
    })?;
    let eh_len = seg.p_vaddr + seg.p_filesz - eh_svma;
    // SAFETY: within that segment's file-backed part.
    let eh = unsafe { copy(bias.wrapping_add(eh_svma), eh_len) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated name from the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    Some(Object {
        bias,
        name,
        code: (bias.wrapping_add(lo), bias.wrapping_add(hi)),
        hdr: (hdr_svma, hdr),
        eh_frame: (eh_svma, eh),
        text_svma: (lo, hi),
    })
}

/// # Safety
/// `[addr, addr + len)` is mapped and readable.
unsafe fn copy(addr: u64, len: u64) -> Vec<u8> {
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) }.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eh_frame_pointer_is_read_in_its_encodings() {
        // pcrel | sdata4: relative to the field (header + 4).
        let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
        hdr.extend_from_slice(&(-0x40i32).to_ne_bytes());
        assert_eq!(eh_frame_svma(0x1000, &hdr), Some(0x1004 - 0x40));
        // absolute udata4.
        let mut hdr = vec![1, 0x03, 0x03, 0x3b];
        hdr.extend_from_slice(&0x2345u32.to_ne_bytes());
        assert_eq!(eh_frame_svma(0x1000, &hdr), Some(0x2345));
        // Unknown version, unknown encoding, short header: none.
        assert_eq!(eh_frame_svma(0, &[2, 0x1b, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(eh_frame_svma(0, &[1, 0x50, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(eh_frame_svma(0, &[1, 0x1b, 0, 0, 0]), None);
    }

    /// Unwinds this test's own stack, copied as the kernel would copy it,
    /// and finds the callers' return addresses inside their functions.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_copied_stack_unwinds_to_its_callers() {
        #[inline(never)]
        fn leaf(out: &mut Vec<u64>, depth: u32) -> bool {
            if depth > 0 {
                return std::hint::black_box(leaf(out, depth - 1));
            }
            let (ip, sp, bp): (u64, u64, u64);
            // SAFETY: reads three registers.
            unsafe {
                std::arch::asm!("lea {}, [rip]", "mov {}, rsp", "mov {}, rbp",
                    out(reg) ip, out(reg) sp, out(reg) bp);
            }
            let top = stack_top();
            let len = (top - sp).min(16 << 10);
            // SAFETY: [sp, sp + len) lies in this thread's stack, below its top.
            let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, len as usize) };
            let mut u = Unwinder::new();
            u.unwind(
                Regs {
                    ip,
                    sp,
                    fp: bp,
                    lr: 0,
                },
                stack,
                out,
            )
        }
        fn stack_top() -> u64 {
            // SAFETY: pthread_getattr_np on the running thread.
            unsafe {
                let mut attr: libc::pthread_attr_t = std::mem::zeroed();
                assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
                let (mut addr, mut size) = (std::ptr::null_mut(), 0);
                libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
                libc::pthread_attr_destroy(&mut attr);
                addr as u64 + size as u64
            }
        }
        let mut frames = Vec::new();
        assert!(leaf(&mut frames, 5));
        let leaf_at = leaf as *const () as u64;
        // The five recursive calls' return addresses lie in `leaf` (its
        // code follows its entry by less than 4 KiB), then the test's own.
        let in_leaf = frames
            .iter()
            .skip(1)
            .filter(|&&a| a > leaf_at && a < leaf_at + 4096)
            .count();
        assert!(in_leaf >= 5, "{frames:x?} (leaf at {leaf_at:x})");
        assert!(frames.len() > 7, "{frames:x?}");
    }
}
