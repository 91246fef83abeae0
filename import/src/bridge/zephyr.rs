//! Zephyr `perf printbuf` import: the dump a user copies from a serial console,
//! symbolized against the ELF, as folded stacks.
//!
//! On a clean dump the output is byte-identical to Zephyr's
//! `scripts/profiling/stackcollapse.py` (the current version with
//! [`CollapseOptions::merge`], the older one without). Where the script
//! crashes, this module recovers: console noise (prompts, colour escapes, CRLF,
//! blank and log lines) is skipped, a truncated dump keeps its complete
//! samples, and both come back as [`Warning`]s with line numbers. An ELF that
//! cannot be the dump's is an error instead of a page of `[unknown]`.
//!
//! ```no_run
//! use fgtrace_symbols::elf::FuncSymbols;
//! use fgtrace_import::bridge::zephyr::{collapse, CollapseOptions, Dump};
//! let dump = Dump::parse(&std::fs::read("perf_data.txt")?)?;
//! let syms = FuncSymbols::from_elf(&std::fs::read("zephyr.elf")?)?;
//! let folded = collapse(&dump, &syms, None, CollapseOptions::default())?;
//! folded.write_to(std::io::stdout().lock())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};

use super::elf::{ElfError, FuncSymbols, Inliner, NameId};

/// The text that starts a dump; the number after it counts the word lines.
const HEADER: &[u8] = b"Perf buf length";
/// Digits per word: `perf printbuf` prints `%016lx`, on 32-bit targets too.
const WORD_DIGITS: usize = 16;
/// Return addresses needed before judging an ELF by its call sites.
const MIN_RETURNS_CHECKED: usize = 20;
/// Name the script gives an address no function holds.
pub const UNKNOWN: &str = "[unknown]";
/// Name the script gives address 0 when no function holds it.
pub const NULLPTR: &str = "nullptr";

/// Why a dump could not be imported at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZephyrError {
    /// No `Perf buf length N` line anywhere in the input.
    NoHeader,
    /// The dump is an ELF file: the two arguments are probably swapped.
    DumpIsElf,
    /// A `Perf buf length` line without a usable count.
    BadHeader {
        /// The header's line, 1-based.
        line: usize,
    },
    /// A record announces 0 frames: `perf` never writes that, the data is mangled.
    ZeroLengthSample {
        /// The record's line, 1-based.
        line: usize,
    },
    /// A record announces more frames than the whole buffer holds: the words
    /// are misaligned (a lost or extra line), so nothing after it can be trusted.
    ImpossibleSample {
        /// The record's line, 1-based.
        line: usize,
        /// The frames it announces.
        frames: u64,
        /// The words the whole buffer holds.
        buffer: usize,
    },
    /// The ELF is unusable.
    Elf(ElfError),
    /// The ELF cannot be the one the dump came from.
    ElfMismatch {
        /// What gives it away.
        reason: String,
    },
}

impl fmt::Display for ZephyrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZephyrError::NoHeader => write!(
                f,
                "no `Perf buf length N` line found: not `perf printbuf` output (or the header was not copied)"
            ),
            ZephyrError::DumpIsElf => write!(
                f,
                "this is an ELF file, not `perf printbuf` text (dump and ELF swapped?)"
            ),
            ZephyrError::BadHeader { line } => {
                write!(f, "line {line}: `Perf buf length` is not followed by a word count")
            }
            ZephyrError::ZeroLengthSample { line } => {
                write!(f, "line {line}: sample with 0 frames: the dump is mangled")
            }
            ZephyrError::ImpossibleSample {
                line,
                frames,
                buffer,
            } => write!(
                f,
                "line {line}: sample claims {frames} frames but the whole buffer is {buffer} words: \
                 the dump is mangled (a line lost or added?)"
            ),
            ZephyrError::Elf(e) => e.fmt(f),
            ZephyrError::ElfMismatch { reason } => {
                write!(f, "the ELF does not match the dump: {reason}")
            }
        }
    }
}

impl std::error::Error for ZephyrError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ZephyrError::Elf(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ElfError> for ZephyrError {
    fn from(e: ElfError) -> Self {
        ZephyrError::Elf(e)
    }
}

/// Something recovered from rather than rejected; `line` is 1-based in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The input line, 1-based.
    pub line: usize,
    /// What was recovered from.
    pub kind: WarningKind,
}

/// What a [`Warning`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarningKind {
    /// A line inside the dump that is no data word (a log line, a prompt): skipped.
    SkippedLine,
    /// A run of hex digits of the wrong length (a line cut mid-word): the data
    /// ends here, because every word after it would be misaligned.
    MalformedWord {
        /// The word as read.
        text: String,
    },
    /// Another `Perf buf length` header before this dump was complete.
    NewHeader,
    /// The data ended before the word count in the header.
    Truncated {
        /// Words the header announced.
        announced: usize,
        /// Words found.
        found: usize,
    },
    /// The last sample is incomplete and dropped; the complete ones are kept.
    IncompleteSample {
        /// Frames the sample announced.
        frames: u64,
        /// Frames present.
        present: usize,
    },
    /// More data words follow the count in the header: ignored.
    ExtraWords {
        /// Words the header announced.
        announced: usize,
    },
    /// Many addresses fall outside the ELF's text: maybe not the dump's ELF.
    OutsideText {
        /// Addresses outside the ELF's text.
        outside: usize,
        /// Addresses in all.
        total: usize,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: ", self.line)?;
        match &self.kind {
            WarningKind::SkippedLine => write!(f, "skipped a line that is not a data word"),
            WarningKind::MalformedWord { text } => write!(
                f,
                "`{text}` is not a {WORD_DIGITS}-digit word (cut line?): the dump ends here"
            ),
            WarningKind::NewHeader => {
                write!(f, "a new `Perf buf length` header interrupts the dump: it ends here")
            }
            WarningKind::Truncated { announced, found } => write!(
                f,
                "dump truncated: the header announces {announced} words, only {found} found"
            ),
            WarningKind::IncompleteSample { frames, present } => write!(
                f,
                "last sample is incomplete ({present} of {frames} addresses): dropped"
            ),
            WarningKind::ExtraWords { announced } => write!(
                f,
                "data continues past the {announced} words the header announces: ignored"
            ),
            WarningKind::OutsideText { outside, total } => write!(
                f,
                "{outside} of {total} addresses lie outside the ELF's code (first in the sample here): \
                 is this the ELF the dump came from?"
            ),
        }
    }
}

/// One sample as recorded: addresses innermost (the interrupted PC) first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// Input line of the sample's length word.
    pub line: usize,
    /// The frames' addresses, innermost first.
    pub addrs: &'a [u64],
}

#[derive(Debug, Clone, Copy)]
struct Span {
    line: usize,
    start: usize,
    len: usize,
}

/// A parsed `perf printbuf` dump: the complete samples plus what was recovered from.
#[derive(Debug, Clone)]
pub struct Dump {
    addrs: Vec<u64>,
    samples: Vec<Span>,
    warnings: Vec<Warning>,
    header_line: usize,
    announced: usize,
}

impl Dump {
    /// Parses console output that contains one dump. Bytes, not `str`: a
    /// serial capture may hold invalid UTF-8 outside the dump.
    pub fn parse(input: &[u8]) -> Result<Dump, ZephyrError> {
        Parser::default().run(input)
    }

    /// The complete samples in buffer order.
    pub fn samples(&self) -> impl ExactSizeIterator<Item = Sample<'_>> + '_ {
        self.samples.iter().map(|s| Sample {
            line: s.line,
            addrs: &self.addrs[s.start..s.start + s.len],
        })
    }

    /// Number of complete samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the dump holds no complete sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// What parsing recovered from, in input order.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Line of the `Perf buf length` header.
    pub fn header_line(&self) -> usize {
        self.header_line
    }

    /// The word count the header announces.
    pub fn announced_words(&self) -> usize {
        self.announced
    }
}

/// A record being filled: its span and how many addresses it still needs.
#[derive(Debug, Clone, Copy)]
struct Open {
    span: Span,
    frames: u64,
}

#[derive(Default)]
struct Parser {
    addrs: Vec<u64>,
    samples: Vec<Span>,
    warnings: Vec<Warning>,
    open: Option<Open>,
    words: usize,
}

impl Parser {
    fn run(mut self, input: &[u8]) -> Result<Dump, ZephyrError> {
        if input.starts_with(b"\x7fELF") {
            return Err(ZephyrError::DumpIsElf);
        }
        let mut lines = input
            .split(|&b| b == b'\n')
            .enumerate()
            .map(|(i, l)| (i + 1, l));
        let mut scratch = Vec::new();

        let (header_line, announced) = loop {
            let Some((n, raw)) = lines.next() else {
                return Err(ZephyrError::NoHeader);
            };
            let text = clean(raw, &mut scratch);
            if let Some(count) = header_count(text) {
                break (n, count.ok_or(ZephyrError::BadHeader { line: n })?);
            }
        };
        // A header can lie; the input's size bounds the words it can hold.
        self.addrs
            .reserve(announced.min(input.len() / (WORD_DIGITS + 1)));

        let mut last_line = header_line;
        let mut stopped = false;
        while self.words < announced {
            let Some((n, raw)) = lines.next() else {
                break;
            };
            let text = clean(raw, &mut scratch);
            if text.is_empty() {
                continue;
            }
            last_line = n;
            if let Some(word) = parse_word(text) {
                self.push_word(word, n, announced)?;
            } else if text.iter().all(u8::is_ascii_hexdigit) {
                self.warn(
                    n,
                    WarningKind::MalformedWord {
                        text: String::from_utf8_lossy(text).into_owned(),
                    },
                );
                stopped = true;
                break;
            } else if header_count(text).is_some() {
                self.warn(n, WarningKind::NewHeader);
                stopped = true;
                break;
            } else {
                self.warn(n, WarningKind::SkippedLine);
            }
        }

        if self.words < announced {
            let found = self.words;
            self.warn(last_line, WarningKind::Truncated { announced, found });
        } else if !stopped {
            // A full dump: only another data word right after it is suspicious.
            let next = lines.find_map(|(n, raw)| {
                let text = clean(raw, &mut scratch);
                (!text.is_empty()).then(|| (n, parse_word(text).is_some()))
            });
            if let Some((n, true)) = next {
                self.warn(n, WarningKind::ExtraWords { announced });
            }
        }
        if let Some(open) = self.open.take() {
            self.addrs.truncate(open.span.start);
            self.warn(
                open.span.line,
                WarningKind::IncompleteSample {
                    frames: open.frames,
                    present: open.span.len,
                },
            );
        }

        Ok(Dump {
            addrs: self.addrs,
            samples: self.samples,
            warnings: self.warnings,
            header_line,
            announced,
        })
    }

    /// Feeds one word to the record state machine: `[N][a0]..[aN-1]`.
    fn push_word(&mut self, word: u64, line: usize, announced: usize) -> Result<(), ZephyrError> {
        self.words += 1;
        match &mut self.open {
            None => {
                if word == 0 {
                    return Err(ZephyrError::ZeroLengthSample { line });
                }
                if word >= announced as u64 {
                    return Err(ZephyrError::ImpossibleSample {
                        line,
                        frames: word,
                        buffer: announced,
                    });
                }
                self.open = Some(Open {
                    span: Span {
                        line,
                        start: self.addrs.len(),
                        len: 0,
                    },
                    frames: word,
                });
            }
            Some(open) => {
                self.addrs.push(word);
                open.span.len += 1;
                if open.span.len as u64 == open.frames {
                    self.samples.push(open.span);
                    self.open = None;
                }
            }
        }
        Ok(())
    }

    fn warn(&mut self, line: usize, kind: WarningKind) {
        self.warnings.push(Warning { line, kind });
    }
}

/// Strips what a console adds around text: the line terminator, ANSI/VT100
/// escape sequences (the Zephyr shell colours its prompt and errors) and
/// surrounding whitespace. Borrows the line unless it holds an escape.
fn clean<'a>(raw: &'a [u8], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    if !raw.contains(&0x1b) {
        return raw.trim_ascii();
    }
    scratch.clear();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != 0x1b {
            scratch.push(raw[i]);
            i += 1;
            continue;
        }
        i += 1;
        if raw.get(i) == Some(&b'[') {
            // CSI: parameter and intermediate bytes, then one final byte.
            i += 1;
            while i < raw.len() && (0x20..=0x3f).contains(&raw[i]) {
                i += 1;
            }
            i += 1;
        } else {
            // Two-byte escape (ESC 7, ESC c, ...).
            i += 1;
        }
    }
    scratch.trim_ascii()
}

/// `Some(Some(n))` for a header line, `Some(None)` for a header without a
/// count, `None` for any other line.
fn header_count(text: &[u8]) -> Option<Option<usize>> {
    let at = text.windows(HEADER.len()).position(|w| w == HEADER)?;
    let rest = text[at + HEADER.len()..].trim_ascii_start();
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return Some(None);
    }
    let count = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok();
    Some(count)
}

/// A data word: exactly 16 hex digits.
#[inline]
fn parse_word(text: &[u8]) -> Option<u64> {
    if text.len() != WORD_DIGITS {
        return None;
    }
    let mut value = 0u64;
    for &b in text {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        value = (value << 4) | u64::from(digit);
    }
    Some(value)
}

/// How samples become folded lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollapseOptions {
    /// Drop a frame whose name equals the previous one, so direct recursion
    /// collapses, as the current `stackcollapse.py` does. `false` gives the
    /// older script's output.
    pub merge: bool,
    /// One line per distinct stack with its count, sorted by stack, instead
    /// of the script's one line per sample in buffer order.
    pub aggregate: bool,
}

impl Default for CollapseOptions {
    fn default() -> Self {
        CollapseOptions {
            merge: true,
            aggregate: false,
        }
    }
}

/// One folded line: frames root first joined by `;`, and how many samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedStack {
    /// Frames root first, joined by `;`.
    pub stack: String,
    /// Samples with this stack.
    pub count: u64,
}

impl fmt::Display for FoldedStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.stack, self.count)
    }
}

/// The folded stacks of a dump and every warning from parsing and symbolizing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    /// The folded lines.
    pub stacks: Vec<FoldedStack>,
    /// What parsing and symbolizing recovered from.
    pub warnings: Vec<Warning>,
}

impl Folded {
    /// Writes `stack count\n` lines, the script's output format.
    pub fn write_to<W: Write>(&self, out: W) -> io::Result<()> {
        let mut out = io::BufWriter::new(out);
        for s in &self.stacks {
            out.write_all(s.stack.as_bytes())?;
            writeln!(out, " {}", s.count)?;
        }
        out.flush()
    }

    /// The output as one string.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for s in &self.stacks {
            text.push_str(&s.stack);
            text.push(' ');
            text.push_str(&s.count.to_string());
            text.push('\n');
        }
        text
    }

    /// Identical stacks summed, sorted by stack (what `--aggregate` prints).
    pub fn aggregated(&self) -> Folded {
        Folded {
            stacks: aggregate(self.stacks.iter().map(|s| (s.stack.clone(), s.count))),
            warnings: self.warnings.clone(),
        }
    }

    /// Total sample count.
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|s| s.count).sum()
    }
}

fn aggregate(stacks: impl Iterator<Item = (String, u64)>) -> Vec<FoldedStack> {
    let mut counts: HashMap<String, u64> = HashMap::new();
    for (stack, count) in stacks {
        *counts.entry(stack).or_default() += count;
    }
    let mut out: Vec<FoldedStack> = counts
        .into_iter()
        .map(|(stack, count)| FoldedStack { stack, count })
        .collect();
    out.sort_unstable_by(|a, b| a.stack.cmp(&b.stack));
    out
}

/// Symbolizes every sample of `dump` against `syms` (and, with `inliner`,
/// expands DWARF inlined frames inside each function), giving folded stacks.
///
/// Fails with [`ZephyrError::ElfMismatch`] when the addresses show the ELF is
/// not the dump's: none of them in its code, or many violating the machine's
/// instruction alignment.
pub fn collapse(
    dump: &Dump,
    syms: &FuncSymbols,
    inliner: Option<&Inliner>,
    opts: CollapseOptions,
) -> Result<Folded, ZephyrError> {
    let mut warnings = dump.warnings.to_vec();
    if let Some(w) = check_match(dump, syms)? {
        warnings.push(w);
    }

    let mut names = Names::new(syms);
    let mut frames: Vec<NameId> = Vec::with_capacity(64);
    let mut line = String::with_capacity(256);
    let mut stacks = Vec::with_capacity(dump.len());
    for sample in dump.samples() {
        frames.clear();
        for (i, &addr) in sample.addrs.iter().enumerate().rev() {
            let Some(id) = syms.lookup_id(addr) else {
                frames.push(if addr == 0 {
                    names.nullptr
                } else {
                    names.unknown
                });
                continue;
            };
            frames.push(id);
            if let Some(inliner) = inliner {
                // A return address points after the call: its inlining
                // context is the call's. The PC (first word) is exact.
                let probe = if i == 0 { addr } else { addr.wrapping_sub(1) };
                frames.extend_from_slice(names.inlined(inliner, probe));
            }
        }

        line.clear();
        let mut prev = None;
        for &id in &frames {
            if opts.merge && prev == Some(id) {
                continue;
            }
            if prev.is_some() {
                line.push(';');
            }
            line.push_str(names.get(id));
            prev = Some(id);
        }
        stacks.push(FoldedStack {
            stack: line.clone(),
            count: 1,
        });
    }

    let stacks = if opts.aggregate {
        aggregate(stacks.into_iter().map(|s| (s.stack, s.count)))
    } else {
        stacks
    };
    Ok(Folded { stacks, warnings })
}

/// Parses `dump` and symbolizes it against the ELF image `elf` in one call.
pub fn stackcollapse(
    dump: &[u8],
    elf: &[u8],
    opts: CollapseOptions,
) -> Result<Folded, ZephyrError> {
    let dump = Dump::parse(dump)?;
    let syms = FuncSymbols::from_elf(elf)?;
    collapse(&dump, &syms, None, opts)
}

/// Frame names of one collapse: the symbol table's interned names plus the
/// script's placeholders and DWARF inline names, so equal names always have
/// equal ids (what merging compares).
struct Names<'a> {
    syms: &'a FuncSymbols,
    extra: Vec<String>,
    by_name: Option<HashMap<String, NameId>>,
    inlined: HashMap<u64, Vec<NameId>>,
    unknown: NameId,
    nullptr: NameId,
}

impl<'a> Names<'a> {
    fn new(syms: &'a FuncSymbols) -> Self {
        let mut names = Names {
            syms,
            extra: Vec::new(),
            by_name: None,
            inlined: HashMap::new(),
            unknown: 0,
            nullptr: 0,
        };
        names.unknown = names.intern(UNKNOWN);
        names.nullptr = names.intern(NULLPTR);
        names
    }

    fn get(&self, id: NameId) -> &str {
        let table = self.syms.names().len();
        match (id as usize).checked_sub(table) {
            Some(i) => &self.extra[i],
            None => self.syms.name(id),
        }
    }

    fn intern(&mut self, name: &str) -> NameId {
        let syms = self.syms;
        let by_name = self.by_name.get_or_insert_with(|| {
            syms.names()
                .iter()
                .enumerate()
                .map(|(i, n)| (n.to_string(), i as NameId))
                .collect()
        });
        if let Some(&id) = by_name.get(name) {
            return id;
        }
        let id = (syms.names().len() + self.extra.len()) as NameId;
        self.extra.push(name.to_owned());
        by_name.insert(name.to_owned(), id);
        id
    }

    /// Inlined frames at `addr`, outermost first, cached per address.
    fn inlined(&mut self, inliner: &Inliner, addr: u64) -> &[NameId] {
        if !self.inlined.contains_key(&addr) {
            let ids = inliner
                .inlined_at(addr)
                .iter()
                .map(|n| self.intern(n))
                .collect();
            self.inlined.insert(addr, ids);
        }
        &self.inlined[&addr]
    }
}

/// Tells whether the dump's addresses can come from this ELF: an error when
/// they clearly cannot, a warning when many look foreign.
fn check_match(dump: &Dump, syms: &FuncSymbols) -> Result<Option<Warning>, ZephyrError> {
    let Some(lo) = syms.text_ranges().map(|r| r.start).min() else {
        return Ok(None);
    };
    let hi = syms.text_ranges().map(|r| r.end).max().unwrap_or(lo);
    let align = syms.info().map_or(1, |i| i.code_alignment());
    let (mut total, mut inside, mut misaligned) = (0usize, 0usize, 0usize);
    // Return addresses (every word after the PC) checked against the code,
    // and how many of them follow a call instruction there.
    let (mut returns, mut after_call) = (0usize, 0usize);
    let mut first_outside = None;
    for sample in dump.samples() {
        for (i, &addr) in sample.addrs.iter().enumerate().filter(|&(_, &a)| a != 0) {
            total += 1;
            if !syms.in_text(addr) {
                first_outside.get_or_insert(sample.line);
                continue;
            }
            inside += 1;
            misaligned += usize::from(addr % align != 0);
            if i > 0 {
                if let Some(call) = syms.follows_call(addr) {
                    returns += 1;
                    after_call += usize::from(call);
                }
            }
        }
    }
    if total == 0 {
        return Ok(None);
    }
    if inside * 10 < total {
        return Err(ZephyrError::ElfMismatch {
            reason: format!(
                "only {inside} of the dump's {total} addresses lie in the ELF's code [{lo:#x}, {hi:#x})"
            ),
        });
    }
    if misaligned * 10 > inside {
        return Err(ZephyrError::ElfMismatch {
            reason: format!(
                "{misaligned} of {inside} addresses in the ELF's code are not {align}-byte aligned, \
                 as every instruction of this architecture is (a dump from another architecture?)"
            ),
        });
    }
    // In a matching ELF nearly all of them do (87-96% on the fixtures; the
    // rest are stale ra/lr values); in a foreign one almost none.
    if returns >= MIN_RETURNS_CHECKED && after_call * 4 < returns {
        return Err(ZephyrError::ElfMismatch {
            reason: format!(
                "only {after_call} of {returns} return addresses follow a call instruction in this ELF \
                 (another build of the firmware?)"
            ),
        });
    }
    if inside * 2 < total {
        return Ok(first_outside.map(|line| Warning {
            line,
            kind: WarningKind::OutsideText {
                outside: total - inside,
                total,
            },
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(text: &str) -> Dump {
        Dump::parse(text.as_bytes()).unwrap()
    }

    fn kinds(d: &Dump) -> Vec<(usize, WarningKind)> {
        d.warnings()
            .iter()
            .map(|w| (w.line, w.kind.clone()))
            .collect()
    }

    const TWO: &str = "Perf buf length 5\n\
        0000000000000002\n0000000000001010\n0000000000001020\n\
        0000000000000001\n0000000000001030\n";

    #[test]
    fn records_split_by_length_word_with_lines() {
        let d = dump(TWO);
        let samples: Vec<_> = d.samples().collect();
        assert_eq!(samples.len(), 2);
        assert_eq!(
            samples[0],
            Sample {
                line: 2,
                addrs: &[0x1010, 0x1020]
            }
        );
        assert_eq!(
            samples[1],
            Sample {
                line: 5,
                addrs: &[0x1030]
            }
        );
        assert!(d.warnings().is_empty());
    }

    #[test]
    fn ansi_prompt_and_crlf_are_stripped() {
        let text = "\x1b[1;32muart:~$ \x1b[mperf printbuf\r\nPerf buf length 2\r\n\
            0000000000000001\r\n\x1b[1;31m00000000DEADBEEF\x1b[m\r\n\x1b[1;32muart:~$ \x1b[m";
        let d = dump(text);
        assert_eq!(d.samples().next().unwrap().addrs, &[0xdead_beef]);
        assert!(d.warnings().is_empty(), "{:?}", d.warnings());
    }

    #[test]
    fn log_line_inside_dump_is_skipped_with_warning() {
        let text = TWO.replace(
            "0000000000001020\n",
            "0000000000001020\n[00:00:01.000,000] <inf> main: tick\n",
        );
        let d = dump(&text);
        assert_eq!(d.len(), 2);
        assert_eq!(kinds(&d), vec![(5, WarningKind::SkippedLine)]);
    }

    #[test]
    fn cut_mid_word_keeps_complete_samples() {
        let d = dump("Perf buf length 5\n0000000000000001\n0000000000001010\n0000000000000002\n00000000000010");
        assert_eq!(d.len(), 1);
        assert_eq!(
            kinds(&d),
            vec![
                (
                    5,
                    WarningKind::MalformedWord {
                        text: "00000000000010".into()
                    }
                ),
                (
                    5,
                    WarningKind::Truncated {
                        announced: 5,
                        found: 3
                    }
                ),
                (
                    4,
                    WarningKind::IncompleteSample {
                        frames: 2,
                        present: 0
                    }
                ),
            ]
        );
    }

    #[test]
    fn extra_words_after_announced_count_are_reported() {
        let d = dump(&TWO.replace("length 5", "length 3"));
        assert_eq!(d.len(), 1);
        assert_eq!(
            kinds(&d),
            vec![(5, WarningKind::ExtraWords { announced: 3 })]
        );
    }

    #[test]
    fn mangled_dumps_are_errors() {
        assert_eq!(
            Dump::parse(b"uart:~$ perf printbuf\n").unwrap_err(),
            ZephyrError::NoHeader
        );
        assert_eq!(
            Dump::parse(b"Perf buf length ?\n").unwrap_err(),
            ZephyrError::BadHeader { line: 1 }
        );
        assert_eq!(
            Dump::parse(b"Perf buf length 2\n0000000000000000\n0000000000000000\n").unwrap_err(),
            ZephyrError::ZeroLengthSample { line: 2 }
        );
        assert_eq!(
            Dump::parse(b"Perf buf length 2\n0000000000401a2c\n0000000000000000\n").unwrap_err(),
            ZephyrError::ImpossibleSample {
                line: 2,
                frames: 0x401a2c,
                buffer: 2
            }
        );
    }

    #[test]
    fn merge_drops_repeats_and_placeholders_follow_the_script() {
        let syms = FuncSymbols::from_table([(0x1000, 0x10, "fib"), (0x1020, 0x10, "main")]);
        let d = dump(
            "Perf buf length 6\n0000000000000005\n0000000000001004\n0000000000001008\n\
             0000000000009999\n0000000000000000\n0000000000001024\n",
        );
        let run = |merge| {
            collapse(
                &d,
                &syms,
                None,
                CollapseOptions {
                    merge,
                    aggregate: false,
                },
            )
            .unwrap()
            .to_text()
        };
        assert_eq!(run(false), "main;nullptr;[unknown];fib;fib 1\n");
        assert_eq!(run(true), "main;nullptr;[unknown];fib 1\n");
    }

    #[test]
    fn aggregate_sums_identical_stacks_sorted() {
        let syms = FuncSymbols::from_table([(0x1000, 0x10, "a"), (0x1020, 0x10, "b")]);
        let d = dump(
            "Perf buf length 6\n0000000000000001\n0000000000001020\n\
             0000000000000001\n0000000000001000\n0000000000000001\n0000000000001028\n",
        );
        let opts = CollapseOptions {
            merge: true,
            aggregate: true,
        };
        assert_eq!(
            collapse(&d, &syms, None, opts).unwrap().to_text(),
            "a 1\nb 2\n"
        );
    }
}
