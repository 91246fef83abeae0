//! Zephyr `perf printbuf` import.
