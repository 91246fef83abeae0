//! Frame-pointer unwinders, one per architecture.
//!
//! The sampler's signal handler reads PC, FP, SP (and `ra`/`lr` on RISC-V and
//! AArch64) from the interrupted context and calls [`walk`]. The walk is a pure
//! function over a [`Memory`], so every layout is tested on any host: against
//! synthetic stacks here and against stacks that gcc built for real in
//! `tests/unwind_real_frames.rs`.
//!
//! The frames it writes follow Zephyr's perf backends
//! (`subsys/profiling/perf/backends/perf_*.c`), so a dump of them reads like
//! a Zephyr `perf printbuf` dump:
//!
//! 1. the interrupted PC, as is;
//! 2. on RISC-V and AArch64, the interrupted `ra`/`lr` register, unchecked
//!    (see [`Regs::lr`] for what that costs and why it is kept);
//! 3. return addresses from the frame-pointer chain, innermost first: `fp[1]`
//!    on x86 and AArch64 ([`x86`], [`aarch64`]), `fp[-1]` on RISC-V
//!    ([`riscv`]).
//!
//! The chain ends at the first frame whose record is outside the stack,
//! misaligned or unreadable, whose return address is 0 or outside the text,
//! or whose saved FP is not strictly above the current one (stacks grow down,
//! so this also ends loops); or when `out` is full. [`Walk::stop`] says which.
//!
//! Signal-handler safe: no allocation, no recursion, no panics (all address
//! arithmetic is checked), and with [`RawMemory`] no read outside the bounds.
//!
//! ```
//! use fgtrace_core::unwind::{walk, Arch, Regs, SliceMemory, StackBounds};
//!
//! // An x86_64 stack at 0x1000: two frame records {saved rbp, return address}.
//! let mut image = [0u8; 64];
//! let mut put = |addr: u64, v: u64| {
//!     let i = (addr - 0x1000) as usize;
//!     image[i..i + 8].copy_from_slice(&v.to_le_bytes());
//! };
//! put(0x1010, 0x1020); // inner frame: saved rbp
//! put(0x1018, 0x4005); // inner frame: return address
//! put(0x1020, 0); // outer frame: saved rbp 0 ends the chain
//! put(0x1028, 0x4009);
//! let mem = SliceMemory::new(0x1000, &image);
//! let regs = Regs { pc: 0x4001, fp: 0x1010, sp: 0x1000, lr: None };
//! let bounds = StackBounds { lo: 0x1000, hi: 0x1040 };
//! let mut out = [0u64; 8];
//! let n = walk(Arch::X86_64, &regs, bounds, &mem, |a| (0x4000..0x5000).contains(&a), &mut out);
//! assert_eq!(&out[..n], &[0x4001, 0x4005, 0x4009]);
//! ```

pub mod aarch64;
pub mod riscv;
pub mod thumb;
pub mod x86;

/// An architecture with a frame-pointer layout the walker knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// i386/i686: `ebp` chain, 4-byte words.
    X86,
    /// `rbp` chain, 8-byte words.
    X86_64,
    /// `s0` chain, 4-byte words, same layout as [`Arch::Riscv64`].
    Riscv32,
    /// `s0` chain, 8-byte words.
    Riscv64,
    /// `x29` chain, 8-byte words.
    Aarch64,
    /// `r7` chain, 4-byte words (Armv7-M, Thumb).
    Thumb,
}

impl Arch {
    /// The architecture this crate was compiled for, or `None` where no
    /// unwinder exists (the sampler then records only the PC).
    pub const fn host() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "x86") {
            Some(Arch::X86)
        } else if cfg!(target_arch = "riscv64") {
            Some(Arch::Riscv64)
        } else if cfg!(target_arch = "riscv32") {
            Some(Arch::Riscv32)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else if cfg!(all(target_arch = "arm", target_os = "none")) {
            Some(Arch::Thumb)
        } else {
            None
        }
    }

    /// Bytes per stack word (and per saved FP or return address).
    pub const fn word_size(self) -> usize {
        match self {
            Arch::X86 | Arch::Riscv32 | Arch::Thumb => 4,
            Arch::X86_64 | Arch::Riscv64 | Arch::Aarch64 => 8,
        }
    }

    /// Whether calls leave the return address in a register (`ra`, `x30`),
    /// which [`walk`] then records as the second frame.
    pub const fn has_link_register(self) -> bool {
        matches!(
            self,
            Arch::Riscv32 | Arch::Riscv64 | Arch::Aarch64 | Arch::Thumb
        )
    }

    const fn layout(self) -> FrameLayout {
        match self {
            Arch::X86 | Arch::X86_64 => x86::LAYOUT,
            Arch::Riscv32 | Arch::Riscv64 => riscv::LAYOUT,
            Arch::Aarch64 => aarch64::LAYOUT,
            Arch::Thumb => thumb::LAYOUT,
        }
    }
}

/// Where a frame record sits relative to the frame pointer, in words.
#[derive(Clone, Copy, Debug)]
struct FrameLayout {
    /// Index of the saved return address: `fp[ret]`.
    ret: i64,
    /// Index of the caller's saved frame pointer: `fp[prev_fp]`.
    prev_fp: i64,
}

/// The interrupted thread's registers, as the signal handler finds them in
/// the `ucontext`; 32-bit registers zero-extended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// Program counter: recorded as frame 0.
    pub pc: u64,
    /// Frame pointer: `rbp`/`ebp`, `s0`, `x29`.
    pub fp: u64,
    /// Stack pointer. Frame records live at or above it, so the walk ignores
    /// the stack below it; 0 if unknown.
    pub sp: u64,
    /// `ra` on RISC-V, `x30` on AArch64, recorded unchecked as frame 1 like
    /// Zephyr does; ignored on x86, which has no such register.
    ///
    /// It recovers the caller when the PC is in a prologue, an epilogue or (on
    /// RISC-V) a leaf, where the FP chain skips it. The caveat: in a non-leaf
    /// function after its prologue, `lr` equals the first saved return address,
    /// so the caller appears twice; after a call has returned, `lr` is stale
    /// and points into the current function. Zephyr's dumps contain both, so
    /// fgtrace keeps them and leaves merging to the reader (Zephyr's newer
    /// `stackcollapse.py` merges adjacent duplicate names). `None` omits the
    /// frame; on RISC-V a leaf's caller is then lost.
    pub lr: Option<u64>,
}

/// The sampled thread's stack, `[lo, hi)`, captured when it registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBounds {
    /// Lowest address (the end the stack grows towards).
    pub lo: u64,
    /// One past the highest address.
    pub hi: u64,
}

impl StackBounds {
    /// Whether all of `[addr, addr + len)` is inside the bounds, without
    /// overflow.
    pub const fn contains(&self, addr: u64, len: u64) -> bool {
        match addr.checked_add(len) {
            Some(end) => addr >= self.lo && end <= self.hi,
            None => false,
        }
    }
}

/// Word-sized reads of the sampled thread's memory that never fault: `None`
/// for anything the source cannot or must not read.
pub trait Memory {
    /// Reads one little-endian word of `word_size` (4 or 8) bytes at `addr`,
    /// zero-extended. Misaligned or out-of-range reads return `None`.
    fn read_word(&self, addr: u64, word_size: usize) -> Option<u64>;
}

/// The live stack of the current thread, for the sampler's signal handler:
/// raw pointer reads, only inside the bounds given at construction.
#[derive(Clone, Copy, Debug)]
pub struct RawMemory {
    bounds: StackBounds,
}

impl RawMemory {
    /// # Safety
    ///
    /// Every byte of `[bounds.lo, bounds.hi)` must stay mapped and readable,
    /// and no other thread may write it, for as long as the value is used. A
    /// signal handler reading the stack of the thread it interrupted meets
    /// both: that stack cannot be unmapped or written under it. Bounds of
    /// another, running thread do not: it may write or exit meanwhile.
    pub const unsafe fn new(bounds: StackBounds) -> Self {
        RawMemory { bounds }
    }
}

impl Memory for RawMemory {
    fn read_word(&self, addr: u64, word_size: usize) -> Option<u64> {
        if !matches!(word_size, 4 | 8)
            || addr % word_size as u64 != 0
            || !self.bounds.contains(addr, word_size as u64)
        {
            return None;
        }
        let ptr = usize::try_from(addr).ok()?;
        // SAFETY: `[addr, addr + word_size)` lies inside bounds the caller of
        // `new` promised are mapped, readable and not written concurrently,
        // and `addr` is a multiple of `word_size`, which satisfies the
        // alignment of `u32`/`u64`. Volatile: the compiler must not assume
        // anything about memory the interrupted code owns.
        let v = unsafe {
            if word_size == 4 {
                u64::from(core::ptr::read_volatile(ptr as *const u32))
            } else {
                core::ptr::read_volatile(ptr as *const u64)
            }
        };
        Some(v)
    }
}

/// A copy of stack memory starting at `base`: what tests and offline tools
/// unwind (for example the bytes of a stack dumped by another process).
#[derive(Clone, Copy, Debug)]
pub struct SliceMemory<'a> {
    base: u64,
    bytes: &'a [u8],
}

impl<'a> SliceMemory<'a> {
    /// `bytes[0]` is the byte at address `base`.
    pub const fn new(base: u64, bytes: &'a [u8]) -> Self {
        SliceMemory { base, bytes }
    }
}

impl Memory for SliceMemory<'_> {
    fn read_word(&self, addr: u64, word_size: usize) -> Option<u64> {
        if !matches!(word_size, 4 | 8) || addr % word_size as u64 != 0 {
            return None;
        }
        let start = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let bytes = self.bytes.get(start..start.checked_add(word_size)?)?;
        let mut buf = [0u8; 8];
        buf[..word_size].copy_from_slice(bytes);
        Some(u64::from_le_bytes(buf))
    }
}

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stop {
    /// `out` filled up while a frame record was still in bounds: the sample
    /// may be truncated. (Zephyr drops such samples; a caller that wants the
    /// same can test for this.)
    Full,
    /// The frame record at FP is not inside the stack (at or above SP): a
    /// frame pointer that is 0, garbage, or points to another stack.
    OutOfBounds,
    /// FP is not a multiple of the word size: not a frame pointer.
    Misaligned,
    /// The [`Memory`] refused a read inside the bounds.
    Unreadable,
    /// The saved return address is 0: the end marker some runtimes leave.
    ZeroReturn,
    /// The saved return address is outside the text (per `is_text`): the
    /// usual end, at a caller built without frame pointers.
    NotText,
    /// The saved FP is not above the current FP: the outermost frame (saved
    /// FP 0), a loop, or garbage.
    NotAbove,
}

/// What [`walk_detailed`] produced: `out[..len]` and the reason it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Frames written to the start of `out`.
    pub len: usize,
    /// Why no further frame was written.
    pub stop: Stop,
}

/// Unwinds into `out`, innermost first, and returns the number of frames
/// written. See the [module docs](self) for the frame order and stop rules,
/// and [`walk_detailed`] for the reason it stopped.
///
/// `is_text` must be async-signal-safe when called from a signal handler (a
/// range comparison is).
pub fn walk(
    arch: Arch,
    regs: &Regs,
    bounds: StackBounds,
    mem: &impl Memory,
    is_text: impl Fn(u64) -> bool,
    out: &mut [u64],
) -> usize {
    walk_detailed(arch, regs, bounds, mem, is_text, out).len
}

/// [`walk`], also saying why it stopped.
pub fn walk_detailed(
    arch: Arch,
    regs: &Regs,
    bounds: StackBounds,
    mem: &impl Memory,
    is_text: impl Fn(u64) -> bool,
    out: &mut [u64],
) -> Walk {
    walk_split(arch, regs, bounds, mem, is_text, out, u64::MAX).0
}

/// [`walk_detailed`], also finding where a frame whose stack pointer was
/// `split_sp` sits in the result: returns the number of frames that belong to
/// functions called (directly or not) by that frame's function, so
/// `out[..cut]` are its callees and `out[cut]` is in the function itself.
///
/// The fgtrace sampler passes the stack pointer the innermost traced call
/// recorded at entry: a frame record below it belongs to a callee, the first
/// record at or above it is the traced function's own. `None` when the walk
/// never reached that frame.
pub fn walk_split(
    arch: Arch,
    regs: &Regs,
    bounds: StackBounds,
    mem: &impl Memory,
    is_text: impl Fn(u64) -> bool,
    out: &mut [u64],
    split_sp: u64,
) -> (Walk, Option<usize>) {
    walk_split_records(arch, regs, bounds, mem, is_text, out, split_sp, |_, _| {})
}

/// [`walk_split`], also telling `record(i, fp)` the frame pointer at which
/// the frame record of `out[i]`'s frame was read (a board's sampler sends
/// them, so that the host can cut a sample below a call whose frame
/// pointer it knows).
#[allow(clippy::too_many_arguments)]
pub fn walk_split_records(
    arch: Arch,
    regs: &Regs,
    bounds: StackBounds,
    mem: &impl Memory,
    is_text: impl Fn(u64) -> bool,
    out: &mut [u64],
    split_sp: u64,
    mut record: impl FnMut(usize, u64),
) -> (Walk, Option<usize>) {
    let mut cut = None;
    let mut len = 0;
    let full = |len: usize| Walk {
        len,
        stop: Stop::Full,
    };
    match out.first_mut() {
        Some(slot) => *slot = regs.pc,
        None => return (full(0), None),
    }
    len += 1;
    let stack = Stack::new(arch, bounds, regs.sp, mem);
    if let (true, Some(lr)) = (arch.has_link_register(), regs.lr) {
        if !(arch == Arch::Thumb && thumb::lr_is_saved(&stack, regs.fp, lr)) {
            match out.get_mut(len) {
                Some(slot) => *slot = lr,
                None => return (full(len), None),
            }
            len += 1;
        }
    }

    let layout = arch.layout();
    let mut fp = regs.fp;
    if matches!(arch, Arch::Riscv32 | Arch::Riscv64) {
        fp = riscv::skip_leaf_record(&stack, fp);
    }
    let stop = loop {
        if let Err(stop) = stack.check_record(fp, layout) {
            break stop;
        }
        // The record at `fp` belongs to the frame of `out[len - 1]`.
        record(len - 1, fp);
        if cut.is_none() && fp >= split_sp {
            cut = Some(len - 1);
        }
        let Some(slot) = out.get_mut(len) else {
            break Stop::Full;
        };
        let Some(ret) = stack.read(fp, layout.ret) else {
            break Stop::Unreadable;
        };
        if ret == 0 {
            break Stop::ZeroReturn;
        }
        if !is_text(ret) {
            break Stop::NotText;
        }
        *slot = ret;
        len += 1;
        let Some(prev) = stack.read(fp, layout.prev_fp) else {
            break Stop::Unreadable;
        };
        if prev <= fp {
            break Stop::NotAbove;
        }
        fp = prev;
    };
    (Walk { len, stop }, cut)
}

/// The part of the stack a walk may read: `[max(lo, sp), hi)`, in words.
struct Stack<'m, M> {
    mem: &'m M,
    word: u64,
    lo: u64,
    hi: u64,
}

impl<'m, M: Memory> Stack<'m, M> {
    fn new(arch: Arch, bounds: StackBounds, sp: u64, mem: &'m M) -> Self {
        Stack {
            mem,
            word: arch.word_size() as u64,
            lo: bounds.lo.max(sp),
            hi: bounds.hi,
        }
    }

    /// Address of `fp[index]`, if it exists and the whole word is in bounds.
    fn slot(&self, fp: u64, index: i64) -> Option<u64> {
        let addr = fp.checked_add_signed(index.checked_mul(self.word as i64)?)?;
        let end = addr.checked_add(self.word)?;
        (addr >= self.lo && end <= self.hi).then_some(addr)
    }

    /// Whether the record at `fp` (both words of `layout`) may be read.
    fn check_record(&self, fp: u64, layout: FrameLayout) -> Result<(), Stop> {
        if self.slot(fp, layout.ret).is_none() || self.slot(fp, layout.prev_fp).is_none() {
            return Err(Stop::OutOfBounds);
        }
        if fp % self.word != 0 {
            return Err(Stop::Misaligned);
        }
        Ok(())
    }

    /// `fp[index]`, or `None` when out of bounds, misaligned or unreadable.
    fn read(&self, fp: u64, index: i64) -> Option<u64> {
        if fp % self.word != 0 {
            return None;
        }
        self.mem
            .read_word(self.slot(fp, index)?, self.word as usize)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Synthetic stacks: an image that may extend past the bounds under test,
    //! with a log of every address read so tests can prove the walk never
    //! looks outside them.

    use super::{walk_detailed, Arch, Memory, Regs, SliceMemory, StackBounds, Stop};
    use std::cell::RefCell;

    pub(crate) const TEXT: std::ops::Range<u64> = 0x40_0000..0x50_0000;

    pub(crate) fn is_text(addr: u64) -> bool {
        TEXT.contains(&addr)
    }

    /// Walks `img` from `fp` within `bounds` (sp at their bottom, pc
    /// 0x40_0100), with room for 16 frames: the frames and why it stopped.
    pub(crate) fn walk_image(
        arch: Arch,
        img: &Image,
        bounds: StackBounds,
        fp: u64,
        lr: Option<u64>,
    ) -> (Vec<u64>, Stop) {
        let regs = Regs {
            pc: 0x40_0100,
            fp,
            sp: bounds.lo,
            lr,
        };
        let mut out = [0; 16];
        let w = walk_detailed(arch, &regs, bounds, img, is_text, &mut out);
        (out[..w.len].to_vec(), w.stop)
    }

    pub(crate) struct Image {
        pub(crate) base: u64,
        pub(crate) bytes: Vec<u8>,
        pub(crate) word: usize,
        pub(crate) reads: RefCell<Vec<u64>>,
    }

    impl Image {
        pub(crate) fn new(base: u64, len: usize, word: usize) -> Self {
            Image {
                base,
                bytes: vec![0; len],
                word,
                reads: RefCell::new(Vec::new()),
            }
        }

        /// Writes `value` as one word at `addr` (truncated to the word size).
        pub(crate) fn put(&mut self, addr: u64, value: u64) {
            let i = usize::try_from(addr - self.base).unwrap();
            let bytes = value.to_le_bytes();
            self.bytes[i..i + self.word].copy_from_slice(&bytes[..self.word]);
        }

        pub(crate) fn reads(&self) -> Vec<u64> {
            self.reads.borrow().clone()
        }
    }

    impl Memory for Image {
        fn read_word(&self, addr: u64, word_size: usize) -> Option<u64> {
            assert_eq!(word_size, self.word, "walk used the wrong word size");
            self.reads.borrow_mut().push(addr);
            SliceMemory::new(self.base, &self.bytes).read_word(addr, word_size)
        }
    }
}

#[cfg(test)]
mod tests {
    //! Stop rules shared by every architecture, each run against all six
    //! layouts through the per-architecture `put_frame` writers (which spell
    //! the layout out independently of the walker's tables).

    use super::testing::{is_text, Image};
    use super::*;

    const ALL: [Arch; 6] = [
        Arch::X86,
        Arch::X86_64,
        Arch::Riscv32,
        Arch::Riscv64,
        Arch::Aarch64,
        Arch::Thumb,
    ];

    /// Writes the frame record for `fp` as `arch` lays it out.
    fn put_frame(arch: Arch, img: &mut Image, fp: u64, ret: u64, prev_fp: u64) {
        match arch {
            Arch::X86 | Arch::X86_64 => x86::tests::put_frame(img, fp, ret, prev_fp),
            Arch::Riscv32 | Arch::Riscv64 => riscv::tests::put_frame(img, fp, ret, prev_fp),
            Arch::Aarch64 => aarch64::tests::put_frame(img, fp, ret, prev_fp),
            Arch::Thumb => thumb::tests::put_frame(img, fp, ret, prev_fp),
        }
    }

    /// Frames before the chain: the PC, and the link register where there is
    /// one.
    fn head(arch: Arch) -> Vec<u64> {
        if arch.has_link_register() {
            vec![0x40_0100, 0x40_0200]
        } else {
            vec![0x40_0100]
        }
    }

    fn regs(fp: u64, sp: u64) -> Regs {
        Regs {
            pc: 0x40_0100,
            fp,
            sp,
            lr: Some(0x40_0200),
        }
    }

    /// Stack [0x1000, 0x1400) inside an image [0x0f00, 0x1500): the walk
    /// must not touch the 0x100 bytes on either side.
    const BOUNDS: StackBounds = StackBounds {
        lo: 0x1000,
        hi: 0x1400,
    };

    fn image(arch: Arch) -> Image {
        Image::new(0x0f00, 0x600, arch.word_size())
    }

    /// A valid frame pointer for `arch` at roughly `at`: on RISC-V the
    /// record lies below fp, so fp must leave room for it above `lo`.
    fn fp_at(arch: Arch, at: u64) -> u64 {
        match arch {
            Arch::Riscv32 | Arch::Riscv64 => at + 2 * arch.word_size() as u64,
            _ => at,
        }
    }

    fn run(arch: Arch, img: &Image, regs: &Regs, out_len: usize) -> (Vec<u64>, Stop) {
        let mut out = vec![0xdead; out_len];
        let w = walk_detailed(arch, regs, BOUNDS, img, is_text, &mut out);
        assert!(
            out[w.len..].iter().all(|&v| v == 0xdead),
            "{arch:?}: wrote past len"
        );
        for addr in img.reads() {
            assert!(
                BOUNDS.contains(addr, arch.word_size() as u64) && addr >= regs.sp,
                "{arch:?}: read {addr:#x} outside the live stack"
            );
        }
        out.truncate(w.len);
        (out, w.stop)
    }

    /// Walks from `fp` (sp at the stack's bottom) with room for `cap`
    /// frames: the head, then `chain`, then `stop`.
    #[track_caller]
    fn assert_walk(arch: Arch, img: &Image, fp: u64, cap: usize, chain: &[u64], stop: Stop) {
        let (frames, got) = run(arch, img, &regs(fp, 0x1000), cap);
        let mut want = head(arch);
        want.extend_from_slice(chain);
        assert_eq!((frames, got), (want, stop), "{arch:?}");
    }

    /// Three good frames; the outermost saves fp 0 (what `_start` leaves).
    fn good_chain(arch: Arch, img: &mut Image) -> u64 {
        let (f1, f2, f3) = (
            fp_at(arch, 0x1100),
            fp_at(arch, 0x1200),
            fp_at(arch, 0x1300),
        );
        put_frame(arch, img, f1, 0x40_1001, f2);
        put_frame(arch, img, f2, 0x40_1002, f3);
        put_frame(arch, img, f3, 0x40_1003, 0);
        f1
    }

    #[test]
    fn good_chain_ends_at_saved_fp_zero() {
        for arch in ALL {
            let mut img = image(arch);
            let fp = good_chain(arch, &mut img);
            let chain = [0x40_1001, 0x40_1002, 0x40_1003];
            assert_walk(arch, &img, fp, 16, &chain, Stop::NotAbove);
        }
    }

    #[test]
    fn fp_outside_bounds_stops_without_reading() {
        for arch in ALL {
            let mut img = image(arch);
            // Plausible records just outside the bounds, on both sides.
            put_frame(arch, &mut img, fp_at(arch, 0x0f40), 0x40_1001, 0x1100);
            put_frame(arch, &mut img, fp_at(arch, 0x1400), 0x40_1001, 0x1480);
            for fp in [0, fp_at(arch, 0x0f40), fp_at(arch, 0x1400), u64::MAX - 3] {
                let (frames, stop) = run(arch, &img, &regs(fp, 0x1000), 16);
                assert_eq!(frames, head(arch), "{arch:?} fp {fp:#x}");
                assert_eq!(stop, Stop::OutOfBounds, "{arch:?} fp {fp:#x}");
            }
            assert!(img.reads().is_empty(), "{arch:?}: {:x?}", img.reads());
        }
    }

    #[test]
    fn record_straddling_the_top_is_out_of_bounds() {
        for arch in ALL {
            let w = arch.word_size() as u64;
            let mut img = image(arch);
            // The record's last word would be the first word past `hi`.
            let fp = match arch {
                Arch::Riscv32 | Arch::Riscv64 => 0x1400 + w,
                _ => 0x1400 - w,
            };
            put_frame(arch, &mut img, fp, 0x40_1001, 0x1480);
            assert_walk(arch, &img, fp, 16, &[], Stop::OutOfBounds);
        }
    }

    #[test]
    fn fp_below_sp_is_dead_stack() {
        for arch in ALL {
            let mut img = image(arch);
            let fp = good_chain(arch, &mut img);
            // Same chain, but SP says the frame at fp was already popped.
            let (frames, stop) = run(arch, &img, &regs(fp, 0x1180), 16);
            assert_eq!((frames, stop), (head(arch), Stop::OutOfBounds), "{arch:?}");
        }
    }

    #[test]
    fn loop_stops_after_one_frame() {
        for arch in ALL {
            let mut img = image(arch);
            let fp = fp_at(arch, 0x1100);
            put_frame(arch, &mut img, fp, 0x40_1001, fp);
            assert_walk(arch, &img, fp, 64, &[0x40_1001], Stop::NotAbove);
        }
    }

    #[test]
    fn two_frame_cycle_stops() {
        for arch in ALL {
            let mut img = image(arch);
            let (f1, f2) = (fp_at(arch, 0x1100), fp_at(arch, 0x1200));
            put_frame(arch, &mut img, f1, 0x40_1001, f2);
            put_frame(arch, &mut img, f2, 0x40_1002, f1);
            assert_walk(arch, &img, f1, 64, &[0x40_1001, 0x40_1002], Stop::NotAbove);
        }
    }

    #[test]
    fn decreasing_fp_stops() {
        for arch in ALL {
            let mut img = image(arch);
            let (f1, f2, low) = (
                fp_at(arch, 0x1100),
                fp_at(arch, 0x1200),
                fp_at(arch, 0x1080),
            );
            put_frame(arch, &mut img, f1, 0x40_1001, f2);
            put_frame(arch, &mut img, f2, 0x40_1002, low);
            put_frame(arch, &mut img, low, 0x40_1003, 0x1300);
            assert_walk(arch, &img, f1, 64, &[0x40_1001, 0x40_1002], Stop::NotAbove);
        }
    }

    #[test]
    fn misaligned_fp_stops() {
        for arch in ALL {
            let mut img = image(arch);
            let (f1, odd) = (fp_at(arch, 0x1100), fp_at(arch, 0x1200) + 2);
            put_frame(arch, &mut img, f1, 0x40_1001, odd);
            assert_walk(arch, &img, f1, 64, &[0x40_1001], Stop::Misaligned);
            // Misaligned from the start: nothing read at all.
            let img = image(arch);
            assert_walk(arch, &img, f1 + 1, 64, &[], Stop::Misaligned);
            assert!(img.reads().is_empty(), "{arch:?}");
        }
    }

    #[test]
    fn zero_return_address_stops_even_if_text_says_yes() {
        for arch in ALL {
            let mut img = image(arch);
            let (f1, f2) = (fp_at(arch, 0x1100), fp_at(arch, 0x1200));
            put_frame(arch, &mut img, f1, 0x40_1001, f2);
            put_frame(arch, &mut img, f2, 0, fp_at(arch, 0x1300));
            let mut out = [0; 16];
            let w = walk_detailed(arch, &regs(f1, 0x1000), BOUNDS, &img, |_| true, &mut out);
            let mut want = head(arch);
            want.push(0x40_1001);
            assert_eq!(&out[..w.len], &want[..], "{arch:?}");
            assert_eq!(w.stop, Stop::ZeroReturn, "{arch:?}");
        }
    }

    #[test]
    fn return_address_outside_text_stops() {
        for arch in ALL {
            let mut img = image(arch);
            let (f1, f2) = (fp_at(arch, 0x1100), fp_at(arch, 0x1200));
            put_frame(arch, &mut img, f1, 0x40_1001, f2);
            put_frame(arch, &mut img, f2, 0x7f00_0000, fp_at(arch, 0x1300));
            assert_walk(arch, &img, f1, 16, &[0x40_1001], Stop::NotText);
        }
    }

    #[test]
    fn full_out_truncates_innermost_first() {
        for arch in ALL {
            let mut img = image(arch);
            let fp = good_chain(arch, &mut img);
            let mut full = head(arch);
            full.extend([0x40_1001, 0x40_1002, 0x40_1003]);
            for cap in 0..full.len() {
                let (frames, stop) = run(arch, &img, &regs(fp, 0x1000), cap);
                assert_eq!(frames, full[..cap], "{arch:?} cap {cap}");
                assert_eq!(stop, Stop::Full, "{arch:?} cap {cap}");
            }
            // Exactly enough room: the walk still reports the real end.
            let (frames, stop) = run(arch, &img, &regs(fp, 0x1000), full.len());
            assert_eq!((frames, stop), (full, Stop::NotAbove), "{arch:?}");
        }
    }

    #[test]
    fn unreadable_memory_stops() {
        /// Refuses everything: a stack that was unmapped, say.
        struct Nothing;
        impl Memory for Nothing {
            fn read_word(&self, _: u64, _: usize) -> Option<u64> {
                None
            }
        }
        for arch in ALL {
            let fp = fp_at(arch, 0x1100);
            let mut out = [0; 8];
            let w = walk_detailed(arch, &regs(fp, 0), BOUNDS, &Nothing, is_text, &mut out);
            assert_eq!(w.stop, Stop::Unreadable, "{arch:?}");
            assert_eq!(&out[..w.len], &head(arch)[..], "{arch:?}");
        }
    }

    #[test]
    fn walk_returns_walk_detailed_len() {
        let mut img = image(Arch::X86_64);
        let fp = good_chain(Arch::X86_64, &mut img);
        let mut out = [0; 8];
        let n = walk(
            Arch::X86_64,
            &regs(fp, 0x1000),
            BOUNDS,
            &img,
            is_text,
            &mut out,
        );
        assert_eq!(&out[..n], &[0x40_0100, 0x40_1001, 0x40_1002, 0x40_1003]);
    }

    #[test]
    fn word_size_and_link_register() {
        assert_eq!(
            ALL.map(Arch::word_size),
            [4, 8, 4, 8, 8, 4],
            "X86, X86_64, Riscv32, Riscv64, Aarch64, Thumb"
        );
        assert_eq!(
            ALL.map(Arch::has_link_register),
            [false, false, true, true, true, true]
        );
    }

    #[test]
    fn host_matches_target() {
        let want = if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            Arch::host()
        };
        assert_eq!(Arch::host(), want);
        if let Some(arch) = Arch::host() {
            assert_eq!(arch.word_size(), std::mem::size_of::<usize>());
        }
    }

    #[test]
    fn slice_memory_reads_little_endian_words_in_range() {
        let bytes: Vec<u8> = (1..=16).collect();
        let mem = SliceMemory::new(0x100, &bytes);
        assert_eq!(mem.read_word(0x100, 4), Some(0x0403_0201));
        assert_eq!(mem.read_word(0x108, 8), Some(0x100f_0e0d_0c0b_0a09));
        assert_eq!(mem.read_word(0x10c, 4), Some(0x100f_0e0d));
        assert_eq!(mem.read_word(0x10c, 8), None, "misaligned");
        assert_eq!(mem.read_word(0x110, 4), None, "past the end");
        assert_eq!(mem.read_word(0xfc, 4), None, "before the start");
        assert_eq!(mem.read_word(0x100, 2), None, "not a word size");
        assert_eq!(mem.read_word(u64::MAX - 7, 8), None);
    }

    #[test]
    fn raw_memory_reads_only_inside_its_bounds() {
        let words: [u64; 4] = [0x1111, 0x2222_0000_3333, u64::MAX, 7];
        let lo = words.as_ptr() as u64;
        // Bounds cover words[1..3] only.
        let bounds = StackBounds {
            lo: lo + 8,
            hi: lo + 24,
        };
        // SAFETY: the bounds lie inside `words`, which outlives `mem` and is
        // not written while it is used.
        let mem = unsafe { RawMemory::new(bounds) };
        assert_eq!(mem.read_word(lo + 8, 8), Some(0x2222_0000_3333));
        assert_eq!(mem.read_word(lo + 8, 4), Some(0x3333));
        assert_eq!(mem.read_word(lo + 12, 4), Some(0x2222));
        assert_eq!(mem.read_word(lo + 16, 8), Some(u64::MAX));
        assert_eq!(mem.read_word(lo, 8), None, "below lo");
        assert_eq!(mem.read_word(lo + 24, 8), None, "at hi");
        assert_eq!(mem.read_word(lo + 20, 8), None, "straddles hi");
        assert_eq!(mem.read_word(lo + 10, 4), None, "misaligned");
        assert_eq!(mem.read_word(lo + 8, 0), None, "word size 0");
        assert_eq!(mem.read_word(u64::MAX - 3, 4), None);
    }

    #[test]
    fn raw_memory_unwinds_a_chain_in_real_memory() {
        // An x86_64-layout chain in a real buffer, walked through raw reads.
        let mut stack = [0u64; 16];
        let base = stack.as_ptr() as u64;
        let at = |i: usize| base + 8 * i as u64;
        stack[2] = at(6);
        stack[3] = 0x40_1001;
        stack[6] = at(10);
        stack[7] = 0x40_1002;
        stack[10] = 0;
        stack[11] = 0x40_1003;
        // Borrow it (and expose its address) only once it is written.
        let stack = &stack;
        assert_eq!(stack.as_ptr() as u64, base);
        let bounds = StackBounds {
            lo: base,
            hi: at(16),
        };
        // SAFETY: `stack` outlives `mem` and is not written while it is used.
        let mem = unsafe { RawMemory::new(bounds) };
        let regs = Regs {
            pc: 0x40_0100,
            fp: at(2),
            sp: base,
            lr: None,
        };
        let mut out = [0; 8];
        let w = walk_detailed(Arch::X86_64, &regs, bounds, &mem, is_text, &mut out);
        assert_eq!(&out[..w.len], &[0x40_0100, 0x40_1001, 0x40_1002, 0x40_1003]);
        assert_eq!(w.stop, Stop::NotAbove);
    }

    #[test]
    fn stack_bounds_contains_checks_overflow() {
        let b = StackBounds { lo: 16, hi: 32 };
        assert!(b.contains(16, 16));
        assert!(!b.contains(16, 17));
        assert!(!b.contains(8, 8));
        assert!(!b.contains(u64::MAX, 2));
    }
}
