//! x86 and x86_64: the `ebp`/`rbp` chain.
//!
//! gcc's prologue `push %rbp; mov %rsp, %rbp` leaves, just above the frame
//! pointer, the return address that `call` pushed:
//!
//! ```text
//!   higher addresses
//!   fp[1]   return address into the caller
//!   fp[0]   caller's rbp                      <- rbp
//!   ...     locals, down to rsp
//! ```
//!
//! The walk records `fp[1]` and moves to `fp[0]` (Zephyr's `perf_x86.c` and
//! `perf_x86_64.c`). There is no link register, so when rbp still points at
//! the caller's record the immediate caller is missing from the sample: in a
//! prologue before `mov %rsp, %rbp`, after the epilogue's `pop %rbp`, and in
//! any leaf that gcc builds without a frame (a leaf that needs no stack gets
//! none even with `-mno-omit-leaf-frame-pointer`). Zephyr's x86 dumps have
//! the same gaps; nothing in the registers recovers them.

use super::FrameLayout;

pub(super) const LAYOUT: FrameLayout = FrameLayout { ret: 1, prev_fp: 0 };

#[cfg(test)]
pub(super) mod tests {
    use super::super::testing::{walk_image, Image};
    use super::super::{Arch, StackBounds, Stop};

    /// `{saved fp, return address}` at fp, spelled out independently of
    /// `LAYOUT`.
    pub(crate) fn put_frame(img: &mut Image, fp: u64, ret: u64, prev_fp: u64) {
        let w = img.word as u64;
        img.put(fp, prev_fp);
        img.put(fp + w, ret);
    }

    /// Walks `img`, a stack [0x2000, 0x2040) with sp at its bottom, from `fp`.
    fn walk_from(arch: Arch, img: &Image, fp: u64, lr: Option<u64>) -> (Vec<u64>, Stop) {
        let bounds = StackBounds {
            lo: 0x2000,
            hi: 0x2040,
        };
        walk_image(arch, img, bounds, fp, lr)
    }

    #[test]
    fn i686_chain_uses_four_byte_words() {
        // ebp chain 0x2010 -> 0x2020 -> 0x2038 packed in 4-byte slots; read
        // as 8-byte words the same bytes would give nonsense.
        let mut img = Image::new(0x2000, 0x40, 4);
        put_frame(&mut img, 0x2010, 0x40_1001, 0x2020);
        put_frame(&mut img, 0x2020, 0x40_1002, 0x2038);
        put_frame(&mut img, 0x2038, 0x40_1003, 0);
        let (frames, stop) = walk_from(Arch::X86, &img, 0x2010, None);
        assert_eq!(frames, [0x40_0100, 0x40_1001, 0x40_1002, 0x40_1003]);
        assert_eq!(stop, Stop::NotAbove);
    }

    #[test]
    fn link_register_is_ignored() {
        // x86 has no link register: a value passed anyway must not appear.
        for arch in [Arch::X86, Arch::X86_64] {
            let mut img = Image::new(0x2000, 0x40, arch.word_size());
            put_frame(&mut img, 0x2010, 0x40_1001, 0);
            let (frames, _) = walk_from(arch, &img, 0x2010, Some(0x40_0200));
            assert_eq!(frames, [0x40_0100, 0x40_1001], "{arch:?}");
        }
    }

    #[test]
    fn record_at_the_very_top_is_walked() {
        // The outermost record may end exactly at `hi`.
        let mut img = Image::new(0x2000, 0x40, 8);
        put_frame(&mut img, 0x2030, 0x40_1001, 0);
        let (frames, _) = walk_from(Arch::X86_64, &img, 0x2030, None);
        assert_eq!(frames, [0x40_0100, 0x40_1001]);
    }
}
