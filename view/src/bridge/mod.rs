//! Bridges to other tools' data: Zephyr `perf printbuf` dumps; minitrace and
//! fastrace spans, both ways.

#[cfg(feature = "symbolize")]
pub mod elf;
#[cfg(feature = "symbolize")]
pub mod zephyr;

#[cfg(feature = "fastrace")]
pub mod fastrace;
#[cfg(feature = "minitrace")]
pub mod minitrace;
#[cfg(any(feature = "minitrace", feature = "fastrace"))]
pub mod spans;
