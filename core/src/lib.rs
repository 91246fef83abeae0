//! fgtrace's recording core: everything a `#[traced]` call touches, and
//! nothing else.
//!
//! * [`alloc`]: allocation counts per call, for a counting global allocator.
//! * [`clock`]: the raw tick counter a probe reads (`rdtsc`, `rdtime`,
//!   `cntvct_el0`).
//! * [`site`]: the static descriptor of an instrumented function, its cached
//!   filter decision, and the lock-free registry that gives it an id.
//! * [`control_word`]: the one word every probe loads first: session generation,
//!   session on, and the number of running captures.
//! * [`probe`]: the per-thread (per-hart) state, shadow stack, entry/exit
//!   guard and record writer: the hot path. What it cannot do without
//!   allocating or locking it asks of [`probe::Hooks`] that the runtime
//!   installs, on cold paths only.
//! * [`record`]: the fixed-size 16-byte call record.
//! * [`unwind`]: frame-pointer unwinders, pure functions over memory reads.
//! * [`values`]: the values `#[traced(values(..))]` records beside a call
//!   (the types it accepts and their encoding); their guard is in [`probe`].
//!
//! `no_std`, no dependencies but `atomic-waker` with `std`. The `std`
//! feature keeps the per-thread state in a `thread_local!` and lets traced
//! futures see their wakes; without it the platform supplies the state per
//! hart. The
//! layers above (the `fgtrace` runtime on Linux, a board's firmware support)
//! own buffers, sessions and sampling.
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![warn(missing_docs, unreachable_pub)]

pub mod alloc;
pub mod clock;
pub mod control_word;
pub mod counted;
pub mod probe;
pub mod record;
pub mod site;
pub mod unwind;
pub mod values;
