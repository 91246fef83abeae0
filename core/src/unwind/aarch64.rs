//! AArch64: the `x29` chain of AAPCS64 frame records.
//!
//! gcc's prologue `stp x29, x30, [sp, #-N]!; mov x29, sp` makes `x29` point
//! at a `{caller's x29, x30}` pair, laid out like x86:
//!
//! ```text
//!   higher addresses
//!   fp[1]   saved x30: return address into the caller
//!   fp[0]   caller's x29                      <- x29
//! ```
//!
//! The walk records `fp[1]` and moves to `fp[0]` (Zephyr's `perf_arm64.c`),
//! after the `lr` register as frame 1. With `-mno-omit-leaf-frame-pointer`,
//! leaves get records too, so in any function past its prologue that has not
//! called anything yet `lr` equals `fp[1]` and the caller appears twice (see
//! [`Regs::lr`](super::Regs::lr)).
//!
//! Return addresses signed with pointer authentication (`-mbranch-protection`)
//! carry a PAC in their top bits, fail `is_text` and end the walk there;
//! stripping them is left to a caller that knows the address size.

use super::FrameLayout;

pub(super) const LAYOUT: FrameLayout = FrameLayout { ret: 1, prev_fp: 0 };

#[cfg(test)]
pub(super) mod tests {
    use super::super::testing::{walk_image, Image};
    use super::super::{Arch, StackBounds, Stop};

    /// `{caller's x29, x30}` at fp, spelled out independently of `LAYOUT`.
    pub(crate) fn put_frame(img: &mut Image, fp: u64, ret: u64, prev_fp: u64) {
        img.put(fp, prev_fp);
        img.put(fp + 8, ret);
    }

    fn run(img: &Image, fp: u64, lr: Option<u64>) -> (Vec<u64>, Stop) {
        let bounds = StackBounds {
            lo: 0x4000,
            hi: 0x4100,
        };
        walk_image(Arch::Aarch64, img, bounds, fp, lr)
    }

    fn stack() -> Image {
        let mut img = Image::new(0x4000, 0x100, 8);
        put_frame(&mut img, 0x4020, 0x40_1001, 0x4050);
        put_frame(&mut img, 0x4050, 0x40_1002, 0x4080);
        put_frame(&mut img, 0x4080, 0x40_1003, 0);
        img
    }

    #[test]
    fn lr_then_chain_with_zephyrs_duplicate() {
        // Past the prologue of a function that has not called anything, lr
        // is the saved x30: Zephyr's dumps repeat it, and so does the walk.
        let (frames, stop) = run(&stack(), 0x4020, Some(0x40_1001));
        assert_eq!(
            frames,
            [0x40_0100, 0x40_1001, 0x40_1001, 0x40_1002, 0x40_1003]
        );
        assert_eq!(stop, Stop::NotAbove);
    }

    #[test]
    fn lr_recovers_a_caller_the_chain_skips() {
        // In a prologue, before `mov x29, sp`, x29 is still the caller's:
        // only lr names the caller (0x40_1009).
        let (frames, _) = run(&stack(), 0x4020, Some(0x40_1009));
        assert_eq!(
            frames,
            [0x40_0100, 0x40_1009, 0x40_1001, 0x40_1002, 0x40_1003]
        );
    }

    #[test]
    fn lr_is_recorded_unchecked() {
        // Zephyr records lr as is, even when it is not a text address.
        let (frames, _) = run(&stack(), 0x4020, Some(0));
        assert_eq!(frames[..2], [0x40_0100, 0]);
    }

    #[test]
    fn no_lr_no_frame() {
        let (frames, _) = run(&stack(), 0x4020, None);
        assert_eq!(frames, [0x40_0100, 0x40_1001, 0x40_1002, 0x40_1003]);
    }

    #[test]
    fn pac_signed_return_address_ends_the_walk() {
        let mut img = stack();
        put_frame(&mut img, 0x4050, 0x002a_0000_0040_1002, 0x4080);
        let (frames, stop) = run(&img, 0x4020, Some(0x40_1001));
        assert_eq!(frames, [0x40_0100, 0x40_1001, 0x40_1001]);
        assert_eq!(stop, Stop::NotText);
    }
}
