//! The clock on Cortex-M boards: a 32-bit counter the firmware names at
//! run time (DWT `CYCCNT`, SysTick's current value, a timer's count),
//! counting up or down, extended to 63 bits here.
//!
//! The extension keeps the counter's wraps in one word, `HI`, whose top bit
//! is a copy of the counter's top bit as last seen: a read whose counter top
//! bit differs from it has crossed a half period, and moves `HI` on (by a
//! wrap when the counter's top bit went from 1 to 0). Every read that sees
//! the same crossing writes the same value, so an interrupt that lands
//! between the two loads and updates `HI` itself changes nothing: no lock,
//! no masking, safe to re-enter at any priority. It needs one read per half
//! period (2^31 ticks: 86 s at 25 MHz, 12.8 s at 168 MHz), which the
//! runtime's own polling and every traced call provide.

use core::sync::atomic::{compiler_fence, AtomicPtr, AtomicU32, Ordering::*};

/// What an unconfigured clock reads: 0, always.
static ZERO: u32 = 0;

/// The counter and its extension.
#[repr(C)]
pub struct Counter32 {
    /// The counter's wraps (bits 0..31) and the top bit it had when last
    /// seen (bit 31).
    hi: AtomicU32,
    /// The counter's address.
    addr: AtomicPtr<u32>,
    /// XORed into each reading: `!0` for a counter that counts down (its
    /// complement counts up), else 0.
    xor: AtomicU32,
}

// The board probe's assembly reads the three words with one `ldm`: the
// extension, the counter's address, its direction.
const _: () = assert!(
    core::mem::offset_of!(Counter32, hi) == 0
        && core::mem::offset_of!(Counter32, addr) == 4
        && core::mem::offset_of!(Counter32, xor) == 8
        || cfg!(not(target_arch = "arm"))
);

impl Counter32 {
    /// An unconfigured clock: it reads 0.
    pub const fn unconfigured() -> Counter32 {
        Counter32 {
            hi: AtomicU32::new(0),
            addr: AtomicPtr::new(core::ptr::addr_of!(ZERO) as *mut u32),
            xor: AtomicU32::new(0),
        }
    }
}

/// The probe's clock, where the board probe does not keep it.
#[cfg(not(all(feature = "irq-mask", not(test))))]
static COUNTER: Counter32 = Counter32::unconfigured();

#[cfg(all(feature = "irq-mask", not(test)))]
extern "C" {
    /// The probe's clock on a board (`irq-mask`): the first field of the
    /// board probe's state, which names it so (`probe::board::cortex_m`),
    /// so that the probe's entry and exit, in assembly, reach the clock and
    /// the state from one address. By name, not by path: the state's type
    /// holds a [`Counter32`], so a path to it from here would make the two
    /// files import each other.
    static __fgtrace_clock: Counter32;
}

/// The probe's clock.
#[inline(always)]
fn counter() -> &'static Counter32 {
    #[cfg(all(feature = "irq-mask", not(test)))]
    // SAFETY: a `Counter32` for as long as the firmware runs (the board
    // probe's state, a static).
    unsafe {
        &*core::ptr::addr_of!(__fgtrace_clock)
    }
    #[cfg(not(all(feature = "irq-mask", not(test))))]
    {
        &COUNTER
    }
}

/// Makes the probe's clock the 32-bit counter at `addr`, counting down if
/// `down` (the runtime's `init`, before anything records).
///
/// # Safety
/// `addr` is a readable, aligned 32-bit register (or word) for as long as
/// the firmware runs.
pub unsafe fn set_counter(addr: *const u32, down: bool) {
    let c = counter();
    c.addr.store(addr as *mut u32, Relaxed);
    c.xor.store(if down { !0 } else { 0 }, Relaxed);
    c.hi.store(0, Relaxed);
    // Sets the top-bit copy from the counter as it reads now.
    ticks();
}

/// The raw counter, counting up (the complement of a down-counter).
#[inline(always)]
pub fn raw() -> u32 {
    let c = counter();
    // SAFETY: `set_counter`'s promise, or the static `ZERO`.
    unsafe { core::ptr::read_volatile(c.addr.load(Relaxed)) ^ c.xor.load(Relaxed) }
}

/// The counter extended to 63 bits.
#[inline(always)]
pub fn ticks() -> u64 {
    let hi = counter().hi.load(Relaxed);
    // `HI` before the counter: a later counter with an earlier `HI` is what
    // the crossing test corrects, never the other way round.
    compiler_fence(SeqCst);
    let lo = raw();
    let hi = if ((hi ^ lo) as i32) < 0 {
        cross(hi)
    } else {
        hi
    };
    ((hi & 0x7fff_ffff) as u64) << 32 | lo as u64
}

/// A half period crossed: the top-bit copy flips, and a crossing from 1 to
/// 0 is a wrap.
#[cold]
#[inline(never)]
fn cross(hi: u32) -> u32 {
    let n = (hi ^ 0x8000_0000).wrapping_add(hi >> 31);
    counter().hi.store(n, Relaxed);
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;

    static REG: AtomicU32 = AtomicU32::new(0);

    fn at(v: u32) -> u64 {
        REG.store(v, Relaxed);
        ticks()
    }

    /// The extension, on a counter in memory: up through two wraps (read
    /// at least once per half period), then down, complemented.
    #[test]
    fn extends_a_32_bit_counter_across_wraps() {
        // SAFETY: a static word.
        unsafe { set_counter(REG.as_ptr(), false) };
        let mut want = Vec::new();
        let mut got = Vec::new();
        for (k, v) in [
            0u32,
            0x7fff_fff0,
            0x8000_0001,
            0xffff_ffff,
            5,
            0x9000_0000,
            3,
        ]
        .into_iter()
        .enumerate()
        {
            let wraps = match k {
                0..=3 => 0u64,
                4 | 5 => 1,
                _ => 2,
            };
            want.push(wraps << 32 | v as u64);
            got.push(at(v));
        }
        assert_eq!(got, want);
        // A down-counter from 0xffff_ffff reads 0 and counts up from there.
        REG.store(0xffff_ffff, Relaxed);
        // SAFETY: as above.
        unsafe { set_counter(REG.as_ptr(), true) };
        assert_eq!(at(0xffff_ffff), 0);
        assert_eq!(at(0x7fff_ffff), 0x8000_0000);
        assert_eq!(at(0xffff_fffe), 1 << 32 | 1);
    }
}
