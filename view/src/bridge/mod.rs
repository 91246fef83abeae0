//! Bridges to other tools' data: Zephyr `perf printbuf` dumps; minitrace and
//! fastrace spans, both ways.

#[cfg(feature = "symbolize")]
pub mod elf;
#[cfg(feature = "symbolize")]
pub mod zephyr;

// The macro both span crates' bridges are written with; first, so that it is
// in scope in the modules below.
#[cfg(any(feature = "minitrace", feature = "fastrace"))]
#[macro_use]
mod span_crate;

#[cfg(feature = "fastrace")]
pub mod fastrace;
#[cfg(feature = "minitrace")]
pub mod minitrace;
#[cfg(any(feature = "minitrace", feature = "fastrace"))]
pub mod spans;
