//! Bridges to other tools' data: Zephyr `perf printbuf` dumps; minitrace and
//! fastrace spans, both ways.

/// ELF function symbols (the `fgtrace-symbols` crate's, here at the path the
/// Zephyr bridge has always named them by).
pub use fgtrace_symbols::elf;
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
