//! RISC-V (RV32 and RV64): the `s0` chain.
//!
//! With `-fno-omit-frame-pointer`, gcc's prologue saves `ra` and `s0` at the
//! top of the new frame and points `s0` just above them:
//!
//! ```text
//!   higher addresses
//!   ...     caller's frame                   <- s0 (fp)
//!   fp[-1]  ra: return address into the caller
//!   fp[-2]  caller's s0
//!   ...     locals, down to sp
//! ```
//!
//! The walk records `fp[-1]` and moves to `fp[-2]` (Zephyr's `perf_riscv.c`).
//! A leaf, which never clobbers `ra`, saves only `s0`, and at `fp[-1]`
//! (gcc 12 has no `-mno-omit-leaf-frame-pointer` for RISC-V to change that).
//! Like Zephyr, the walk checks the innermost frame for this: a stack address
//! at `fp[-1]` is the caller's saved `s0`, so the chain starts at the
//! caller's record, and the `ra` register, recorded as frame 1, supplies the
//! leaf's own return address.

use super::{FrameLayout, Memory, Stack};

pub(super) const LAYOUT: FrameLayout = FrameLayout {
    ret: -1,
    prev_fp: -2,
};

/// Zephyr's leaf check, applied to the innermost frame only: if `fp[-1]`
/// holds a stack address rather than a return address, the interrupted
/// function is a leaf that saved only its caller's `s0` there, so the chain
/// starts at the caller's record. The leaf's own return address is in `ra`,
/// which the walk has already recorded.
///
/// Stricter than Zephyr in two ways that only matter for garbage: `fp[-1]`
/// is read only when it lies inside the live stack (Zephyr reads it
/// unconditionally), and the saved value must be above `fp` with its record
/// in bounds (a caller's frame cannot be below its callee's).
pub(super) fn skip_leaf_record<M: Memory>(stack: &Stack<'_, M>, fp: u64) -> u64 {
    match stack.read(fp, LAYOUT.ret) {
        Some(saved) if saved > fp && stack.check_record(saved, LAYOUT).is_ok() => saved,
        _ => fp,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::testing::{walk_image, Image};
    use super::super::{Arch, StackBounds, Stop};

    /// `ra` at `fp[-1]`, caller's `s0` at `fp[-2]`, spelled out
    /// independently of `LAYOUT`.
    pub(crate) fn put_frame(img: &mut Image, fp: u64, ret: u64, prev_fp: u64) {
        let w = img.word as u64;
        img.put(fp - w, ret);
        img.put(fp - 2 * w, prev_fp);
    }

    /// What gcc stores for a leaf: only the caller's `s0`, at `fp[-1]`.
    fn put_leaf_frame(img: &mut Image, fp: u64, prev_fp: u64) {
        let w = img.word as u64;
        img.put(fp - w, prev_fp);
    }

    const BOUNDS: StackBounds = StackBounds {
        lo: 0x3000,
        hi: 0x3100,
    };

    fn run(arch: Arch, img: &Image, fp: u64, lr: Option<u64>) -> (Vec<u64>, Stop) {
        let walked = walk_image(arch, img, BOUNDS, fp, lr);
        for addr in img.reads() {
            assert!(BOUNDS.contains(addr, arch.word_size() as u64), "{addr:#x}");
        }
        walked
    }

    /// leaf (fp 0x3030, s0 only) called from c (fp 0x3060), called from b
    /// (fp 0x3090), whose caller saved s0 0.
    fn leaf_stack(word: usize) -> Image {
        let mut img = Image::new(0x3000, 0x100, word);
        put_leaf_frame(&mut img, 0x3030, 0x3060);
        put_frame(&mut img, 0x3060, 0x40_1002, 0x3090);
        put_frame(&mut img, 0x3090, 0x40_1003, 0);
        img
    }

    #[test]
    fn leaf_frame_starts_at_the_callers_record() {
        for arch in [Arch::Riscv32, Arch::Riscv64] {
            let img = leaf_stack(arch.word_size());
            // ra (0x40_1001) is the leaf's return address into c; then c's
            // record gives b, b's gives its caller. No gap, no duplicate.
            let (frames, stop) = run(arch, &img, 0x3030, Some(0x40_1001));
            assert_eq!(
                frames,
                [0x40_0100, 0x40_1001, 0x40_1002, 0x40_1003],
                "{arch:?}"
            );
            assert_eq!(stop, Stop::NotAbove, "{arch:?}");
        }
    }

    #[test]
    fn leaf_without_ra_loses_the_caller() {
        // The trade-off of passing lr: None, documented on `Regs::lr`.
        let img = leaf_stack(8);
        let (frames, _) = run(Arch::Riscv64, &img, 0x3030, None);
        assert_eq!(frames, [0x40_0100, 0x40_1002, 0x40_1003]);
    }

    #[test]
    fn non_leaf_duplicates_ra() {
        // After the prologue of a non-leaf, ra equals the saved fp[-1].
        let mut img = Image::new(0x3000, 0x100, 8);
        put_frame(&mut img, 0x3030, 0x40_1001, 0x3060);
        put_frame(&mut img, 0x3060, 0x40_1002, 0);
        let (frames, _) = run(Arch::Riscv64, &img, 0x3030, Some(0x40_1001));
        assert_eq!(frames, [0x40_0100, 0x40_1001, 0x40_1001, 0x40_1002]);
    }

    #[test]
    fn leaf_check_ignores_a_saved_value_below_fp() {
        // fp[-1] is a stack address but below fp: not a caller's frame. The
        // walk keeps fp and stops at the non-text "return address".
        let mut img = Image::new(0x3000, 0x100, 8);
        put_leaf_frame(&mut img, 0x3060, 0x3030);
        put_frame(&mut img, 0x3030, 0x40_1009, 0x3090);
        let (frames, stop) = run(Arch::Riscv64, &img, 0x3060, Some(0x40_1001));
        assert_eq!((frames, stop), (vec![0x40_0100, 0x40_1001], Stop::NotText));
    }

    #[test]
    fn leaf_check_ignores_a_saved_value_outside_bounds() {
        let mut img = Image::new(0x3000, 0x100, 8);
        put_leaf_frame(&mut img, 0x3060, 0x3200);
        let (frames, stop) = run(Arch::Riscv64, &img, 0x3060, Some(0x40_1001));
        assert_eq!((frames, stop), (vec![0x40_0100, 0x40_1001], Stop::NotText));
    }

    #[test]
    fn leaf_check_applies_to_the_innermost_frame_only() {
        // A stack address at fp[-1] further up is a broken record, not a
        // leaf: the walk stops there instead of skipping ahead.
        let mut img = Image::new(0x3000, 0x100, 8);
        put_frame(&mut img, 0x3030, 0x40_1001, 0x3060);
        put_leaf_frame(&mut img, 0x3060, 0x3090);
        put_frame(&mut img, 0x3090, 0x40_1003, 0);
        let (frames, stop) = run(Arch::Riscv64, &img, 0x3030, Some(0x40_1001));
        assert_eq!(
            (frames, stop),
            (vec![0x40_0100, 0x40_1001, 0x40_1001], Stop::NotText)
        );
    }

    #[test]
    fn outermost_record_just_below_hi_is_walked() {
        // fp may equal `hi`: the record is the two words below it. Zephyr's
        // `fp < hi` test would drop this frame.
        let mut img = Image::new(0x3000, 0x100, 8);
        put_frame(&mut img, 0x30c0, 0x40_1001, 0x3100);
        put_frame(&mut img, 0x3100, 0x40_1002, 0);
        let (frames, stop) = run(Arch::Riscv64, &img, 0x30c0, Some(0x40_1001));
        assert_eq!(frames, [0x40_0100, 0x40_1001, 0x40_1001, 0x40_1002]);
        assert_eq!(stop, Stop::NotAbove);
    }
}
