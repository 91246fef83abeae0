//! Thumb (Armv7-M): the `r7` chain.
//!
//! With frame pointers, LLVM's Thumb prologue pushes `{r7, lr}` (or
//! `{r4-r7, lr}`) and points `r7` at the saved `r7` (`mov r7, sp` or
//! `add r7, sp, #12`):
//!
//! ```text
//!   higher addresses
//!   fp[1]   lr: return address into the caller (its Thumb bit set)
//!   fp[0]   caller's r7                         <- r7
//!   ...     saved r4-r6, locals, down to sp
//! ```
//!
//! The walk records `fp[1]` and moves to `fp[0]`, as on AArch64, with
//! 4-byte words. In an exception handler the interrupted code's `r7` is
//! still in `r7` (the hardware frame holds r0-r3, r12, lr, pc, xPSR), so a
//! sampler gives the walk the stacked `pc` and `lr` and the live `r7`.
//!
//! Unlike AArch64's, the walk leaves `lr` out when the innermost record
//! holds it: with frame pointers every Thumb function, leaves too, pushes
//! `{r7, lr}`, so past a prologue `lr` is that record's return address, and
//! the frame it would add twice sits below the cut of the sampler's split
//! (the record belongs to the frame before it). Kept otherwise: in a
//! prologue or an epilogue it is the caller the chain skips.

use super::{FrameLayout, Memory, Stack};

pub(super) const LAYOUT: FrameLayout = FrameLayout { ret: 1, prev_fp: 0 };

/// Whether `lr` is the return address saved in the record at `fp`.
pub(super) fn lr_is_saved<M: Memory>(stack: &Stack<'_, M>, fp: u64, lr: u64) -> bool {
    stack.check_record(fp, LAYOUT).is_ok() && stack.read(fp, LAYOUT.ret) == Some(lr)
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::testing::{walk_image, Image};
    use super::super::{Arch, StackBounds, Stop};

    /// `{caller's r7, lr}` at fp, spelled out independently of `LAYOUT`.
    pub(crate) fn put_frame(img: &mut Image, fp: u64, ret: u64, prev_fp: u64) {
        img.put(fp, prev_fp);
        img.put(fp + 4, ret);
    }

    fn stack() -> (Image, StackBounds) {
        let mut img = Image::new(0x4000, 0x100, 4);
        put_frame(&mut img, 0x4020, 0x40_1001, 0x4050);
        put_frame(&mut img, 0x4050, 0x40_1003, 0x4080);
        put_frame(&mut img, 0x4080, 0x40_1005, 0);
        let bounds = StackBounds {
            lo: 0x4000,
            hi: 0x4100,
        };
        (img, bounds)
    }

    #[test]
    fn lr_saved_in_the_innermost_record_is_not_repeated() {
        let (img, bounds) = stack();
        let (frames, stop) = walk_image(Arch::Thumb, &img, bounds, 0x4020, Some(0x40_1001));
        assert_eq!(frames, [0x40_0100, 0x40_1001, 0x40_1003, 0x40_1005]);
        assert_eq!(stop, Stop::NotAbove);
    }

    #[test]
    fn lr_of_a_prologue_is_the_caller_the_chain_skips() {
        // Before `push {r7, lr}`: r7 is still the caller's record, lr the
        // return into the caller.
        let (img, bounds) = stack();
        let (frames, _) = walk_image(Arch::Thumb, &img, bounds, 0x4020, Some(0x40_1009));
        assert_eq!(
            frames,
            [0x40_0100, 0x40_1009, 0x40_1001, 0x40_1003, 0x40_1005]
        );
    }
}
