//! Sampled addresses to function names, source lines and inlined frames, from
//! the binaries the traced process had mapped ([`TraceMeta::mappings`]).
//!
//! A process address is turned into the file's own (link-time) address the
//! way perf does it: into a file offset through the mapping, then into a
//! virtual address through the `PT_LOAD` segment holding that offset. That
//! address is looked up in the file's DWARF with `addr2line` (every inlined
//! function, innermost first, with file:line), or in its symbol table
//! (`.symtab`, else `.dynsym`) when there is no DWARF, or in a separate debug
//! file found by build id under `/usr/lib/debug/.build-id/`.
//!
//! Symbolizing happens after the fact, possibly on another day: a binary
//! that is gone or was rebuilt (its GNU build id differs from the recorded
//! one) gives `[unknown]` frames and one warning naming it, never a wrong
//! name or a panic.
//!
//! [`TraceMeta::mappings`]: fgtrace_trace::TraceMeta::mappings

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::elf::{check_compressed_sections, FuncSymbols};
use fgtrace_trace::Mapping;

/// The name of a frame nothing could name.
pub const UNKNOWN: &str = "[unknown]";

/// One resolved frame. An address yields several when functions were
/// inlined there: innermost first, the last one (`inlined == false`) is the
/// function the machine code belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedFrame {
    /// Demangled function name (Rust without the hash), `[unknown]`, or a
    /// pseudo-mapping such as `[vdso]`.
    pub name: String,
    /// The source file, where the line tables say.
    pub file: Option<String>,
    /// The source line, where the line tables say.
    pub line: Option<u32>,
    /// This function was inlined into the next frame.
    pub inlined: bool,
}

impl ResolvedFrame {
    fn named(name: impl Into<String>) -> ResolvedFrame {
        ResolvedFrame {
            name: name.into(),
            file: None,
            line: None,
            inlined: false,
        }
    }

    /// Nothing named this address.
    pub fn is_unknown(&self) -> bool {
        self.name.starts_with(UNKNOWN)
    }
}

/// Resolves addresses of one traced process against its mapped files,
/// caching each file's tables and each address's answer.
pub struct Symbolizer {
    /// Sorted by start.
    maps: Vec<Mapping>,
    /// Per path; `None` once the file was found unusable (and warned about).
    files: HashMap<String, Option<Binary>>,
    cache: HashMap<(u64, bool), Box<[ResolvedFrame]>>,
    records: HashMap<(u64, bool), Option<bool>>,
    warnings: Vec<String>,
    verbose: bool,
    debug_dirs: Vec<PathBuf>,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("mappings", &self.maps.len())
            .field("files", &self.files.len())
            .field("cached", &self.cache.len())
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl Symbolizer {
    /// A symbolizer for a process with these executable mappings. Files are
    /// opened lazily, on the first address that falls in them.
    pub fn new(mappings: &[Mapping]) -> Symbolizer {
        let mut maps = mappings.to_vec();
        maps.sort_by_key(|m| m.start);
        Symbolizer {
            maps,
            files: HashMap::new(),
            cache: HashMap::new(),
            records: HashMap::new(),
            warnings: Vec::new(),
            verbose: false,
            debug_dirs: vec![PathBuf::from("/usr/lib/debug")],
        }
    }

    /// Name unknown frames `[unknown] <path>+0x<file offset>` (or
    /// `[unknown] 0x<address>` outside every mapping) instead of `[unknown]`,
    /// to tell them apart when hunting for missing symbols.
    pub fn verbose(mut self, yes: bool) -> Symbolizer {
        self.verbose = yes;
        self.cache.clear();
        self
    }

    /// Where to look for separate debug files by build id
    /// (`<dir>/.build-id/ab/cdef....debug`); `/usr/lib/debug` by default.
    pub fn debug_dirs(mut self, dirs: Vec<PathBuf>) -> Symbolizer {
        self.debug_dirs = dirs;
        self.files.clear();
        self.cache.clear();
        self.records.clear();
        self
    }

    /// The frames at `addr`, innermost first. `is_return_address`: `addr` was
    /// found on the stack (every frame of a sample but the first), so the call
    /// is the instruction before it: look up `addr - 1`.
    pub fn frames(&mut self, addr: u64, is_return_address: bool) -> &[ResolvedFrame] {
        let key = (addr, is_return_address);
        if !self.cache.contains_key(&key) {
            let frames = self.resolve(addr, is_return_address).into_boxed_slice();
            self.cache.insert(key, frames);
        }
        &self.cache[&key]
    }

    /// A whole sampled stack (`Sample::frames`: the interrupted PC, then
    /// return addresses), inlined frames expanded, innermost first.
    pub fn stack(&mut self, addrs: &[u64]) -> Vec<ResolvedFrame> {
        let mut out = Vec::with_capacity(addrs.len());
        for (i, &a) in addrs.iter().enumerate() {
            out.extend_from_slice(self.frames(a, i > 0));
        }
        out
    }

    /// The mapping holding `addr`, with its index in address order.
    pub fn mapping(&self, addr: u64) -> Option<(usize, &Mapping)> {
        let i = self
            .maps
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = &self.maps[i];
        (addr < m.end).then_some((i, m))
    }

    /// The mappings, sorted by start address (indexes of [`Self::mapping`]).
    pub fn mappings(&self) -> &[Mapping] {
        &self.maps
    }

    /// One line per file that could not be used (gone, rebuilt, not ELF).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn unknown(&self, at: Option<(&str, u64)>, addr: u64) -> Vec<ResolvedFrame> {
        if !self.verbose {
            return vec![ResolvedFrame::named(UNKNOWN)];
        }
        vec![ResolvedFrame::named(match at {
            Some((path, off)) => format!("{UNKNOWN} {path}+{off:#x}"),
            None => format!("{UNKNOWN} {addr:#x}"),
        })]
    }

    fn resolve(&mut self, addr: u64, is_return_address: bool) -> Vec<ResolvedFrame> {
        let probe = if is_return_address {
            addr.saturating_sub(1)
        } else {
            addr
        };
        let Some((_, m)) = self.mapping(probe) else {
            return self.unknown(None, addr);
        };
        if m.path.starts_with('[') {
            return vec![ResolvedFrame::named(m.path.clone())];
        }
        // `probe >= m.start` (it is in the mapping); the offset comes from
        // the trace file and may be anything.
        let Some(off) = (probe - m.start).checked_add(m.offset) else {
            return self.unknown(None, addr);
        };
        let path = m.path.clone();
        let build_id = m.build_id.clone();
        self.open_file(&path, build_id.as_deref());
        let frames = match &self.files[&path] {
            Some(bin) => bin.vaddr(off).map(|va| bin.lookup(va)).unwrap_or_default(),
            None => Vec::new(),
        };
        if frames.is_empty() {
            return self.unknown(Some((&path, off)), addr);
        }
        frames
    }

    /// Opens `path` once (a file that cannot be used is warned about once).
    fn open_file(&mut self, path: &str, build_id: Option<&str>) {
        if !self.files.contains_key(path) {
            let bin = match Binary::open(path, build_id, &self.debug_dirs) {
                Ok(b) => {
                    if let Some(why) = &b.dwarf_refused {
                        self.warnings.push(format!(
                            "{path}: its DWARF is not read ({why}): names come from the symbol table, without lines or inlined frames"
                        ));
                    }
                    Some(b)
                }
                Err(why) => {
                    self.warnings
                        .push(format!("{path}: {why}: its frames are shown as {UNKNOWN}"));
                    None
                }
            };
            self.files.insert(path.to_string(), bin);
        }
    }

    /// The traced program's own file among the mappings: the one named like
    /// `program` (`argv[0]`), else the lowest-addressed file that is not a
    /// shared library (`.so` in its name) or a pseudo-mapping (`[vdso]`).
    pub fn program_file(&self, program: &str) -> Option<&str> {
        let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
        let files = || self.maps.iter().filter(|m| !m.path.starts_with('['));
        let want = base(program);
        files()
            .find(|m| !want.is_empty() && base(&m.path) == want)
            .or_else(|| files().find(|m| !base(&m.path).contains(".so")))
            .map(|m| m.path.as_str())
    }

    /// Whether the mapped file `path` has DWARF line tables this symbolizer
    /// reads (its own or a separate debug file's): without them a sampled
    /// address has no inlined frames, so a traced function inlined into its
    /// caller has no frame of its own to join a sample to. `None`: `path` is
    /// not a mapping, or the file cannot be used (it is warned about).
    pub fn debug_lines(&mut self, path: &str) -> Option<bool> {
        let build_id = self.maps.iter().find(|m| m.path == path)?.build_id.clone();
        self.open_file(path, build_id.as_deref());
        self.files[path].as_ref().map(|b| b.debug_lines)
    }

    /// Whether the mapped file `path` keeps frame pointers in most of its
    /// functions (from its `.eh_frame`): without them a frame-pointer walk
    /// skips functions, so open traced calls may have no frame in a sampled
    /// stack. `None`: not a mapping, not readable, no `.eh_frame`, or not
    /// x86-64.
    pub fn frame_pointers(&mut self, path: &str) -> Option<bool> {
        let build_id = self.maps.iter().find(|m| m.path == path)?.build_id.clone();
        self.open_file(path, build_id.as_deref());
        self.files[path].as_ref()?.cfi.as_ref()?.frame_pointers()
    }
}

impl Symbolizer {
    /// Whether the code at `addr` is fgtrace's own probe (inlined into a
    /// traced function or called from it): the traced call there is being
    /// entered or left.
    pub fn in_probe(&mut self, addr: u64, is_return_address: bool) -> bool {
        Symbolizer::frames(self, addr, is_return_address)
            .iter()
            .any(is_probe_frame)
    }
}

/// fgtrace's own probe (`fgtrace_core::probe`), by name or, for inlined
/// frames named without their path, by source file.
fn is_probe_frame(f: &ResolvedFrame) -> bool {
    if f.name.contains("fgtrace_core::probe::") {
        return true;
    }
    let Some(file) = f.file.as_deref() else {
        return false;
    };
    // `<crate dir>/src/probe.rs`, the crate dir this workspace's `core` or a
    // registry's `fgtrace-core-<version>`.
    let file = file.replace('\\', "/");
    let mut parts = file.rsplit('/');
    let (Some("probe.rs"), Some("src"), Some(dir)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    dir == "core" || dir.starts_with("fgtrace-core")
}

impl Symbolizer {
    /// Whether the function at `addr` had its frame record set up there (a
    /// return address: at the call before it), from the file's call-frame
    /// information: the rule for the canonical frame address is the frame
    /// pointer (`Some(true)`) or the stack pointer (`Some(false)`: no frame
    /// record, or not yet / no longer). `None` where the file has no
    /// `.eh_frame` entry for it, or the architecture is not x86-64.
    pub fn frame_record(&mut self, addr: u64, is_return_address: bool) -> Option<bool> {
        let key = (addr, is_return_address);
        if let Some(&known) = self.records.get(&key) {
            return known;
        }
        // Opens the file (and resolves the names) if that has not happened.
        self.frames(addr, is_return_address);
        let probe = if is_return_address {
            addr.saturating_sub(1)
        } else {
            addr
        };
        let known = self.mapping(probe).and_then(|(_, m)| {
            let off = (probe - m.start).checked_add(m.offset)?;
            let bin = self.files.get(&m.path)?.as_ref()?;
            bin.cfi.as_ref()?.frame_record(bin.vaddr(off)?)
        });
        self.records.insert(key, known);
        known
    }
}

/// `PT_LOAD`: file bytes `[offset, offset + size)` are at `vaddr`.
#[derive(Clone, Copy, Debug)]
struct Load {
    offset: u64,
    size: u64,
    vaddr: u64,
}

/// What one mapped file contributes: its layout, symbols and DWARF.
struct Binary {
    loads: Vec<Load>,
    symbols: FuncSymbols,
    dwarf: Option<addr2line::Loader>,
    /// Why its DWARF was not read, where that is worth a warning.
    dwarf_refused: Option<String>,
    /// Its call-frame information, where the frame-pointer walk needs it.
    cfi: Option<Cfi>,
    /// Its DWARF (in the file or a separate debug file) is read and has line
    /// tables: what inlined frames and source lines come from.
    debug_lines: bool,
}

/// A file's `.eh_frame` (and `.eh_frame_hdr`, its sorted index), x86-64 only:
/// enough to say where a function has its frame record.
struct Cfi {
    eh_frame: Vec<u8>,
    hdr: Option<Vec<u8>>,
    bases: addr2line::gimli::BaseAddresses,
}

impl Cfi {
    /// Sections larger than the file (a damaged or hostile header) are not read.
    fn read<'d, R: object::ReadRef<'d>>(obj: &object::File<'d, R>, file_len: u64) -> Option<Cfi> {
        use object::ObjectSection;
        if obj.architecture() != object::Architecture::X86_64 {
            return None;
        }
        let bytes = |s: &object::Section<'d, '_, R>| -> Option<Vec<u8>> {
            let (_, size) = s.file_range()?;
            if size > file_len {
                return None;
            }
            s.data().ok().map(<[u8]>::to_vec)
        };
        let eh = obj.section_by_name(".eh_frame")?;
        let mut bases = addr2line::gimli::BaseAddresses::default().set_eh_frame(eh.address());
        if let Some(text) = obj.section_by_name(".text") {
            bases = bases.set_text(text.address());
        }
        let hdr = obj.section_by_name(".eh_frame_hdr").and_then(|h| {
            bases = bases.clone().set_eh_frame_hdr(h.address());
            bytes(&h)
        });
        Some(Cfi {
            eh_frame: bytes(&eh)?,
            hdr,
            bases,
        })
    }

    /// Whether the file's code keeps frame pointers: of (up to 4,096 of)
    /// its functions, more than half have their frame record set up at
    /// their middle instruction (`-C force-frame-pointers=yes`, or a C
    /// compiler's `-fno-omit-frame-pointer`). `None`: no function to tell.
    fn frame_pointers(&self) -> Option<bool> {
        use addr2line::gimli::{CieOrFde, EhFrame, LittleEndian, UnwindSection};
        let eh = EhFrame::new(&self.eh_frame, LittleEndian);
        let mut entries = eh.entries(&self.bases);
        let (mut with, mut total) = (0u32, 0u32);
        while let Ok(Some(entry)) = entries.next() {
            let CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
                continue;
            };
            if fde.len() < 8 {
                continue;
            }
            match self.frame_record(fde.initial_address() + fde.len() / 2) {
                Some(true) => with += 1,
                Some(false) => {}
                None => continue,
            }
            total += 1;
            if total == 4096 {
                break;
            }
        }
        (total > 0).then_some(with * 2 > total)
    }

    /// See [`Symbolizer::frame_record`]; `va` is a link-time address.
    fn frame_record(&self, va: u64) -> Option<bool> {
        use addr2line::gimli::{
            CfaRule, EhFrame, EhFrameHdr, LittleEndian, UnwindContext, UnwindSection, X86_64,
        };
        let eh = EhFrame::new(&self.eh_frame, LittleEndian);
        let mut ctx = UnwindContext::new();
        // The sorted index when there is one (a header that does not parse
        // gives no answer); otherwise a scan of `.eh_frame`.
        let parsed = match &self.hdr {
            Some(hdr) => Some(
                EhFrameHdr::new(hdr, LittleEndian)
                    .parse(&self.bases, 8)
                    .ok()?,
            ),
            None => None,
        };
        let row = match parsed.as_ref().and_then(|p| p.table()) {
            Some(t) => {
                t.unwind_info_for_address(&eh, &self.bases, &mut ctx, va, EhFrame::cie_from_offset)
            }
            None => eh.unwind_info_for_address(&self.bases, &mut ctx, va, EhFrame::cie_from_offset),
        }
        .ok()?;
        match row.cfa() {
            CfaRule::RegisterAndOffset { register, .. } if *register == X86_64::RBP => Some(true),
            CfaRule::RegisterAndOffset { register, .. } if *register == X86_64::RSP => Some(false),
            _ => None,
        }
    }
}

impl Binary {
    /// Reads the file's segments, build id and symbol table (pieces of the
    /// file, not all of it) and indexes its DWARF. `Err` is the reason to warn.
    fn open(path: &str, want_id: Option<&str>, debug_dirs: &[PathBuf]) -> Result<Binary, String> {
        let f = open_regular(Path::new(path))?;
        let file_len = f.metadata().map_or(0, |m| m.len());
        let data = object::ReadCache::new(f);
        let obj =
            object::File::parse(&data).map_err(|e| format!("not a readable ELF file ({e})"))?;
        let have_id = obj.build_id().ok().flatten().map(hex);
        if let Some(want) = want_id {
            match &have_id {
                Some(have) if have == want => {}
                Some(have) => {
                    return Err(format!(
                        "build id {have} differs from the traced {want} (rebuilt since the trace was taken?)"
                    ))
                }
                None => return Err(format!("has no build id, the traced file had {want} (replaced?)")),
            }
        }
        let loads = obj
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                Load {
                    offset,
                    size,
                    vaddr: s.address(),
                }
            })
            .collect();

        let mut entries = functions(obj.symbols());
        if entries.is_empty() {
            entries = functions(obj.dynamic_symbols());
        }

        let has_dwarf = obj.section_by_name(".debug_info").is_some();
        let debug_file = if has_dwarf {
            Some(PathBuf::from(path))
        } else {
            have_id
                .as_deref()
                .and_then(|id| separate_debug_file(id, debug_dirs))
        };
        // A separate debug file keeps the full symbol table a stripped binary lost.
        if let (false, Some(dbg)) = (has_dwarf, &debug_file) {
            if let Some(more) = debug_symbols(dbg) {
                if !more.is_empty() {
                    entries = more;
                }
            }
        }
        // DWARF that cannot be read still leaves the symbol table: no warning.
        // `Loader` opens the file again by path: check it is still a regular file.
        // A corrupt compression header is named, though: the symbol table
        // alone gives no lines and no inlined frames.
        let mut dwarf_refused = None;
        let dwarf = debug_file
            .filter(|p| open_regular(p).is_ok())
            .and_then(|p| match check_compressed_sections(&p) {
                Ok(()) => addr2line::Loader::new(p).ok(),
                Err(why) => {
                    dwarf_refused = Some(if p == Path::new(path) {
                        why
                    } else {
                        format!("{}: {why}", p.display())
                    });
                    None
                }
            });
        // A separate debug file found by build id is a distribution's full
        // debug info; the file's own DWARF counts only with its line tables
        // (`.debug_info` alone can be the standard library's, without them).
        let debug_lines =
            dwarf.is_some() && (!has_dwarf || obj.section_by_name(".debug_line").is_some());
        let symbols = FuncSymbols::from_table(entries.iter().map(|(a, s, n)| (*a, *s, n.as_str())));
        let cfi = Cfi::read(&obj, file_len);
        Ok(Binary {
            loads,
            symbols,
            dwarf,
            dwarf_refused,
            cfi,
            debug_lines,
        })
    }

    /// File offset to link-time virtual address, through the `PT_LOAD` holding it.
    fn vaddr(&self, off: u64) -> Option<u64> {
        let l = self
            .loads
            .iter()
            .find(|l| off >= l.offset && off - l.offset < l.size)?;
        (off - l.offset).checked_add(l.vaddr)
    }

    fn lookup(&self, va: u64) -> Vec<ResolvedFrame> {
        // (raw DWARF name, frame): names are picked once the outermost is known.
        let mut found: Vec<(Option<String>, ResolvedFrame)> = Vec::new();
        // addr2line computes `va + 1` (and panics on overflow in debug
        // builds); no code can start at the last address anyway.
        let dwarf = self.dwarf.as_ref().filter(|_| va < u64::MAX);
        if let Some(Ok(mut it)) = dwarf.map(|d| d.find_frames(va)) {
            while let Ok(Some(f)) = it.next() {
                let raw =
                    (f.function.as_ref()).and_then(|n| n.raw_name().ok().map(|n| n.into_owned()));
                let (file, line) = match &f.location {
                    Some(l) => (l.file.map(str::to_owned), l.line),
                    None => (None, None),
                };
                found.push((
                    raw,
                    ResolvedFrame {
                        name: String::new(),
                        file,
                        line,
                        inlined: true,
                    },
                ));
            }
        }
        let symbol = || self.symbols.lookup(va).map(demangle);
        let last = found.len().saturating_sub(1);
        let mut out: Vec<ResolvedFrame> = Vec::with_capacity(found.len());
        for (i, (raw, mut f)) in found.into_iter().enumerate() {
            f.inlined = i < last;
            f.name = pick_name(raw.as_deref(), i == last, symbol);
            out.push(f);
        }
        if let Some(f) = out.first_mut() {
            if f.line.is_none() {
                self.nearest_line(va, f);
            }
        }
        if out.is_empty() {
            if let Some(name) = symbol() {
                let loc = dwarf.and_then(|d| d.find_location(va).ok().flatten());
                let mut f = ResolvedFrame {
                    name,
                    file: loc.as_ref().and_then(|l| l.file.map(str::to_owned)),
                    line: loc.and_then(|l| l.line),
                    inlined: false,
                };
                if f.line.is_none() {
                    self.nearest_line(va, &mut f);
                }
                out.push(f);
            }
        }
        out
    }

    /// A line-table row with line 0 (code the compiler attributes to no line,
    /// whose file name means nothing either): the nearest row before `va` in
    /// the same function that has a real line, as `addr2line` and `perf` show.
    fn nearest_line(&self, va: u64, f: &mut ResolvedFrame) {
        let (Some(dwarf), Some(start)) = (&self.dwarf, self.symbols.segment_start(va)) else {
            return;
        };
        if va == u64::MAX {
            return; // See `lookup`.
        }
        let Ok(rows) = dwarf.find_location_range(start, va) else {
            return;
        };
        // Rows come in address order: the last one with a line is the nearest.
        if let Some(loc) = rows.filter(|(_, _, l)| l.line.is_some()).last() {
            f.file = loc.2.file.map(str::to_owned);
            f.line = loc.2.line;
        }
    }
}

/// The name of a DWARF frame. A mangled (linkage) name is complete. A plain
/// `DW_AT_name` is not: Rust's `line-tables-only` debug info (the release
/// profile's usual setting) names `busy` for `app::busy` and
/// `{closure#0}` for closures, so the function that owns the code takes the
/// symbol table's name when there is one. Inlined frames have only DWARF.
fn pick_name(
    raw: Option<&str>,
    outermost: bool,
    symbol: impl FnOnce() -> Option<String>,
) -> String {
    match raw {
        Some(r) if is_mangled(r) => demangle(r),
        Some(r) if !outermost => r.to_owned(),
        _ => symbol()
            .or_else(|| raw.map(str::to_owned))
            .unwrap_or_else(|| UNKNOWN.to_owned()),
    }
}

fn is_mangled(name: &str) -> bool {
    name.starts_with("_Z") || name.starts_with("_R") || name.starts_with("__Z")
}

/// `<dir>/.build-id/ab/cdef...debug`, the layout distributions ship debug info in.
fn separate_debug_file(build_id: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    if build_id.len() < 3 {
        return None;
    }
    let (head, tail) = build_id.split_at(2);
    dirs.iter()
        .map(|d| d.join(".build-id").join(head).join(format!("{tail}.debug")))
        .find(|p| p.is_file())
}

/// Opens `path` for reading only if it is a regular file: a path recorded in
/// a trace may name a FIFO, a terminal or a device (`/dev/stdin`), which
/// would block or never end. Checked before opening, and again on the open
/// file (opened non-blocking, so a FIFO swapped in between cannot hang).
pub(crate) fn open_regular(path: &Path) -> Result<File, String> {
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || "not a regular file".to_owned();
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot open ({e})"))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    open.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let f = open.open(path).map_err(|e| format!("cannot open ({e})"))?;
    let meta = f.metadata().map_err(|e| format!("cannot open ({e})"))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    Ok(f)
}

fn debug_symbols(path: &Path) -> Option<Vec<(u64, u64, String)>> {
    let data = object::ReadCache::new(open_regular(path).ok()?);
    let obj = object::File::parse(&data).ok()?;
    Some(functions(obj.symbols()))
}

/// `(address, size, raw name)` of the defined functions, in table order.
fn functions<'d, S: ObjectSymbol<'d>>(syms: impl Iterator<Item = S>) -> Vec<(u64, u64, String)> {
    syms.filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.size() > 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_owned())))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Rust names without the hash (`{:#}`), C++ names demangled when
/// `addr2line`'s demangler can, anything else as is.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    addr2line::demangle(name, addr2line::gimli::DW_LANG_C_plus_plus)
        .unwrap_or_else(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The return address this function returns to (its caller's), read
    /// through its own frame record.
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    fn return_address() -> u64 {
        let fp: u64;
        // SAFETY: reads a register.
        unsafe { std::arch::asm!("mov {}, rbp", out(reg) fp) };
        // SAFETY: this function has a frame record (the workspace builds
        // with frame pointers): [rbp + 8] is its return address.
        unsafe { std::ptr::read((fp + 8) as *const u64) }
    }

    /// `.eh_frame` says where a function has its frame record: not at its
    /// first instruction (before `push rbp`), in this binary or in libc, but
    /// at a return address inside a function built with frame pointers.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    fn call_frame_information_tells_where_a_frame_record_is_set_up() {
        let maps = fgtrace_trace::maps::executable(&fgtrace_trace::maps::read_self());
        let mut sym = Symbolizer::new(&maps);
        let entry = return_address as *const () as usize as u64;
        assert_eq!(sym.frame_record(entry, false), Some(false));
        let ret = std::hint::black_box(return_address());
        assert_eq!(sym.frame_record(ret, true), Some(true));
        let memcpy = libc::memcpy as *const () as usize as u64;
        assert_eq!(sym.frame_record(memcpy, false), Some(false));
        // Outside every mapping: nothing known.
        assert_eq!(sym.frame_record(8, false), None);
    }

    #[test]
    fn probe_frames_are_known_by_name_or_by_source_file() {
        let f = |name: &str, file: Option<&str>| ResolvedFrame {
            name: name.into(),
            file: file.map(Into::into),
            line: None,
            inlined: true,
        };
        assert!(is_probe_frame(&f(
            "drop_in_place<fgtrace_core::probe::Guard>",
            None
        )));
        assert!(is_probe_frame(&f(
            "exit",
            Some("/work/x/core/src/probe.rs")
        )));
        let registry = "/root/.cargo/registry/src/index/fgtrace-core-0.1.0/src/probe.rs";
        assert!(is_probe_frame(&f("enter", Some(registry))));
        assert!(!is_probe_frame(&f("exit", Some("/work/app/src/probe.rs"))));
        assert!(!is_probe_frame(&f(
            "exit",
            Some("/x/tokio-core/src/probe.rs")
        )));
        assert!(!is_probe_frame(&f("exit", None)));
    }

    fn map(start: u64, end: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            offset: 0,
            path: path.into(),
            build_id: None,
        }
    }

    /// Every DWARF row with line 0 (code the compiler could not attribute)
    /// inside a function of this test binary: the innermost frame still gets
    /// the nearest real line before it, as `addr2line` and `perf` give.
    #[test]
    fn rows_with_line_zero_take_the_nearest_real_line_before_them() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let bin = Binary::open(exe.to_str().unwrap(), None, &[]).unwrap();
        let dwarf = bin.dwarf.as_ref().expect("tests build with debug info");
        let (mut zero_rows, mut checked) = (0, 0);
        for (lo, len, loc) in dwarf.find_location_range(0, u64::MAX).unwrap() {
            if loc.line.is_some() || bin.symbols.segment_start(lo).is_none() {
                continue;
            }
            zero_rows += 1;
            let start = bin.symbols.segment_start(lo).unwrap();
            // Only rows with a real line before them in the same function.
            let before = dwarf
                .find_location_range(start, lo)
                .unwrap()
                .any(|(_, _, l)| l.line.is_some());
            if !before {
                continue;
            }
            if checked >= 2000 {
                break;
            }
            for va in [lo, lo + len - 1] {
                let frames = bin.lookup(va);
                assert!(!frames.is_empty(), "{va:#x}");
                assert!(frames[0].line.is_some(), "{va:#x}: {:?}", frames[0]);
                checked += 1;
            }
        }
        assert!(
            checked > 0,
            "no line-0 rows after a real line in this binary ({zero_rows} line-0 rows in all)"
        );
    }

    #[test]
    fn debug_lines_of_a_mapped_file_and_which_file_is_the_program() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let mut s = Symbolizer::new(&[
            map(0x1000, 0x2000, "[vdso]"),
            map(0x3000, 0x4000, "/nonexistent/libc.so.6"),
            map(0x5000, 0x6000, exe),
            map(0x7000, 0x8000, "/nonexistent/app"),
        ]);
        // Tests build with debug info, and (`.cargo/config.toml`) with frame
        // pointers.
        assert_eq!(s.debug_lines(exe), Some(true));
        assert_eq!(s.frame_pointers(exe), Some(true));
        assert_eq!(s.frame_pointers("/nonexistent/libc.so.6"), None);
        // The C library this test runs on is built without them (as
        // distributions build it, `-O2`).
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .expect("the C library is mapped");
        let mut c = Symbolizer::new(&[map(0x1000, 0x2000, libc)]);
        assert_eq!(c.frame_pointers(libc), Some(false), "{libc}");
        assert_eq!(s.debug_lines("/nonexistent/libc.so.6"), None);
        assert_eq!(s.debug_lines("/not/mapped"), None);
        assert_eq!(s.program_file("./app"), Some("/nonexistent/app"));
        assert_eq!(s.program_file("other"), Some(exe));
        // A stripped system binary, unless its debug file is installed.
        if Path::new("/bin/true").is_file() {
            let mut s = Symbolizer::new(&[map(0x1000, 0x2000, "/bin/true")])
                .debug_dirs(vec![PathBuf::from("/nonexistent")]);
            let elf = std::fs::read("/bin/true").unwrap();
            let obj = object::File::parse(&elf[..]).unwrap();
            if obj.section_by_name(".debug_line").is_none() {
                assert_eq!(s.debug_lines("/bin/true"), Some(false));
            }
        }
    }

    #[test]
    fn addresses_outside_mappings_and_pseudo_mappings() {
        let mut s = Symbolizer::new(&[
            map(0x1000, 0x2000, "[vdso]"),
            map(0x5000, 0x6000, "/nonexistent/lib.so"),
        ]);
        assert_eq!(s.frames(0x1800, false)[0].name, "[vdso]");
        assert_eq!(s.frames(0x1000, false)[0].name, "[vdso]");
        // A return address just past a mapping still belongs to it.
        assert_eq!(s.frames(0x2000, true)[0].name, "[vdso]");
        assert_eq!(s.frames(0x2000, false)[0].name, UNKNOWN);
        assert_eq!(s.frames(0x10, false)[0].name, UNKNOWN);
        assert!(s.warnings().is_empty());
        assert_eq!(s.frames(0x5010, false)[0].name, UNKNOWN);
        assert_eq!(s.frames(0x5020, false)[0].name, UNKNOWN);
        assert_eq!(
            s.warnings().len(),
            1,
            "one warning per file: {:?}",
            s.warnings()
        );
        assert!(
            s.warnings()[0].contains("/nonexistent/lib.so"),
            "{:?}",
            s.warnings()
        );

        let mut v = Symbolizer::new(&[map(0x5000, 0x6000, "/nonexistent/lib.so")]).verbose(true);
        assert_eq!(
            v.frames(0x5010, true)[0].name,
            "[unknown] /nonexistent/lib.so+0xf"
        );
        assert_eq!(v.frames(0x10, false)[0].name, "[unknown] 0x10");
    }

    #[test]
    fn outermost_plain_dwarf_names_defer_to_the_symbol_table() {
        let sym = || Some("app::busy".to_owned());
        let none = || None;
        assert_eq!(pick_name(Some("busy"), true, sym), "app::busy");
        assert_eq!(pick_name(Some("busy"), true, none), "busy");
        assert_eq!(
            pick_name(Some("{closure#0}"), false, sym),
            "{closure#0}",
            "inlined: DWARF only"
        );
        assert_eq!(
            pick_name(Some("_ZN3app4busy17h0123456789abcdefE"), true, || Some(
                "other".into()
            )),
            "app::busy"
        );
        assert_eq!(pick_name(None, false, sym), "app::busy");
        assert_eq!(pick_name(None, true, none), UNKNOWN);
    }

    #[test]
    fn demangles_rust_without_hash_and_cpp() {
        assert_eq!(
            demangle("_ZN7fgtrace4view6report5write17h0123456789abcdefE"),
            "fgtrace::view::report::write"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
    }

    #[test]
    fn a_file_offset_that_overflows_gives_an_unknown_frame() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut m = map(0x1000, 0x2000, exe.to_str().unwrap());
        m.offset = u64::MAX - 0x10;
        let mut s = Symbolizer::new(&[m]).verbose(true);
        let f = s.frames(0x1800, false).to_vec();
        assert_eq!(f.len(), 1);
        assert!(f[0].is_unknown(), "{f:?}");
        assert!(f[0].name.contains("0x1800"), "{f:?}");
    }

    /// Symbolizes one address in a mapping of `path` on another thread;
    /// fails if that does not finish within 5 s. Returns the warnings.
    fn symbolize_with_timeout(path: &str) -> Vec<String> {
        let path = path.to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = Symbolizer::new(&[map(0x1000, 0x2000, &path)]);
            let unknown = s.frames(0x1800, false)[0].is_unknown();
            let _ = tx.send((unknown, s.warnings().to_vec()));
        });
        let (unknown, warnings) = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("symbolizing blocked on a mapping that is not a regular file");
        assert!(unknown);
        warnings
    }

    #[test]
    fn mappings_that_are_not_regular_files_are_not_opened() {
        let dir = std::env::temp_dir().join(format!("fgtrace-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for path in [fifo.to_str().unwrap(), "/dev/stdin", "/dev/zero", "/tmp"] {
            let w = symbolize_with_timeout(path);
            assert_eq!(w.len(), 1, "{w:?}");
            assert!(
                w[0].contains(path) && w[0].contains("not a regular file"),
                "{w:?}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_last_address_is_looked_up_without_overflow() {
        // addr2line computes `probe + 1`: the address a hostile trace or a
        // sampled garbage frame can reach through a mapping must not panic.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let bin = Binary::open(exe.to_str().unwrap(), None, &[]).unwrap();
        assert!(bin.lookup(u64::MAX).is_empty());
    }
}
