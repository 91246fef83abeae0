//! Function names for raw code addresses, read from an ELF's `.symtab` and DWARF.
//!
//! [`FuncSymbols`] answers "which function holds this address?" exactly as
//! Zephyr's `stackcollapse.py` does (the first `STT_FUNC` in `.symtab` order
//! whose `[st_value, st_value + st_size)` holds the address, aliases and
//! overlaps included, no return-address adjustment), but by binary search
//! over a precomputed partition instead of a linear scan per address.
//! [`Inliner`] adds the inlined frames DWARF records at an address. The
//! executable sections' bytes are kept so a caller can tell whether a return
//! address really follows a call in this binary: the way to catch an ELF that
//! is not the one a dump came from.
//!
//! Both read 32- and 64-bit, little- and big-endian ELF files through `object`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::Path;

use object::elf;
use object::read::elf::{ElfFile, FileHeader, SectionHeader, Sym};
use object::FileKind;

/// Why an ELF file could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElfError {
    /// The bytes are not an ELF file (`what` names what `object` thinks they are).
    NotElf {
        /// What the bytes look like instead.
        what: String,
    },
    /// The ELF headers or tables are malformed.
    Malformed {
        /// What is wrong.
        reason: String,
    },
    /// There is no `.symtab`: the ELF was stripped, so no function names.
    NoSymtab,
    /// DWARF (needed for inlined frames) could not be read.
    Dwarf {
        /// What the DWARF reader said.
        reason: String,
    },
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::NotElf { what } => write!(f, "not an ELF file ({what})"),
            ElfError::Malformed { reason } => write!(f, "malformed ELF: {reason}"),
            ElfError::NoSymtab => write!(
                f,
                "the ELF has no .symtab (stripped?): use the unstripped image, e.g. build/zephyr/zephyr.elf"
            ),
            ElfError::Dwarf { reason } => write!(f, "cannot read the ELF's DWARF: {reason}"),
        }
    }
}

impl std::error::Error for ElfError {}

/// Identifies an interned function name inside one [`FuncSymbols`].
pub type NameId = u32;

/// What kind of ELF the symbols came from; used to sanity-check addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfInfo {
    /// 32 or 64.
    pub bits: u8,
    /// Big-endian (else little-endian).
    pub big_endian: bool,
    /// `e_machine` (`object::elf::EM_*`).
    pub machine: u16,
}

impl ElfInfo {
    /// Alignment every instruction address has on this machine, when the ISA
    /// guarantees one: a dump whose addresses break it came from another binary.
    pub fn code_alignment(&self) -> u64 {
        match self.machine {
            elf::EM_AARCH64 => 4,
            elf::EM_RISCV => 2,
            // Thumb return addresses carry bit 0: no alignment to check on ARM.
            _ => 1,
        }
    }
}

/// One piece of the address partition: addresses `start..=last` resolve to `name`.
#[derive(Debug, Clone, Copy)]
struct Segment {
    last: u64,
    name: NameId,
}

/// `STT_FUNC` symbols of one ELF, resolved with first-in-table-order semantics.
///
/// Built once in O(n log n); each lookup is one binary search.
#[derive(Debug, Clone)]
pub struct FuncSymbols {
    names: Vec<Box<str>>,
    /// Sorted, non-overlapping segment starts; parallel to `segments`.
    starts: Vec<u64>,
    segments: Vec<Segment>,
    text: Vec<Text>,
    info: Option<ElfInfo>,
}

/// One executable section: where it is loaded and its bytes.
#[derive(Debug, Clone)]
struct Text {
    range: Range<u64>,
    bytes: Vec<u8>,
}

impl FuncSymbols {
    /// Reads `.symtab` (and the executable sections) of an ELF image.
    pub fn from_elf(data: &[u8]) -> Result<Self, ElfError> {
        match FileKind::parse(data) {
            Ok(FileKind::Elf32) => read_elf::<elf::FileHeader32<object::Endianness>>(data),
            Ok(FileKind::Elf64) => read_elf::<elf::FileHeader64<object::Endianness>>(data),
            Ok(kind) => Err(ElfError::NotElf {
                what: format!("{kind:?} file"),
            }),
            Err(_) => Err(ElfError::NotElf {
                what: "unrecognised file format".into(),
            }),
        }
    }

    /// Builds the table from `(st_value, st_size, name)` of `STT_FUNC` symbols in
    /// `.symtab` order. Lets other symbol sources and tests share the lookup.
    pub fn from_table<'a>(symbols: impl IntoIterator<Item = (u64, u64, &'a str)>) -> Self {
        let mut interner = Interner::default();
        let entries: Vec<(u64, u64, NameId)> = symbols
            .into_iter()
            .map(|(value, size, name)| (value, size, interner.intern(name)))
            .collect();
        Self::build(interner.names, entries, Vec::new(), None)
    }

    fn build(
        names: Vec<Box<str>>,
        entries: Vec<(u64, u64, NameId)>,
        text: Vec<Text>,
        info: Option<ElfInfo>,
    ) -> Self {
        let (starts, segments) = partition(&entries);
        FuncSymbols {
            names,
            starts,
            segments,
            text,
            info,
        }
    }

    /// The function holding `addr`, as `stackcollapse.py` would name it.
    #[inline]
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        self.lookup_id(addr).map(|id| self.name(id))
    }

    /// Like [`lookup`](Self::lookup) but returns the interned id: equal names
    /// have equal ids, so callers can compare frames without string compares.
    #[inline]
    pub fn lookup_id(&self, addr: u64) -> Option<NameId> {
        let idx = self.starts.partition_point(|&s| s <= addr);
        let seg = self.segments.get(idx.checked_sub(1)?)?;
        (addr <= seg.last).then_some(seg.name)
    }

    /// Where the run of addresses that [`lookup`](Self::lookup) gives one
    /// name to, and that holds `addr`, begins: the function's start, or a
    /// later address where an overlapping symbol ends.
    pub fn segment_start(&self, addr: u64) -> Option<u64> {
        let idx = self.starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        (addr <= self.segments.get(idx)?.last).then(|| self.starts[idx])
    }

    /// The name behind an id from [`lookup_id`](Self::lookup_id).
    ///
    /// # Panics
    /// If `id` did not come from this table.
    #[inline]
    pub fn name(&self, id: NameId) -> &str {
        &self.names[id as usize]
    }

    /// All interned names; `NameId` indexes this slice.
    pub fn names(&self) -> &[Box<str>] {
        &self.names
    }

    /// Address ranges of the allocated, executable sections (none for
    /// [`from_table`](Self::from_table)).
    pub fn text_ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.text.iter().map(|t| t.range.clone())
    }

    /// Whether `addr` lies in an executable section.
    pub fn in_text(&self, addr: u64) -> bool {
        self.text.iter().any(|t| t.range.contains(&addr))
    }

    /// Whether the instruction just before `addr` is a call, i.e. whether
    /// `addr` can be a return address in this binary. `None` when the ELF's
    /// code is not at hand or its architecture is not decoded here (x86,
    /// x86-64, AArch64 and RISC-V are; instructions are little-endian on all).
    pub fn follows_call(&self, addr: u64) -> Option<bool> {
        let before = |n: u64| -> Option<&[u8]> {
            let start = addr.checked_sub(n)?;
            let text = self.text.iter().find(|t| t.range.contains(&start))?;
            let off = usize::try_from(start - text.range.start).ok()?;
            text.bytes
                .get(off..off.checked_add(usize::try_from(n).ok()?)?)
        };
        let word = |n: u64| before(n).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        match self.info?.machine {
            elf::EM_X86_64 | elf::EM_386 => {
                // call rel32 (E8), or call r/m (FF /2) in its 2..7-byte forms.
                let rel32 = before(5).is_some_and(|b| b[0] == 0xe8);
                let indirect = (2..=7)
                    .any(|n| before(n).is_some_and(|b| b[0] == 0xff && (b[1] >> 3) & 7 == 2));
                before(2).map(|_| rel32 || indirect)
            }
            elf::EM_AARCH64 => {
                // BL imm26, BLR Xn.
                word(4).map(|w| w & 0xfc00_0000 == 0x9400_0000 || w & 0xffff_fc1f == 0xd63f_0000)
            }
            elf::EM_RISCV => {
                // jal/jalr linking ra (x1), or c.jalr (16-bit).
                let full = word(4)
                    .is_some_and(|w| matches!(w & 0x7f, 0x6f | 0x67) && (w >> 7) & 0x1f == 1);
                let compressed = before(2).is_some_and(|b| {
                    let h = u16::from_le_bytes([b[0], b[1]]);
                    h & 0xf07f == 0x9002 && (h >> 7) & 0x1f != 0
                });
                before(2).map(|_| full || compressed)
            }
            _ => None,
        }
    }

    /// Class, byte order and machine, when read from an ELF.
    pub fn info(&self) -> Option<ElfInfo> {
        self.info
    }
}

#[derive(Default)]
struct Interner {
    names: Vec<Box<str>>,
    ids: HashMap<Box<str>, NameId>,
}

impl Interner {
    fn intern(&mut self, name: &str) -> NameId {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as NameId;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }
}

fn read_elf<Elf>(data: &[u8]) -> Result<FuncSymbols, ElfError>
where
    Elf: FileHeader<Endian = object::Endianness>,
{
    let malformed = |e: object::Error| ElfError::Malformed {
        reason: e.to_string(),
    };
    let file = ElfFile::<Elf, &[u8]>::parse(data).map_err(malformed)?;
    let endian = file.endian();
    let header = file.elf_header();
    let info = ElfInfo {
        bits: if header.is_type_64() { 64 } else { 32 },
        big_endian: header.is_big_endian(),
        machine: header.e_machine(endian),
    };

    let symtab = file.elf_symbol_table();
    if symtab.is_empty() {
        return Err(ElfError::NoSymtab);
    }
    let mut interner = Interner::default();
    let mut entries = Vec::new();
    for sym in symtab.iter() {
        if sym.st_type() != elf::STT_FUNC {
            continue;
        }
        let size: u64 = sym.st_size(endian).into();
        if size == 0 {
            // `value <= addr < value + 0` never holds: skip undefined imports early.
            continue;
        }
        let raw = symtab.symbol_name(endian, sym).map_err(malformed)?;
        let name = String::from_utf8_lossy(raw);
        entries.push((sym.st_value(endian).into(), size, interner.intern(&name)));
    }

    let mut text = Vec::new();
    for section in file.elf_section_table().iter() {
        let flags: u64 = section.sh_flags(endian).into();
        let wanted = u64::from(elf::SHF_ALLOC | elf::SHF_EXECINSTR);
        let size: u64 = section.sh_size(endian).into();
        if flags & wanted == wanted && size > 0 {
            let start: u64 = section.sh_addr(endian).into();
            // NOBITS (or unreadable) code has no bytes: its range still
            // counts as text, only the call-site check skips it.
            let bytes = section.data(endian, data).unwrap_or(&[]).to_vec();
            text.push(Text {
                range: start..start.saturating_add(size),
                bytes,
            });
        }
    }
    Ok(FuncSymbols::build(
        interner.names,
        entries,
        text,
        Some(info),
    ))
}

/// Splits the address space into segments that each resolve to one name: the
/// covering symbol that comes first in table order. A sweep over the sorted
/// boundaries with a min-heap on table position keeps it O(n log n) even for
/// heavily overlapping tables.
fn partition(entries: &[(u64, u64, NameId)]) -> (Vec<u64>, Vec<Segment>) {
    // (start, last, table position, name); size > 0 so `last` cannot underflow.
    let mut syms: Vec<(u64, u64, usize, NameId)> = entries
        .iter()
        .enumerate()
        .filter(|(_, &(_, size, _))| size > 0)
        .map(|(pos, &(value, size, name))| (value, value.saturating_add(size - 1), pos, name))
        .collect();
    syms.sort_unstable_by_key(|&(start, _, pos, _)| (start, pos));

    let mut bounds: Vec<u64> = Vec::with_capacity(syms.len() * 2);
    for &(start, last, _, _) in &syms {
        bounds.push(start);
        if let Some(after) = last.checked_add(1) {
            bounds.push(after);
        }
    }
    bounds.sort_unstable();
    bounds.dedup();

    let mut starts = Vec::new();
    let mut segments: Vec<Segment> = Vec::new();
    let mut active: BinaryHeap<Reverse<(usize, u64, NameId)>> = BinaryHeap::new();
    let mut next = 0;
    for (i, &at) in bounds.iter().enumerate() {
        while let Some(&(start, last, pos, name)) = syms.get(next) {
            if start > at {
                break;
            }
            active.push(Reverse((pos, last, name)));
            next += 1;
        }
        while active
            .peek()
            .is_some_and(|Reverse((_, last, _))| *last < at)
        {
            active.pop();
        }
        let Some(&Reverse((_, _, name))) = active.peek() else {
            continue;
        };
        let last = bounds.get(i + 1).map_or(u64::MAX, |b| b - 1);
        match segments.last_mut() {
            Some(prev) if prev.name == name && prev.last.checked_add(1) == Some(at) => {
                prev.last = last;
            }
            _ => {
                starts.push(at);
                segments.push(Segment { last, name });
            }
        }
    }
    (starts, segments)
}

/// Deflate cannot expand more than 1032:1 (its format's limit).
const ZLIB_MAX_RATIO: u64 = 1032;
/// Zstandard's run-length blocks: 128 KiB from 4 bytes.
const ZSTD_MAX_RATIO: u64 = 32 * 1024;

/// Refuses an ELF whose compressed debug sections claim more uncompressed
/// bytes than their compressed bytes can hold. The DWARF readers
/// (`object`, under `addr2line`) reserve the claimed size before they
/// decompress: a hostile or corrupt header of a few bytes would otherwise
/// reserve gigabytes (found by the `symbolizer` fuzz target). The error names
/// the section and both sizes.
pub(crate) fn check_compressed_sections(path: &Path) -> Result<(), String> {
    use object::{CompressionFormat, Object, ObjectSection};
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let data = object::ReadCache::new(file);
    let obj = object::File::parse(&data).map_err(|e| format!("not a readable ELF file ({e})"))?;
    for section in obj.sections() {
        let name = section.name().unwrap_or("");
        if !(name.starts_with(".debug") || name.starts_with(".zdebug")) {
            continue;
        }
        let range = section
            .compressed_file_range()
            .map_err(|e| format!("section {name}: {e}"))?;
        let (what, ratio) = match range.format {
            CompressionFormat::None => continue,
            CompressionFormat::Zlib => ("zlib", ZLIB_MAX_RATIO),
            CompressionFormat::Zstandard => ("zstd", ZSTD_MAX_RATIO),
            _ => return Err(format!("section {name} is compressed in an unknown format")),
        };
        let most = range
            .compressed_size
            .saturating_mul(ratio)
            .saturating_add(4096);
        if range.uncompressed_size > most {
            return Err(format!(
                "section {name} claims {} bytes uncompressed from {} bytes of {what}, more than {what} can expand to (corrupt compression header)",
                range.uncompressed_size, range.compressed_size
            ));
        }
    }
    Ok(())
}

/// Inlined-function frames from an ELF's DWARF (`--inline`).
///
/// Built on `addr2line`'s loader, which also handles compressed and split
/// DWARF; that is why it opens a path rather than taking bytes.
pub struct Inliner {
    loader: addr2line::Loader,
}

impl fmt::Debug for Inliner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inliner").finish_non_exhaustive()
    }
}

impl Inliner {
    /// Opens the ELF at `path` and indexes its DWARF.
    pub fn open(path: &Path) -> Result<Self, ElfError> {
        check_compressed_sections(path).map_err(|reason| ElfError::Dwarf { reason })?;
        let loader = addr2line::Loader::new(path).map_err(|e| ElfError::Dwarf {
            reason: e.to_string(),
        })?;
        Ok(Inliner { loader })
    }

    /// Names of the functions inlined at `addr`, outermost first, excluding the
    /// function that holds them (the symbol table names that one). Empty when
    /// nothing is inlined there or DWARF does not cover `addr`.
    pub fn inlined_at(&self, addr: u64) -> Vec<String> {
        let mut names = Vec::new();
        // addr2line computes `addr + 1`, which overflows (a panic in debug
        // builds) for an address read from a dump; no code starts there.
        if addr == u64::MAX {
            return names;
        }
        let Ok(mut frames) = self.loader.find_frames(addr) else {
            return names;
        };
        while let Ok(Some(frame)) = frames.next() {
            let name = frame
                .function
                .as_ref()
                .and_then(|f| f.raw_name().ok().map(|n| n.into_owned()))
                .unwrap_or_else(|| "[unknown]".to_owned());
            names.push(name);
        }
        // Innermost first, ending with the holding function: drop it, reverse.
        names.pop();
        names.reverse();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script's own lookup, for comparison.
    fn linear(table: &[(u64, u64, &str)], addr: u64) -> Option<String> {
        table
            .iter()
            .find(|&&(v, s, _)| v <= addr && (addr as u128) < v as u128 + s as u128)
            .map(|&(_, _, n)| n.to_owned())
    }

    #[test]
    fn earlier_symbol_wins_over_later_overlap() {
        let table = [(0x100, 0x100, "outer"), (0x150, 0x10, "inner")];
        let syms = FuncSymbols::from_table(table);
        assert_eq!(syms.lookup(0x155), Some("outer"));
        let table = [(0x150, 0x10, "inner"), (0x100, 0x100, "outer")];
        let syms = FuncSymbols::from_table(table);
        assert_eq!(syms.lookup(0x14f), Some("outer"));
        assert_eq!(syms.lookup(0x150), Some("inner"));
        assert_eq!(syms.lookup(0x15f), Some("inner"));
        assert_eq!(syms.lookup(0x160), Some("outer"));
        assert_eq!(syms.lookup(0x1ff), Some("outer"));
        assert_eq!(syms.lookup(0x200), None);
        assert_eq!(syms.lookup(0xff), None);
    }

    #[test]
    fn alias_at_same_range_resolves_to_first_listed() {
        let syms = FuncSymbols::from_table([(0x10, 8, "hash_bytes"), (0x10, 8, "fnv1a")]);
        assert_eq!(syms.lookup(0x17), Some("hash_bytes"));
    }

    #[test]
    fn zero_size_and_top_of_address_space() {
        let syms = FuncSymbols::from_table([(0x0, 0, "memset"), (u64::MAX - 1, 2, "top")]);
        assert_eq!(syms.lookup(0), None);
        assert_eq!(syms.lookup(u64::MAX), Some("top"));
        assert_eq!(syms.lookup(u64::MAX - 2), None);
    }

    #[test]
    fn matches_linear_scan_on_random_overlapping_tables() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "a"];
        for _ in 0..200 {
            let table: Vec<(u64, u64, &str)> = (0..rand(12) + 1)
                .map(|_| (rand(64), rand(24), NAMES[rand(6) as usize]))
                .collect();
            let syms = FuncSymbols::from_table(table.iter().copied());
            for addr in 0..100 {
                assert_eq!(
                    syms.lookup(addr).map(str::to_owned),
                    linear(&table, addr),
                    "addr {addr:#x} in {table:?}"
                );
            }
        }
    }

    #[test]
    fn rejects_non_elf_bytes() {
        assert!(matches!(
            FuncSymbols::from_elf(b"Perf buf length 3\n"),
            Err(ElfError::NotElf { .. })
        ));
        assert!(matches!(
            FuncSymbols::from_elf(b"\x7fELF\x02\x01\x01\0garbage"),
            Err(ElfError::Malformed { .. }) | Err(ElfError::NotElf { .. })
        ));
    }

    #[test]
    fn the_last_address_has_nothing_inlined_and_does_not_overflow() {
        let inl = Inliner::open(&std::fs::read_link("/proc/self/exe").unwrap()).unwrap();
        assert!(inl.inlined_at(u64::MAX).is_empty());
    }
}
