//! fgtrace's symbols: what names an address in a traced binary.
//!
//! [`elf`] reads an ELF file's function symbols (and, with DWARF, which
//! functions were inlined where); [`symbolize`] turns a traced process's
//! sampled addresses into function names, source lines and inlined frames
//! through the mappings the trace recorded. The views (`fgtrace-view`) and
//! the importers (`fgtrace-import`) both use it; it uses neither.

#![warn(missing_docs)]

pub mod elf;
pub mod symbolize;
