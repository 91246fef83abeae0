//! Bridges to other tools' data: Zephyr `perf printbuf` dumps.

pub mod zephyr;
