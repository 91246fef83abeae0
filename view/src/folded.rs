//! Folded stacks (`root;child;leaf count`, Brendan Gregg's format) from a
//! trace, three ways:
//!
//! - **traced**: the recorded calls, each path weighted by its exact self time
//!   in nanoseconds (duration minus the recorded children's durations);
//! - **sampled**: every sample's stack, resolved through a [`Resolve`]r, root
//!   first, one count per sample;
//! - **combined**: each sample joined to the innermost traced call open on its
//!   thread, its frames *below* that call hung under the exact traced path.
//!   Traced frames keep their exact time; the samples below a traced frame
//!   share out that frame's self time (the time no traced child accounts for)
//!   in proportion to their counts, in integer nanoseconds with a
//!   largest-remainder split, so every traced frame's total in the combined
//!   output equals its total in the traced output exactly.
//!
//! Plus a **flame chart** of the traced calls ([`ChartBuilder`]): one line per
//! stretch of a call's self time, in time order per thread, so that with
//! inferno's `flame_chart` the x axis is time.
//!
//! Memory is one node per distinct stack (plus, for the chart, one entry per
//! line, which inferno holds anyway): what a flamegraph needs, never the
//! trace. On a mid-stream read error everything read so far is rendered and
//! the error returned, as in the other views.
//!
//! ## The combined join
//!
//! Calls of a thread arrive in pre-order and samples in time order within the
//! thread's stream, so a per-thread stack of open calls is enough: before a
//! sample at `ts`, calls that ended at or before `ts` are closed; the deepest
//! call left is the one the sample interrupted. The sampler also recorded how
//! many traced calls were open (`shadow_depth`); when the two disagree the
//! recorded depth wins (the shallower open call with `depth < shadow_depth`)
//! and the disagreement is counted. Then a [`Cut`] finds the traced
//! function's own frame in the resolved sampled stack: the frames inside it
//! (innermost first, up to but excluding that frame) are what ran below the
//! traced call and become its sampled children. [`RecordedCut`] (the default)
//! uses the index the sampler found by comparing stack addresses
//! ([`Sample::cut`]), falling back to [`NameCut`], which matches the traced
//! site's name against the resolved names. A sample whose traced frame is not
//! found goes under the traced call as `[unmatched];<all frames>`. Samples
//! taken outside any traced call keep their whole stack and weigh one sampling
//! period each (from `meta.sampling`, e.g. `cpu-clock@999Hz`).

use super::format::human_duration;
use super::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Call, Event, Lost, Sample, SiteInfo, TraceError, TraceMeta};
use std::collections::HashMap;
use std::io::{self, Write};

/// Address to names: innermost first, inlined frames expanded (the first name
/// is the innermost inlined function at `addr`, the last the function the
/// code belongs to). `is_return_address` asks for the call site (`addr - 1`)
/// rather than the instruction at `addr`: every frame but a sample's first.
pub trait Resolve {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String>;

    /// What the binary says about the frame at `addr` beyond its names (see
    /// [`FrameInfo`]); nothing by default.
    fn frame_info(&mut self, _addr: u64, _is_return_address: bool) -> FrameInfo {
        FrameInfo::default()
    }
}

impl<R: Resolve + ?Sized> Resolve for &mut R {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        (**self).frames(addr, is_return_address)
    }
    fn frame_info(&mut self, addr: u64, is_return_address: bool) -> FrameInfo {
        (**self).frame_info(addr, is_return_address)
    }
}

impl<R: Resolve + ?Sized> Resolve for Box<R> {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        (**self).frames(addr, is_return_address)
    }
    fn frame_info(&mut self, addr: u64, is_return_address: bool) -> FrameInfo {
        (**self).frame_info(addr, is_return_address)
    }
}

/// One sampled frame as the binary describes it: what [`ChainCut`] needs to
/// tell a frame the frame-pointer walk skipped from one that is not there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameInfo {
    /// Whether the function had its frame record (saved frame pointer and
    /// return address, the frame pointer pointing at them) set up at this
    /// address, from the binary's call-frame information (`.eh_frame`): `Some(false)`
    /// for code without frame pointers (libc's `malloc`, `memchr`; a shim
    /// that jumps on) and for a function's first and last instructions
    /// (before `push rbp; mov rbp, rsp`, after `pop rbp`). A frame-pointer
    /// walk from such a leaf skips its caller. `None`: not known.
    pub frame_record: Option<bool>,
    /// The address is in fgtrace's own probe (inlined into a traced function
    /// or called from it): the traced call there is being entered or left.
    pub in_probe: bool,
}

/// No symbols: every address as `0x...` (until a symbolizer is plugged in).
#[derive(Clone, Copy, Debug, Default)]
pub struct HexResolve;

impl Resolve for HexResolve {
    fn frames(&mut self, addr: u64, _is_return_address: bool) -> Vec<String> {
        vec![format!("{addr:#x}")]
    }
}

/// A closure as a resolver (tests, ad-hoc symbol tables).
pub struct FnResolve<F>(pub F);

impl<F: FnMut(u64, bool) -> Vec<String>> Resolve for FnResolve<F> {
    fn frames(&mut self, addr: u64, is_return_address: bool) -> Vec<String> {
        (self.0)(addr, is_return_address)
    }
}

/// A sample's resolved stack, as a [`Cut`] sees it.
pub struct SampleStack<'s> {
    pub sample: &'s Sample,
    /// Resolved names, innermost first (inlined frames expanded).
    pub names: &'s [&'s str],
    /// For each name, the index into `sample.frames` it was resolved from.
    pub frame_of: &'s [u32],
    /// The traced calls open at the sample (outermost first, the call the
    /// sample is joined to last): what [`ChainCut`] matches.
    pub open: &'s [&'s SiteInfo],
    /// For each of `sample.frames`, what the binary says about it (empty:
    /// nothing known).
    pub info: &'s [FrameInfo],
}

/// Finds the traced function's own frame in a sampled stack: the pluggable
/// step of the combined join.
pub trait Cut {
    /// Index into `stack.names` of the frame of `site` (the innermost traced
    /// call open at the sample); the names before it ran below that call.
    /// `None`: not found (the sample goes under `[unmatched]`).
    fn cut(&mut self, site: &SiteInfo, stack: &SampleStack<'_>) -> Option<usize>;
}

/// Matches the traced site's name against the resolved names (innermost match).
#[derive(Clone, Copy, Debug, Default)]
pub struct NameCut;

impl Cut for NameCut {
    fn cut(&mut self, site: &SiteInfo, stack: &SampleStack<'_>) -> Option<usize> {
        stack.names.iter().position(|n| site_matches(site, n))
    }
}

/// Where the innermost open traced call sits in a sampled stack, found from
/// names alone (what a kernel call chain needs: it has return addresses but
/// no frame addresses to compare with the stack pointer a call recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainMatch {
    /// Index into the names (innermost first) of the traced call's frame.
    At(usize),
    /// The open traced calls are not all in the stack, in order (a frame the
    /// walk skipped, a truncated chain, no symbols, a `name = ".."` override).
    NotFound,
    /// More than one frame fits: the stack holds more frames of a traced
    /// function than calls of it are open (a call the trace did not keep:
    /// depth limit, threshold, loss), so which one is the open call is a guess.
    Ambiguous,
}

/// Matches the open traced calls (outermost first) against the resolved
/// stack (innermost first): every open call must match a frame of its
/// function, in nesting order, and the innermost call's frame must be the
/// same whether the calls are matched from the root inwards or from the leaf
/// outwards. Recursion is told apart by the number of open calls of each
/// function: four open `f` calls need four `f` frames, the fourth from the
/// root being the innermost open call.
pub fn chain_match(open: &[&SiteInfo], names: &[&str]) -> ChainMatch {
    let site_matches = chain_site_matches;
    if open.is_empty() {
        return ChainMatch::NotFound;
    }
    // From the root: each call takes the outermost frame left (highest index).
    let mut from_root = names.len();
    for site in open {
        match names[..from_root]
            .iter()
            .rposition(|n| site_matches(site, n))
        {
            Some(j) => from_root = j,
            None => return ChainMatch::NotFound,
        }
    }
    // From the leaf: each call, innermost first, takes the innermost frame
    // left (lowest index past the previous one).
    let mut from_leaf = None;
    let mut next = 0;
    for (k, site) in open.iter().rev().enumerate() {
        match names[next..].iter().position(|n| site_matches(site, n)) {
            Some(j) => {
                if k == 0 {
                    from_leaf = Some(next + j);
                }
                next += j + 1;
            }
            None => return ChainMatch::NotFound,
        }
    }
    match from_leaf {
        Some(j) if j == from_root => ChainMatch::At(j),
        Some(_) => ChainMatch::Ambiguous,
        None => ChainMatch::NotFound,
    }
}

/// [`chain_match`], and where that finds no single answer, what the walk
/// itself tells ([`FrameInfo`], per sampled frame; `frame_of` maps each name
/// to its frame, as in [`SampleStack`]). Two cases are joined, neither by
/// guessing:
///
/// * **In a probe.** The innermost frames are fgtrace's probe, inlined into a
///   traced function (or called from it): that function's call is being
///   entered (before its start time) or left (after its end time), so its
///   frame is one more than the open calls, and not theirs. The open calls
///   must then match the frames outside it, as [`chain_match`] requires; the
///   probe's frames go below the innermost open call.
/// * **A leaf without a frame record.** The leaf's function had no frame
///   record of its own at the sampled address (code without frame pointers,
///   a function's first or last instructions), so the walk went on from its
///   caller's record and skipped the caller (and more, if that had none
///   either): the frames missing are right above the leaf. If the open calls
///   cannot all be found in the stack, the innermost ones are taken to be in
///   those missing frames only when that is the one way left: the outer open
///   calls match the frames above (unambiguously), no frame between the leaf
///   and them can have skipped another caller (each had its frame record),
///   no frame of an inner call's function is seen below them, and, when all
///   open calls are missing, the walk reached the thread's first frame (or
///   stopped at the leaf itself). The cut is then right above the leaf: what
///   ran below the innermost open call is the leaf (and the frames the walk
///   skipped, which no one can name).
pub fn chain_match_walk(
    open: &[&SiteInfo],
    names: &[&str],
    frame_of: &[u32],
    info: &[FrameInfo],
) -> ChainMatch {
    let full = chain_match(open, names);
    if matches!(full, ChainMatch::At(_))
        || open.is_empty()
        || names.is_empty()
        || frame_of.len() != names.len()
    {
        return full;
    }
    // Name ranges of the sampled frames, innermost first.
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (i, &f) in frame_of.iter().enumerate() {
        match ranges.last_mut() {
            Some(r) if frame_of[r.0] == f => r.1 = i + 1,
            _ => ranges.push((i, i + 1)),
        }
    }
    let frame = |k: usize| frame_of[ranges[k].0] as usize;
    let in_probe = |k: usize| {
        info.get(frame(k)).is_some_and(|f| f.in_probe)
            || names[ranges[k].0..ranges[k].1]
                .iter()
                .any(|n| n.contains("fgtrace_core::probe::"))
    };
    // The outermost frame whose code is the probe, up to the first frame of
    // an open call's function: the frames below it were called by the probe
    // (its thread-local access, helpers), the frame itself is the traced
    // function the probe was inlined into (or the probe's own).
    let first_open = (0..ranges.len())
        .find(|&k| {
            names[ranges[k].0..ranges[k].1]
                .iter()
                .any(|n| open.iter().any(|s| chain_site_matches(s, n)))
        })
        .unwrap_or(ranges.len() - 1);
    if let Some(p) = (0..=first_open).rev().find(|&k| in_probe(k)) {
        let end = ranges[p].1;
        return match chain_match(open, &names[end..]) {
            ChainMatch::At(j) => ChainMatch::At(end + j),
            other => other,
        };
    }
    let leaf_has_record = info.get(frame(0)).and_then(|f| f.frame_record);
    if full == ChainMatch::NotFound && leaf_has_record == Some(false) {
        return leaf_gap(open, names, &ranges, |k| {
            info.get(frame(k)).and_then(|f| f.frame_record) == Some(true)
        });
    }
    full
}

/// The second case of [`chain_match_walk`]: the innermost open calls in the
/// frames the walk skipped right above the leaf (`ranges[0]`).
fn leaf_gap(
    open: &[&SiteInfo],
    names: &[&str],
    ranges: &[(usize, usize)],
    has_record: impl Fn(usize) -> bool,
) -> ChainMatch {
    let n0 = ranges[0].1;
    let (leaf, rest) = names.split_at(n0);
    let any_of = |ns: &[&str], sites: &[&SiteInfo]| {
        ns.iter()
            .any(|n| sites.iter().any(|s| chain_site_matches(s, n)))
    };
    // The leaf is below every open call (it runs at the sample's time, inside
    // them), and named: an unnamed leaf may be a traced function itself.
    if any_of(leaf, open)
        || leaf
            .iter()
            .any(|n| n.starts_with('[') || n.starts_with("0x"))
    {
        return ChainMatch::NotFound;
    }
    if rest.is_empty() {
        // The walk stopped at the leaf: every open call is above it.
        return ChainMatch::At(n0);
    }
    let last = ranges.len() - 1;
    for k in 1..=open.len() {
        let (outer, inner) = open.split_at(open.len() - k);
        // `fm`: the frame of the outermost match; frames between the leaf
        // and it must each have had a frame record (no other skip).
        let (j, fm) = if outer.is_empty() {
            let root = &names[ranges[last].0..ranges[last].1];
            if !root.iter().any(|n| is_thread_entry(n)) {
                return ChainMatch::NotFound;
            }
            (rest.len(), last)
        } else {
            match chain_match(outer, rest) {
                ChainMatch::At(j) => {
                    let fm = ranges.iter().position(|r| r.0 <= n0 + j && n0 + j < r.1);
                    (j, fm.unwrap_or(last))
                }
                ChainMatch::Ambiguous => return ChainMatch::Ambiguous,
                ChainMatch::NotFound => continue,
            }
        };
        if !(1..fm).all(&has_record) {
            return ChainMatch::NotFound;
        }
        if any_of(&rest[..j], inner) {
            return ChainMatch::Ambiguous;
        }
        return ChainMatch::At(n0);
    }
    ChainMatch::NotFound
}

/// Where a thread's stack starts: a frame-pointer walk that reached it has
/// seen the whole stack (the C library's entry points; `clone3` leaves a
/// zero frame pointer for the new thread, `_start` for the main one).
fn is_thread_entry(name: &str) -> bool {
    matches!(
        strip_hash(name),
        "start_thread"
            | "clone"
            | "__clone"
            | "clone3"
            | "__clone3"
            | "_start"
            | "__libc_start_main"
            | "__libc_start_main_impl"
            | "__libc_start_call_main"
    )
}

/// [`site_matches`], or, for a name without a path, the site's own last
/// segment: inlined frames have only DWARF names, which line-tables-only
/// debug info (the release profile's usual setting) gives without the
/// module path (`parse_line` for `app::LineParser::parse_line`), generic
/// arguments aside. Matching more loosely costs nothing in correctness here:
/// [`chain_match`] still needs every open call in nesting order and one
/// answer from both ends.
fn chain_site_matches(site: &SiteInfo, resolved: &str) -> bool {
    if site_matches(site, resolved) {
        return true;
    }
    let n = normalize(resolved);
    !n.contains("::") && !n.is_empty() && site.name.rsplit("::").next() == Some(n.as_str())
}

/// Finds the traced frame by [`chain_match_walk`] ([`chain_match`], then the
/// frames the walk skipped, from [`SampleStack::info`]): the cut for samples
/// that carry none (kernel call chains from a perf ring). A stack that does
/// not match, or matches more than one way, is not guessed: the sample goes
/// under `[unmatched]` and is counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChainCut;

impl Cut for ChainCut {
    fn cut(&mut self, site: &SiteInfo, stack: &SampleStack<'_>) -> Option<usize> {
        let open: Vec<&SiteInfo>;
        let open = if stack.open.is_empty() {
            open = vec![site];
            &open[..]
        } else {
            stack.open
        };
        match chain_match_walk(open, stack.names, stack.frame_of, stack.info) {
            ChainMatch::At(j) => Some(j),
            ChainMatch::NotFound | ChainMatch::Ambiguous => None,
        }
    }
}

/// Uses the cut the sampler recorded ([`Sample::cut`], a raw frame index),
/// refined by name among that frame's inlined functions; without one, falls
/// back to [`NameCut`].
///
/// Names overrule the recorded index when they contradict it: if the frame it
/// points at is not the traced function but a frame at or outside it is
/// (a callee without its own frame record can make the address comparison
/// land one frame short), the innermost such frame is taken. Where no name
/// matches at all (no symbols, a `name = ".."` override), the recorded index
/// stands: it is the only evidence, and the right one when the traced
/// function also appears below itself untraced (depth limits, overruns).
/// The handler takes the first frame record at or above the traced call's
/// stack pointer to be the frame of the address before it; where that is the
/// leaf, the leaf had no frame record ([`FrameInfo::frame_record`]) and no
/// name matches, the record is the leaf's skipped caller's, and the cut is
/// right above the leaf.
/// A sample without a recorded cut (a perf ring's kernel call chain) is
/// joined by [`ChainCut`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordedCut;

impl Cut for RecordedCut {
    fn cut(&mut self, site: &SiteInfo, stack: &SampleStack<'_>) -> Option<usize> {
        if let Some(k) = stack.sample.cut {
            let first = stack.frame_of.iter().position(|&f| f == k);
            if let Some(first) = first {
                let last = stack
                    .frame_of
                    .iter()
                    .rposition(|&f| f == k)
                    .unwrap_or(first);
                // Inlined into the frame: the traced fn may be one of its
                // names. A full name first; else a path-less DWARF name
                // (release), the outermost such one in the frame, since a
                // callee of the same short name (a `new` inside `Foo::new`)
                // was inlined inside it.
                let exact = |i: &usize| site_matches(site, stack.names[*i]);
                let loose = |i: &usize| chain_site_matches(site, stack.names[*i]);
                if let Some(i) = (first..=last)
                    .find(exact)
                    .or_else(|| (first..=last).rev().find(loose))
                {
                    return Some(i);
                }
                let outer = (first..stack.names.len())
                    .find(exact)
                    .or_else(|| (first..stack.names.len()).find(loose));
                let any = || {
                    (0..stack.names.len())
                        .find(exact)
                        .or_else(|| (0..stack.names.len()).find(loose))
                };
                // Otherwise the frame's own function (its outermost name) is
                // it; but where the leaf had no frame record of its own, the
                // record the handler found first is its caller's, the frame
                // the walk skipped: that caller is the traced frame (its name
                // is nowhere in the stack), and the leaf ran below it.
                let leaf_without_record = stack
                    .info
                    .first()
                    .is_some_and(|f| f.frame_record == Some(false));
                let own = if k == 0 && leaf_without_record {
                    last + 1
                } else {
                    last
                };
                return Some(outer.or_else(any).unwrap_or(own));
            }
        }
        ChainCut.cut(site, stack)
    }
}

/// Whether a resolved (demangled) name is the traced `site`'s function:
/// `crate::module::Type::method` against `module_path` + `name`, ignoring the
/// symbol hash, generic arguments and `<T as Trait>` qualification; for an
/// `async fn`, also the body's `{{closure}}`/`{closure#0}` frames.
pub fn site_matches(site: &SiteInfo, resolved: &str) -> bool {
    // Cheap rejection first: most frames of a stack are other functions.
    let last = site.name.rsplit("::").next().unwrap_or("");
    if !resolved.contains(last) {
        return false;
    }
    let mut n = normalize(resolved);
    if site.is_async {
        while let Some(i) = n.rfind("::") {
            let last = &n[i + 2..];
            if last.starts_with('{') && last.contains("closure") {
                n.truncate(i);
            } else {
                break;
            }
        }
    }
    if n == site.full_name() {
        return true;
    }
    if site.module_path.is_empty() {
        return n == site.name || n.ends_with(&format!("::{}", site.name));
    }
    let krate = site.module_path.split("::").next().unwrap_or("");
    n.ends_with(&format!("::{}", site.name)) && (n.starts_with(&format!("{krate}::")))
}

/// `<a::T<u8> as b::Tr>::m::h0123456789abcdef` -> `a::T::m`.
fn normalize(name: &str) -> String {
    let name = strip_hash(name);
    // Demangled Rust names are ASCII; anything else is compared as it is.
    if !name.is_ascii() {
        return name.to_string();
    }
    let b = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'<' {
            let end = matching(b, i);
            let segment_start = i == 0 || out.ends_with("::");
            if segment_start {
                // Qualified path `<A as B>`: keep A (normalized).
                let inner = &name[i + 1..end.min(b.len())];
                let inner = split_as(inner);
                out.push_str(&normalize(inner));
            }
            // Generic arguments after an identifier: dropped.
            i = end + 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Index of the `>` closing the `<` at `open` (or the end).
fn matching(b: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'<' => depth += 1,
            b'>' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    b.len()
}

/// `A as B` at the top level of `s` -> `A`.
fn split_as(s: &str) -> &str {
    let b = s.as_bytes();
    let mut depth = 0i32;
    for j in 0..b.len() {
        match b[j] {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b' ' if depth == 0 && s[j..].starts_with(" as ") => return &s[..j],
            _ => {}
        }
    }
    s
}

fn strip_hash(name: &str) -> &str {
    if let Some(i) = name.rfind("::h") {
        let h = &name[i + 3..];
        if h.len() == 16 && h.bytes().all(|c| c.is_ascii_hexdigit()) {
            return &name[..i];
        }
    }
    name
}

/// Where a frame came from; the flamegraph colours frames by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The thread a stack ran on (`--per-thread`).
    Thread,
    /// A recorded call: exact time and call count.
    Traced,
    /// A frame of a sample.
    Sampled,
    /// A marker fgtrace inserted (`[unmatched]`, `[unknown]`).
    Marker,
}

/// Options shared by the traced, sampled and combined stacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldedOptions {
    /// Start every stack with its thread (`name-tid`).
    pub per_thread: bool,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
    /// Traced frames as `Type::method` rather than `crate::module::Type::method`.
    pub short_names: bool,
    /// Combined: when the sampler's `shadow_depth` disagrees with the calls
    /// open at the sample's time, believe the sampler (the default).
    pub trust_shadow_depth: bool,
    /// Combined: nanoseconds one sample outside any traced call stands for;
    /// `None` takes the period from `meta.sampling` (`...@999Hz`).
    pub sample_period_ns: Option<u64>,
}

impl Default for FoldedOptions {
    fn default() -> Self {
        FoldedOptions {
            per_thread: false,
            threads: Vec::new(),
            short_names: false,
            trust_shadow_depth: true,
            sample_period_ns: None,
        }
    }
}

/// What was counted, for subtitles and for checking the join.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoldedSummary {
    /// Traced calls read.
    pub calls: u64,
    /// Samples read.
    pub samples: u64,
    /// Samples lost while recording (metadata, selected threads).
    pub samples_lost: u64,
    /// Call records lost (metadata and `Lost` events, selected threads).
    pub records_lost: u64,
    /// `meta.sampling`.
    pub sampling: Option<String>,
    /// Combined: samples whose traced frame was not found in their stack.
    pub unmatched: u64,
    /// Combined: samples taken while no traced call was open.
    pub untraced: u64,
    /// Combined: samples whose `shadow_depth` disagreed with the open calls.
    pub depth_mismatches: u64,
    /// Combined: nanoseconds one untraced sample weighs.
    pub period_ns: u64,
    /// The period was not known from the trace and was assumed (1 ms).
    pub period_assumed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Traced,
    Sampled,
    Combined,
}

const NONE: u32 = u32::MAX;
const UNMATCHED: &str = "[unmatched]";
const UNKNOWN: &str = "[unknown]";

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) parent: u32,
    pub(crate) name: u32,
    pub(crate) origin: Origin,
    /// Sampled/marker nodes under a traced call: that call's node, whose self
    /// time they share. `NONE` for samples outside any traced call.
    anchor: u32,
    pub(crate) calls: u64,
    pub(crate) total_ns: u64,
    pub(crate) self_ns: u64,
    /// Samples whose stack ends here.
    pub(crate) own_samples: u64,
    /// Samples in this subtree (filled by `finish`).
    pub(crate) samples: u64,
    /// Count of the folded line ending here.
    pub(crate) weight: u64,
    /// Weight of this subtree: the frame's width (filled by `finish`).
    pub(crate) width: u64,
}

/// Interned names and the tree of distinct stacks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tree {
    pub(crate) nodes: Vec<Node>,
    index: HashMap<(u32, u32, Origin), u32>,
    pub(crate) names: Vec<String>,
    name_ids: HashMap<String, u32>,
}

impl Tree {
    /// Folded lines split frames at `;` and end at the last space before the
    /// count; a `;` or line break inside a name would move frames, so they
    /// become `,` and a space.
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(s) {
            return id;
        }
        let clean: String = s
            .chars()
            .map(|c| match c {
                ';' => ',',
                '\n' | '\r' => ' ',
                c => c,
            })
            .collect();
        let id = self.names.len() as u32;
        self.names.push(clean);
        self.name_ids.insert(s.to_string(), id);
        id
    }

    /// The interned name of `site` (short or full; `[site N]` past the
    /// table), `ids` caching the ids of the sites so far.
    fn site_name(&mut self, ids: &mut Vec<u32>, sites: &[SiteInfo], short: bool, site: u32) -> u32 {
        while ids.len() <= site as usize {
            let i = ids.len();
            let name = match sites.get(i) {
                Some(s) if short => s.name.clone(),
                Some(s) => s.full_name(),
                None => format!("[site {i}]"),
            };
            ids.push(self.intern(&name));
        }
        ids[site as usize]
    }

    fn child(&mut self, parent: u32, name: u32, origin: Origin) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.index.entry((parent, name, origin)).or_insert(next);
        if id == next {
            self.nodes.push(Node {
                parent,
                name,
                origin,
                anchor: NONE,
                calls: 0,
                total_ns: 0,
                self_ns: 0,
                own_samples: 0,
                samples: 0,
                weight: 0,
                width: 0,
            });
        }
        id
    }

    /// Node ids from the root to `node`.
    pub(crate) fn path(&self, mut node: u32) -> Vec<u32> {
        let mut p = Vec::new();
        while node != NONE {
            p.push(node);
            node = self.nodes[node as usize].parent;
        }
        p.reverse();
        p
    }

    pub(crate) fn name(&self, node: u32) -> &str {
        &self.names[self.nodes[node as usize].name as usize]
    }

    fn line(&self, node: u32) -> String {
        let mut s = String::new();
        for (i, n) in self.path(node).into_iter().enumerate() {
            if i > 0 {
                s.push(';');
            }
            s.push_str(self.name(n));
        }
        s
    }

    /// Subtree sums: children are always created after their parent, so one
    /// backward pass adds every node into its parent.
    fn sum_up(&mut self) {
        for n in &mut self.nodes {
            n.width = n.weight;
            n.samples = n.own_samples;
        }
        for i in (0..self.nodes.len()).rev() {
            let (p, w, s) = {
                let n = &self.nodes[i];
                (n.parent, n.width, n.samples)
            };
            if p != NONE {
                let parent = &mut self.nodes[p as usize];
                parent.width += w;
                parent.samples += s;
            }
        }
    }
}

/// Numbers of one frame (all nodes with the same path of names, summed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameStats {
    /// Origin of the first node with this path (traced before sampled).
    pub origin: Option<Origin>,
    /// Traced calls at this path.
    pub calls: u64,
    /// Their exact inclusive time.
    pub total_ns: u64,
    /// Their exact self time (before samples took their share).
    pub self_ns: u64,
    /// Samples at or below this frame.
    pub samples: u64,
    /// The frame's width in the output's unit (ns or samples): its own count
    /// plus everything above it.
    pub width: u64,
    /// The count of the folded line that ends at this frame.
    pub weight: u64,
}

/// Built stacks, ready to print as folded lines or draw.
#[derive(Clone, Debug)]
pub struct Folded {
    pub(crate) tree: Tree,
    count_name: &'static str,
    summary: FoldedSummary,
    pub(crate) mode_name: &'static str,
}

impl Folded {
    /// `ns` (traced, combined) or `samples`.
    pub fn count_name(&self) -> &'static str {
        self.count_name
    }

    pub fn summary(&self) -> &FoldedSummary {
        &self.summary
    }

    /// Sum of all counts.
    pub fn total(&self) -> u64 {
        self.tree.nodes.iter().map(|n| n.weight).sum()
    }

    /// Folded lines, sorted, identical stacks merged, zero counts left out.
    pub fn lines(&self) -> Vec<(String, u64)> {
        let mut lines: Vec<(String, u64)> = self
            .tree
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.weight > 0)
            .map(|(i, n)| (self.tree.line(i as u32), n.weight))
            .collect();
        lines.sort();
        lines.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        lines
    }

    /// Writes `stack count` lines.
    pub fn write_to(&self, mut w: impl Write) -> io::Result<()> {
        for (stack, count) in self.lines() {
            writeln!(w, "{stack} {count}")?;
        }
        w.flush()
    }

    /// The numbers of the frame at `path` (names, root first), if any.
    pub fn stats(&self, path: &[&str]) -> Option<FrameStats> {
        let mut found: Option<FrameStats> = None;
        for (i, n) in self.tree.nodes.iter().enumerate() {
            if n.name as usize >= self.tree.names.len() {
                continue;
            }
            let p = self.tree.path(i as u32);
            if p.len() != path.len()
                || p.iter()
                    .zip(path)
                    .any(|(&id, name)| self.tree.name(id) != *name)
            {
                continue;
            }
            let s = found.get_or_insert_with(FrameStats::default);
            if s.origin.is_none() || n.origin == Origin::Traced {
                s.origin = Some(n.origin);
            }
            s.calls += n.calls;
            s.total_ns += n.total_ns;
            s.self_ns += n.self_ns;
            s.samples += n.samples;
            s.width += n.width;
            s.weight += n.weight;
        }
        found
    }

    /// One line saying what the counts are and what was lost or unmatched.
    pub fn subtitle(&self) -> String {
        let s = &self.summary;
        let mut parts = Vec::new();
        let how = |extra: String| match &s.sampling {
            Some(x) => format!("{x}, {extra}"),
            None => extra,
        };
        match self.mode_name {
            "traced" => parts.push(format!("{} traced calls, exact self time in ns", s.calls)),
            "sampled" => parts.push(format!(
                "{} samples ({})",
                s.samples,
                how(format!("{} lost", s.samples_lost))
            )),
            _ => {
                parts.push(format!(
                    "{} traced calls (exact ns), {} samples ({}) sharing their self time",
                    s.calls,
                    s.samples,
                    how(format!("{} lost", s.samples_lost))
                ));
                if s.unmatched > 0 {
                    parts.push(format!("{} unmatched", s.unmatched));
                }
                if s.depth_mismatches > 0 {
                    parts.push(format!("{} shadow-depth mismatches", s.depth_mismatches));
                }
                if s.untraced > 0 {
                    parts.push(format!(
                        "{} outside traced calls at {}{} each",
                        s.untraced,
                        human_duration(s.period_ns),
                        if s.period_assumed { " (assumed)" } else { "" }
                    ));
                }
            }
        }
        if s.records_lost > 0 {
            parts.push(format!("LOST {} records", s.records_lost));
        }
        parts.join(", ")
    }
}

#[derive(Clone, Copy, Debug)]
struct Open {
    node: u32,
    site: u32,
    depth: u32,
    end: u64,
    dur: u64,
    children: u64,
}

#[derive(Default)]
struct ThreadState {
    root: Option<u32>,
    stack: Vec<Open>,
}

/// Builds [`Folded`] stacks from events pushed one at a time.
pub struct FoldedBuilder<'a, R = HexResolve, C = RecordedCut> {
    meta: &'a TraceMeta,
    opts: FoldedOptions,
    mode: Mode,
    resolver: R,
    cut: C,
    mask: Vec<bool>,
    tree: Tree,
    threads: Vec<ThreadState>,
    site_names: Vec<u32>,
    cache: HashMap<(u64, bool), Vec<u32>>,
    info_cache: HashMap<(u64, bool), FrameInfo>,
    summary: FoldedSummary,
    lost_events: Vec<u64>,
}

impl<'a> FoldedBuilder<'a> {
    /// Traced calls, weighted by exact self time (ns).
    pub fn traced(meta: &'a TraceMeta, opts: &FoldedOptions) -> Self {
        Self::new(meta, opts, Mode::Traced, HexResolve)
    }
}

impl<'a, R: Resolve> FoldedBuilder<'a, R> {
    /// Samples, one count each.
    pub fn sampled(meta: &'a TraceMeta, opts: &FoldedOptions, resolver: R) -> Self {
        Self::new(meta, opts, Mode::Sampled, resolver)
    }

    /// Traced calls with the samples below them (ns; see the module doc).
    pub fn combined(meta: &'a TraceMeta, opts: &FoldedOptions, resolver: R) -> Self {
        Self::new(meta, opts, Mode::Combined, resolver)
    }

    fn new(meta: &'a TraceMeta, opts: &FoldedOptions, mode: Mode, resolver: R) -> Self {
        let (period_ns, period_assumed) = match opts.sample_period_ns {
            Some(p) => (p.max(1), false),
            None => match meta.sampling.as_deref().and_then(sampling_hz) {
                Some(hz) => (((1e9 / hz).round() as u64).max(1), false),
                None => (1_000_000, true),
            },
        };
        FoldedBuilder {
            meta,
            opts: opts.clone(),
            mode,
            resolver,
            cut: RecordedCut,
            mask: thread_mask(meta, &opts.threads),
            tree: Tree::default(),
            threads: Vec::new(),
            site_names: Vec::new(),
            cache: HashMap::new(),
            info_cache: HashMap::new(),
            summary: FoldedSummary {
                sampling: meta.sampling.clone(),
                period_ns,
                period_assumed,
                ..Default::default()
            },
            lost_events: Vec::new(),
        }
    }
}

/// `cpu-clock@999Hz` -> 999, `10kHz` -> 10000.
fn sampling_hz(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let end = lower.find("hz")?;
    let head = lower[..end].trim_end();
    let (head, scale) = match head.strip_suffix('k') {
        Some(h) => (h, 1e3),
        None => match head.strip_suffix('m') {
            Some(h) => (h, 1e6),
            None => (head, 1.0),
        },
    };
    let start = head
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    let hz: f64 = head[start..].parse().ok()?;
    (hz > 0.0).then_some(hz * scale)
}

impl<'a, R: Resolve, C: Cut> FoldedBuilder<'a, R, C> {
    /// Replaces the step that finds the traced frame in a sample (combined).
    pub fn with_cut<C2: Cut>(self, cut: C2) -> FoldedBuilder<'a, R, C2> {
        FoldedBuilder {
            meta: self.meta,
            opts: self.opts,
            mode: self.mode,
            resolver: self.resolver,
            cut,
            mask: self.mask,
            tree: self.tree,
            threads: self.threads,
            site_names: self.site_names,
            cache: self.cache,
            info_cache: self.info_cache,
            summary: self.summary,
            lost_events: self.lost_events,
        }
    }

    /// Pushes events until the stream ends or fails; the state read so far is
    /// kept either way, so `finish` renders what came before the damage.
    pub fn extend(
        &mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> Result<(), TraceError> {
        super::push_all(events, |ev| self.push(ev))
    }

    pub fn push(&mut self, ev: &Event) {
        if !shown(&self.mask, !self.opts.threads.is_empty(), ev.thread()) {
            return;
        }
        match ev {
            Event::Call(c) if self.mode != Mode::Sampled => self.call(c),
            Event::Lost(l) => self.lost(l),
            Event::Sample(s) => self.sample(s),
            _ => {}
        }
    }

    fn thread(&mut self, t: u32) -> &mut ThreadState {
        let t = t as usize;
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, ThreadState::default);
        }
        &mut self.threads[t]
    }

    /// The node stacks of thread `t` hang from: its thread frame, or the top.
    fn root(&mut self, t: u32) -> u32 {
        if !self.opts.per_thread {
            return NONE;
        }
        if let Some(r) = self.thread(t).root {
            return r;
        }
        let label = self.meta.thread_label(t);
        let name = self.tree.intern(&label);
        let r = self.tree.child(NONE, name, Origin::Thread);
        self.thread(t).root = Some(r);
        r
    }

    fn site_name(&mut self, site: u32) -> u32 {
        let short = self.opts.short_names;
        self.tree
            .site_name(&mut self.site_names, &self.meta.sites, short, site)
    }

    fn call(&mut self, c: &Call) {
        self.pop_to(c.thread, c.depth);
        let root = self.root(c.thread);
        let name = self.site_name(c.site);
        let parent = match self.thread(c.thread).stack.last_mut() {
            // The nearest open call is the parent (past a loss, an ancestor,
            // whose time includes this call all the same).
            Some(p) => {
                p.children = p.children.saturating_add(c.dur_ns);
                p.node
            }
            None => root,
        };
        let node = self.tree.child(parent, name, Origin::Traced);
        let n = &mut self.tree.nodes[node as usize];
        n.calls += 1;
        n.total_ns = n.total_ns.saturating_add(c.dur_ns);
        self.thread(c.thread).stack.push(Open {
            node,
            site: c.site,
            depth: c.depth,
            end: c.end_ns(),
            dur: c.dur_ns,
            children: 0,
        });
        self.summary.calls += 1;
    }

    fn lost(&mut self, l: &Lost) {
        if self.mode != Mode::Sampled {
            self.pop_to(l.thread, l.depth);
        }
        let t = l.thread as usize;
        if self.lost_events.len() <= t {
            self.lost_events.resize(t + 1, 0);
        }
        self.lost_events[t] += l.count;
    }

    fn close(tree: &mut Tree, o: Open) {
        let n = &mut tree.nodes[o.node as usize];
        n.self_ns = n.self_ns.saturating_add(o.dur.saturating_sub(o.children));
    }

    fn pop_to(&mut self, t: u32, depth: u32) {
        let Some(ts) = self.threads.get_mut(t as usize) else {
            return;
        };
        while ts.stack.last().is_some_and(|o| o.depth >= depth) {
            let o = ts.stack.pop().expect("checked above");
            Self::close(&mut self.tree, o);
        }
    }

    /// Resolved name ids of a sample (innermost first) and the raw frame each came from.
    fn resolve(&mut self, s: &Sample) -> (Vec<u32>, Vec<u32>) {
        let mut names = Vec::new();
        let mut frame_of = Vec::new();
        for (i, &addr) in s.frames.iter().enumerate() {
            let key = (addr, i > 0);
            if !self.cache.contains_key(&key) {
                let resolved = self.resolver.frames(addr, i > 0);
                let ids: Vec<u32> = if resolved.is_empty() {
                    vec![self.tree.intern(&format!("{addr:#x}"))]
                } else {
                    resolved.iter().map(|n| self.tree.intern(n)).collect()
                };
                self.cache.insert(key, ids);
            }
            let ids = &self.cache[&key];
            names.extend_from_slice(ids);
            frame_of.extend(std::iter::repeat_n(i as u32, ids.len()));
        }
        (names, frame_of)
    }

    /// Hangs `names` (root first) under `from`; the last node gets the sample.
    fn attach(&mut self, from: u32, names: impl IntoIterator<Item = (u32, Origin)>, anchor: u32) {
        let mut node = from;
        for (name, origin) in names {
            node = self.tree.child(node, name, origin);
            self.tree.nodes[node as usize].anchor = anchor;
        }
        if node == NONE {
            let name = self.tree.intern(UNKNOWN);
            node = self.tree.child(NONE, name, Origin::Marker);
        }
        self.tree.nodes[node as usize].own_samples += 1;
    }

    fn sample(&mut self, s: &Sample) {
        self.summary.samples += 1;
        let (names, frame_of) = self.resolve(s);
        let root = self.root(s.thread);
        if self.mode == Mode::Sampled {
            let path: Vec<(u32, Origin)> =
                names.iter().rev().map(|&n| (n, Origin::Sampled)).collect();
            let path = if path.is_empty() {
                vec![(self.tree.intern(UNKNOWN), Origin::Marker)]
            } else {
                path
            };
            self.attach(root, path, NONE);
            return;
        }
        // Close the calls that ended by the sample's time.
        let tree = &mut self.tree;
        let st = {
            let t = s.thread as usize;
            if self.threads.len() <= t {
                self.threads.resize_with(t + 1, ThreadState::default);
            }
            &mut self.threads[t]
        };
        while st.stack.last().is_some_and(|o| o.end <= s.ts_ns) {
            let o = st.stack.pop().expect("checked above");
            Self::close(tree, o);
        }
        let live = st.stack.last().map_or(0, |o| o.depth + 1);
        let mut chosen = st.stack.len().checked_sub(1);
        if s.shadow_depth != live {
            self.summary.depth_mismatches += 1;
            if self.opts.trust_shadow_depth && s.shadow_depth < live {
                chosen = st.stack.iter().rposition(|o| o.depth < s.shadow_depth);
            }
        }
        let Some(i) = chosen else {
            self.summary.untraced += 1;
            let path: Vec<(u32, Origin)> =
                names.iter().rev().map(|&n| (n, Origin::Sampled)).collect();
            let path = if path.is_empty() {
                vec![(self.tree.intern(UNKNOWN), Origin::Marker)]
            } else {
                path
            };
            self.attach(root, path, NONE);
            return;
        };
        let open = st.stack[i];
        let info: Vec<FrameInfo> = s
            .frames
            .iter()
            .enumerate()
            .map(|(k, &addr)| {
                *self
                    .info_cache
                    .entry((addr, k > 0))
                    .or_insert_with(|| self.resolver.frame_info(addr, k > 0))
            })
            .collect();
        let st = &self.threads[s.thread as usize];
        let cut = match self.meta.sites.get(open.site as usize) {
            Some(site) => {
                let strs: Vec<&str> = names
                    .iter()
                    .map(|&n| self.tree.names[n as usize].as_str())
                    .collect();
                let open: Vec<&SiteInfo> = st.stack[..=i]
                    .iter()
                    .filter_map(|o| self.meta.sites.get(o.site as usize))
                    .collect();
                let stack = SampleStack {
                    sample: s,
                    names: &strs,
                    frame_of: &frame_of,
                    open: &open,
                    info: &info,
                };
                self.cut.cut(site, &stack).filter(|&j| j <= names.len())
            }
            None => None,
        };
        match cut {
            Some(j) => {
                let below = names[..j].iter().rev().map(|&n| (n, Origin::Sampled));
                self.attach(open.node, below.collect::<Vec<_>>(), open.node);
            }
            None => {
                self.summary.unmatched += 1;
                let marker = self.tree.intern(UNMATCHED);
                let path: Vec<(u32, Origin)> = std::iter::once((marker, Origin::Marker))
                    .chain(names.iter().rev().map(|&n| (n, Origin::Sampled)))
                    .collect();
                self.attach(open.node, path, open.node);
            }
        }
    }

    /// Closes the open calls, shares self time out to samples, sums subtrees.
    /// Reads `events`, then writes the folded text to `out`: everything read
    /// before a stream error is written, then the error is returned.
    pub fn write(
        mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
        out: impl Write,
    ) -> Result<(), TraceError> {
        let read = self.extend(events);
        self.finish().write_to(out)?;
        read
    }

    pub fn finish(mut self) -> Folded {
        for t in 0..self.threads.len() {
            self.pop_to(t as u32, 0);
        }
        let tree = &mut self.tree;
        match self.mode {
            Mode::Traced => {
                for n in &mut tree.nodes {
                    n.weight = n.self_ns;
                }
            }
            Mode::Sampled => {
                for n in &mut tree.nodes {
                    n.weight = n.own_samples;
                }
            }
            Mode::Combined => share_self_time(tree, self.summary.period_ns),
        }
        tree.sum_up();
        for (i, t) in self.meta.threads.iter().enumerate() {
            if shown(&self.mask, !self.opts.threads.is_empty(), i as u32) {
                // Counts from the file's metadata: saturate.
                self.summary.samples_lost =
                    self.summary.samples_lost.saturating_add(t.samples_lost);
                self.summary.records_lost = self
                    .summary
                    .records_lost
                    .saturating_add(t.lost.max(self.lost_events.get(i).copied().unwrap_or(0)));
            }
        }
        let (count_name, mode_name) = match self.mode {
            Mode::Traced => ("ns", "traced"),
            Mode::Sampled => ("samples", "sampled"),
            Mode::Combined => ("ns", "combined"),
        };
        Folded {
            tree: self.tree,
            count_name,
            summary: self.summary,
            mode_name,
        }
    }
}

/// Combined weights: each traced node's self time split among its own samples
/// (which stay with it) and the sampled stacks anchored to it; samples outside
/// traced calls weigh one period each.
fn share_self_time(tree: &mut Tree, period_ns: u64) {
    let mut groups: HashMap<u32, Vec<u32>> = HashMap::new();
    for (i, n) in tree.nodes.iter().enumerate() {
        if n.origin != Origin::Traced && n.own_samples > 0 {
            if n.anchor == NONE {
                continue;
            }
            groups.entry(n.anchor).or_default().push(i as u32);
        }
    }
    for i in 0..tree.nodes.len() {
        let n = &tree.nodes[i];
        match n.origin {
            Origin::Traced => {
                let members = groups.remove(&(i as u32)).unwrap_or_default();
                let mut counts = vec![n.own_samples];
                counts.extend(members.iter().map(|&m| tree.nodes[m as usize].own_samples));
                let shares = largest_remainder(n.self_ns, &counts);
                tree.nodes[i].weight = shares[0];
                for (m, share) in members.iter().zip(&shares[1..]) {
                    tree.nodes[*m as usize].weight = *share;
                }
            }
            _ if n.anchor == NONE => {
                tree.nodes[i].weight = n.own_samples.saturating_mul(period_ns);
            }
            _ => {}
        }
    }
}

/// Splits `total` in proportion to `counts` in integers that sum to `total`
/// exactly: floors first, then one more to the largest remainders (earlier
/// entries first on ties). All zero counts: everything to the first entry.
pub fn largest_remainder(total: u64, counts: &[u64]) -> Vec<u64> {
    let sum: u128 = counts.iter().map(|&c| c as u128).sum();
    let mut out = vec![0u64; counts.len()];
    if counts.is_empty() {
        return out;
    }
    if sum == 0 {
        out[0] = total;
        return out;
    }
    let mut rems: Vec<(u128, usize)> = Vec::with_capacity(counts.len());
    let mut given: u64 = 0;
    for (i, &c) in counts.iter().enumerate() {
        let p = total as u128 * c as u128;
        out[i] = (p / sum) as u64;
        given += out[i];
        rems.push((p % sum, i));
    }
    rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rems.iter().take((total - given) as usize) {
        out[i] += 1;
    }
    out
}

/// Traced stacks as folded text (ns of self time), into `out`.
pub fn traced_folded<W: Write>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    FoldedBuilder::traced(meta, opts).write(events, out)
}

/// Sampled stacks as folded text (one count per sample), into `out`.
pub fn sampled_folded<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    resolver: R,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    FoldedBuilder::sampled(meta, opts, resolver).write(events, out)
}

/// Combined stacks as folded text (ns; see the module doc), into `out`.
pub fn combined_folded<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    resolver: R,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    FoldedBuilder::combined(meta, opts, resolver).write(events, out)
}

/// One traced call as the chart drew it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChartCall {
    pub site: u32,
    pub start_ns: u64,
    pub dur_ns: u64,
    pub unwound: bool,
}

#[derive(Clone, Copy)]
struct ChartOpen {
    node: u32,
    depth: u32,
    end: u64,
    /// Time up to which this call's self time has been drawn.
    cursor: u64,
    had_child: bool,
}

#[derive(Default)]
struct ChartThread {
    root: Option<u32>,
    cursor: u64,
    stack: Vec<ChartOpen>,
    lines: Vec<(u32, u64)>,
    /// Calls pushed whose frame starts at the next line: (position in the path, call).
    pending: Vec<(u32, ChartCall)>,
    /// (line index in `lines`, position in the path, call).
    starts: Vec<(u32, u32, ChartCall)>,
}

/// A flame chart of traced calls: per thread, in time order.
#[derive(Clone, Debug)]
pub struct Chart {
    pub(crate) tree: Tree,
    /// (stack node, ns), threads one after the other.
    pub(crate) lines: Vec<(u32, u64)>,
    /// Where each call's frame begins: (line index, position in its path, call).
    /// Read by the SVG renderer (feature `flame`) for the tooltips.
    #[cfg_attr(not(feature = "flame"), allow(dead_code))]
    pub(crate) starts: Vec<(u32, u32, ChartCall)>,
    summary: FoldedSummary,
}

impl Chart {
    /// Folded lines in time order (inferno's `flame_chart` keeps the order).
    /// Zero counts separate consecutive calls of the same function, which
    /// inferno would otherwise draw as one frame.
    pub fn lines(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.lines.iter().map(|&(n, c)| (self.tree.line(n), c))
    }

    pub fn write_to(&self, mut w: impl Write) -> io::Result<()> {
        for (stack, count) in self.lines() {
            writeln!(w, "{stack} {count}")?;
        }
        w.flush()
    }

    /// Sum of all counts: per thread, session start to its last event (or the
    /// session's end), so the x axis is time.
    pub fn total(&self) -> u64 {
        self.lines.iter().map(|l| l.1).sum()
    }

    pub fn summary(&self) -> &FoldedSummary {
        &self.summary
    }
}

/// Builds a [`Chart`] from events pushed one at a time. Every stack starts with
/// its thread; the thread's frame fills the time between its root calls, so
/// within a thread x is nanoseconds since session start.
pub struct ChartBuilder<'a> {
    meta: &'a TraceMeta,
    opts: FoldedOptions,
    mask: Vec<bool>,
    tree: Tree,
    threads: Vec<ChartThread>,
    site_names: Vec<u32>,
    summary: FoldedSummary,
}

impl<'a> ChartBuilder<'a> {
    pub fn new(meta: &'a TraceMeta, opts: &FoldedOptions) -> Self {
        ChartBuilder {
            meta,
            opts: opts.clone(),
            mask: thread_mask(meta, &opts.threads),
            tree: Tree::default(),
            threads: Vec::new(),
            site_names: Vec::new(),
            summary: FoldedSummary::default(),
        }
    }

    /// As [`FoldedBuilder::extend`].
    pub fn extend(
        &mut self,
        events: impl IntoIterator<Item = Result<Event, TraceError>>,
    ) -> Result<(), TraceError> {
        super::push_all(events, |ev| self.push(ev))
    }

    pub fn push(&mut self, ev: &Event) {
        if !shown(&self.mask, !self.opts.threads.is_empty(), ev.thread()) {
            return;
        }
        match ev {
            Event::Call(c) => self.call(c),
            Event::Lost(l) => {
                self.pop_to(l.thread, l.depth);
                self.summary.records_lost += l.count;
            }
            _ => {}
        }
    }

    fn thread(&mut self, t: u32) -> &mut ChartThread {
        let i = t as usize;
        if self.threads.len() <= i {
            self.threads.resize_with(i + 1, ChartThread::default);
        }
        if self.threads[i].root.is_none() {
            let name = self.tree.intern(&self.meta.thread_label(t));
            self.threads[i].root = Some(self.tree.child(NONE, name, Origin::Thread));
        }
        &mut self.threads[i]
    }

    fn emit(th: &mut ChartThread, node: u32, ns: u64) {
        let line = th.lines.len() as u32;
        for (pos, call) in th.pending.drain(..) {
            th.starts.push((line, pos, call));
        }
        th.lines.push((node, ns));
    }

    fn pop_to(&mut self, t: u32, depth: u32) {
        let Some(th) = self.threads.get_mut(t as usize) else {
            return;
        };
        while th.stack.last().is_some_and(|o| o.depth >= depth) {
            let o = th.stack.pop().expect("checked above");
            Self::emit(th, o.node, o.end.saturating_sub(o.cursor));
            match th.stack.last_mut() {
                Some(p) => p.cursor = p.cursor.max(o.end),
                None => th.cursor = th.cursor.max(o.end),
            }
        }
    }

    fn site_name(&mut self, site: u32) -> u32 {
        let short = self.opts.short_names;
        self.tree
            .site_name(&mut self.site_names, &self.meta.sites, short, site)
    }

    fn call(&mut self, c: &Call) {
        self.pop_to(c.thread, c.depth);
        let name = self.site_name(c.site);
        self.summary.calls += 1;
        let th = self.thread(c.thread);
        let root = th.root.expect("set by thread()");
        let parent = match th.stack.last_mut() {
            Some(p) => {
                let gap = c.start_ns.saturating_sub(p.cursor);
                // A zero-length stretch still separates two children of the same name.
                let (node, had_child) = (p.node, p.had_child);
                p.cursor = p.cursor.max(c.start_ns);
                p.had_child = true;
                if gap > 0 || had_child {
                    Self::emit(th, node, gap);
                }
                node
            }
            None => {
                let gap = c.start_ns.saturating_sub(th.cursor);
                if gap > 0 || !th.lines.is_empty() {
                    Self::emit(th, root, gap);
                }
                th.cursor = th.cursor.max(c.start_ns);
                root
            }
        };
        let pos = th.stack.len() as u32 + 1;
        let node = self.tree.child(parent, name, Origin::Traced);
        let n = &mut self.tree.nodes[node as usize];
        n.calls += 1;
        n.total_ns = n.total_ns.saturating_add(c.dur_ns);
        let th = &mut self.threads[c.thread as usize];
        th.pending.push((
            pos,
            ChartCall {
                site: c.site,
                start_ns: c.start_ns,
                dur_ns: c.dur_ns,
                unwound: c.unwound(),
            },
        ));
        th.stack.push(ChartOpen {
            node,
            depth: c.depth,
            end: c.end_ns(),
            cursor: c.start_ns,
            had_child: false,
        });
    }

    /// Closes open calls, pads each thread to the session's end, and joins the threads.
    pub fn finish(mut self) -> Chart {
        for t in 0..self.threads.len() {
            self.pop_to(t as u32, 0);
        }
        let end = self.meta.duration_ns;
        let mut lines = Vec::new();
        let mut starts = Vec::new();
        for th in &mut self.threads {
            let Some(root) = th.root else { continue };
            if th.lines.is_empty() {
                continue;
            }
            if end > th.cursor {
                Self::emit(th, root, end - th.cursor);
            }
            let base = lines.len() as u32;
            starts.extend(th.starts.drain(..).map(|(l, p, c)| (l + base, p, c)));
            lines.append(&mut th.lines);
        }
        Chart {
            tree: self.tree,
            lines,
            starts,
            summary: self.summary,
        }
    }
}

/// A flame chart of traced calls as folded text in time order, into `out`.
pub fn traced_chart_folded<W: Write>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &FoldedOptions,
    out: W,
) -> Result<(), TraceError> {
    let mut b = ChartBuilder::new(meta, opts);
    let read = b.extend(events);
    b.finish().write_to(out)?;
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(module: &str, name: &str, is_async: bool) -> SiteInfo {
        SiteInfo {
            name: name.into(),
            module_path: module.into(),
            file: "x.rs".into(),
            line: 1,
            is_async,
        }
    }

    /// Issue 18: recursion told apart by the number of open calls; extra
    /// frames of the traced function (a call the trace did not keep) make
    /// the match ambiguous, missing ones make it fail; neither is guessed.
    #[test]
    fn chain_match_counts_open_calls_and_never_guesses() {
        let w = site("app", "work", false);
        let f = site("app", "f", false);
        let names = |v: &[&'static str]| v.to_vec();
        // work > f > f > f, then untraced g, h below the innermost f.
        let stack = names(&[
            "app::h",
            "app::g",
            "app::f",
            "app::f",
            "app::f",
            "app::work",
            "main",
        ]);
        assert_eq!(chain_match(&[&w, &f, &f, &f], &stack), ChainMatch::At(2));
        // Two f calls open but three f frames: which f is the open one?
        assert_eq!(chain_match(&[&w, &f, &f], &stack), ChainMatch::Ambiguous);
        // Four f calls open, three frames (a frame the walk skipped).
        assert_eq!(
            chain_match(&[&w, &f, &f, &f, &f], &stack),
            ChainMatch::NotFound
        );
        // Nesting order matters: f open inside work, but work is below f here.
        let inverted = names(&["app::work", "app::f", "main"]);
        assert_eq!(chain_match(&[&w, &f], &inverted), ChainMatch::NotFound);
        // Untraced frames between traced ones (f -> g -> f) are fine.
        let between = names(&["app::h", "app::f", "app::g", "app::f", "app::work"]);
        assert_eq!(chain_match(&[&w, &f, &f], &between), ChainMatch::At(1));
        // The sample in the traced function itself: cut 0.
        assert_eq!(
            chain_match(&[&w], &names(&["app::work", "main"])),
            ChainMatch::At(0)
        );
        assert_eq!(chain_match(&[], &stack), ChainMatch::NotFound);
        // Inlined frames named by DWARF alone, without their path (release).
        let p = site("app::parser", "LineParser::parse_line", false);
        let inlined = names(&["memchr", "parse_line", "app::work"]);
        assert_eq!(chain_match(&[&w, &p], &inlined), ChainMatch::At(1));
        let generic = names(&["collect<u8>", "f<u32>", "app::work"]);
        assert_eq!(chain_match(&[&w, &f], &generic), ChainMatch::At(1));
        // A path that is not the site's is still no match.
        let other = names(&["other::f", "app::work"]);
        assert_eq!(chain_match(&[&w, &f], &other), ChainMatch::NotFound);
    }

    /// A sample's frames: (names innermost first, what the binary says).
    fn cut_of(open: &[&SiteInfo], frames: &[(&[&str], FrameInfo)]) -> Option<usize> {
        let sample = Sample {
            thread: 0,
            ts_ns: 0,
            shadow_depth: open.len() as u32,
            cut: None,
            frames: (0..frames.len() as u64).map(|a| 0x1000 + a).collect(),
        };
        let names: Vec<&str> = frames.iter().flat_map(|f| f.0.iter().copied()).collect();
        let frame_of: Vec<u32> = (0..frames.len() as u32)
            .flat_map(|i| std::iter::repeat_n(i, frames[i as usize].0.len()))
            .collect();
        let info: Vec<FrameInfo> = frames.iter().map(|f| f.1).collect();
        let stack = SampleStack {
            sample: &sample,
            names: &names,
            frame_of: &frame_of,
            open,
            info: &info,
        };
        ChainCut.cut(open.last().unwrap(), &stack)
    }

    const REC: FrameInfo = FrameInfo {
        frame_record: Some(true),
        in_probe: false,
    };
    const NO_REC: FrameInfo = FrameInfo {
        frame_record: Some(false),
        in_probe: false,
    };
    const UNKNOWN_REC: FrameInfo = FrameInfo {
        frame_record: None,
        in_probe: false,
    };
    const PROBE: FrameInfo = FrameInfo {
        frame_record: Some(true),
        in_probe: true,
    };

    /// Release builds: a sample in the probe of a traced call that is being
    /// entered (before its start time) or left (after its end time) has one
    /// frame of the traced function more than there are open calls of it.
    /// That frame is the probe's, not an open call's: the open calls match
    /// the frames outside it, and the probe's frames go below them.
    #[test]
    fn a_sample_in_a_probe_is_joined_below_the_open_calls() {
        let w = site("app", "worker", false);
        let e = site("app", "eval", false);
        let root: &[&str] = &["app::worker"];
        // Leaving an inner eval: its end time is taken, the frame is still there.
        let exit: &[&str] = &[
            "_rdtsc",
            "ticks",
            "exit",
            "drop",
            "drop_in_place<fgtrace_core::probe::Guard>",
            "app::eval",
        ];
        let frames = [
            (exit, REC),
            (&["app::eval"][..], REC),
            (&["app::eval"][..], REC),
            (root, REC),
        ];
        assert_eq!(cut_of(&[&w, &e, &e], &frames), Some(6));
        // Without the probe evidence the same stack stays ambiguous.
        assert_eq!(
            chain_match(
                &[&w, &e, &e],
                &[exit, &["app::eval"], &["app::eval"], root].concat()
            ),
            ChainMatch::Ambiguous
        );
        // Entering: DWARF names without the path; the symbolizer says probe
        // (by source file).
        let enter: &[&str] = &["enter", "app::eval"];
        let frames = [(enter, PROBE), (&["app::eval"][..], REC), (root, REC)];
        assert_eq!(cut_of(&[&w, &e], &frames), Some(2));
        // A helper the probe called (its thread-local access) below it.
        let frames = [
            (&["std::thread::local::LocalKey<T>::with"][..], REC),
            (&["with_state", "exit", "app::eval"][..], PROBE),
            (&["app::eval"][..], REC),
            (root, REC),
        ];
        assert_eq!(cut_of(&[&w, &e], &frames), Some(4));
        // Probe frames and helpers between them (a debug build, where the
        // probe's closures are frames of their own).
        let frames = [
            (&["core::ptr::write_volatile"][..], NO_REC),
            (&["fgtrace_core::probe::with_state::{{closure}}"][..], REC),
            (&["std::thread::local::LocalKey<T>::try_with"][..], REC),
            (&["std::thread::local::LocalKey<T>::with"][..], REC),
            (&["fgtrace_core::probe::exit", "app::eval"][..], REC),
            (&["app::eval"][..], REC),
            (root, REC),
        ];
        assert_eq!(cut_of(&[&w, &e], &frames), Some(6));
        // Outside the probe's frame the open calls still need one answer:
        // two evals left for one open call is still a guess.
        let frames = [
            (exit, REC),
            (&["app::eval"][..], REC),
            (&["app::eval"][..], REC),
            (root, REC),
        ];
        assert_eq!(cut_of(&[&w, &e], &frames), None);
        // As many frames as open calls: the probe's frame is the open call
        // (past its start time, or before its end time), as names say.
        let frames = [(exit, REC), (root, REC)];
        assert_eq!(cut_of(&[&w, &e], &frames), Some(5));
        // The open calls not outside the probe's frame: not found.
        let frames = [(exit, REC), (&["app::eval"][..], REC), (root, REC)];
        assert_eq!(cut_of(&[&w, &e, &e, &e], &frames), None);
    }

    /// A leaf without a frame record (libc without frame pointers, a shim
    /// that jumps on, a function's first instructions): the frame-pointer
    /// walk skipped its caller. When the open calls missing from the stack
    /// can only be in the frames skipped right above the leaf, the leaf is
    /// joined below them; anything else stays unmatched.
    #[test]
    fn a_caller_skipped_above_a_leaf_without_frame_record_is_joined_only_when_certain() {
        let w = site("app", "worker", false);
        let pb = site("app", "process_batch", false);
        let tok = site("app::parser", "LineParser::tokenize", false);
        let open = [&w, &pb, &tok];
        let leaf: &[&str] = &["core::slice::memchr::memchr_aligned"];
        let thread: &[&str] = &[
            "{closure#0}",
            "std::sys::backtrace::__rust_begin_short_backtrace",
        ];
        let start: &[&str] = &["<std::sys::thread::unix::Thread>::new::thread_start"];
        let entry: &[&str] = &["start_thread"];
        // Every traced call was inlined into `worker`, the frame skipped: the
        // walk reached the thread's first frame without meeting any of them.
        let frames = [(leaf, NO_REC), (thread, REC), (start, REC), (entry, NO_REC)];
        assert_eq!(cut_of(&open, &frames), Some(1));
        // Without the evidence the same chain is not found.
        assert_eq!(
            chain_match(&open, &[leaf, thread, start, entry].concat()),
            ChainMatch::NotFound
        );
        for (why, frames) in [
            // The leaf had its frame record (or nothing is known): no skip.
            (
                "leaf with record",
                [(leaf, REC), (thread, REC), (start, REC), (entry, NO_REC)],
            ),
            (
                "leaf unknown",
                [
                    (leaf, UNKNOWN_REC),
                    (thread, REC),
                    (start, REC),
                    (entry, NO_REC),
                ],
            ),
            // A frame above may have skipped another caller: which gap?
            (
                "second gap",
                [
                    (leaf, NO_REC),
                    (thread, REC),
                    (start, UNKNOWN_REC),
                    (entry, NO_REC),
                ],
            ),
            // The walk stopped before the thread's first frame: the open
            // calls may be above the last frame seen.
            (
                "truncated",
                [(leaf, NO_REC), (thread, REC), (start, REC), (start, REC)],
            ),
        ] {
            assert_eq!(cut_of(&open, &frames), None, "{why}");
        }
        // The walk stopped at the leaf itself (libc's malloc clobbers the
        // frame pointer): every open call is above it.
        let malloc: &[&str] = &["tcache_get", "__GI___libc_malloc"];
        assert_eq!(cut_of(&open, &[(malloc, NO_REC)]), Some(2));
        assert_eq!(cut_of(&open, &[(malloc, REC)]), None);
        assert_eq!(cut_of(&open, &[(&["[unknown]"][..], NO_REC)]), None);
        // A leaf that is an open call's function is not below it.
        assert_eq!(cut_of(&open, &[(&["tokenize"][..], NO_REC)]), None);
        // A sample without frames (a damaged file): nothing to match.
        assert_eq!(cut_of(&open, &[]), None);

        // Recursion: the innermost of three open `f` is the skipped caller;
        // the two outer ones match the frames above.
        let f = site("app", "f", false);
        let spin: &[&str] = &["app::spin"];
        let fr: &[&str] = &["app::f"];
        let g: &[&str] = &["app::g"];
        let wr: &[&str] = &["app::worker"];
        let open = [&w, &f, &f, &f];
        let frames = [
            (spin, NO_REC),
            (fr, REC),
            (g, REC),
            (fr, REC),
            (wr, REC),
            (entry, NO_REC),
        ];
        assert_eq!(cut_of(&open, &frames), Some(1));
        // Two `f` frames for three open calls, but an untraced frame between
        // the leaf and them may have skipped a caller of its own.
        let frames = [
            (spin, NO_REC),
            (g, NO_REC),
            (fr, REC),
            (fr, REC),
            (wr, REC),
            (entry, NO_REC),
        ];
        assert_eq!(cut_of(&open, &frames), None);
        // An inner call's frame seen below the outer ones while a middle one
        // is missing: no single answer.
        let b = site("app", "b", false);
        let a = site("app", "a", false);
        let frames = [
            (spin, NO_REC),
            (&["app::b"][..], REC),
            (wr, REC),
            (entry, NO_REC),
        ];
        assert_eq!(cut_of(&[&w, &a, &b], &frames), None);
    }

    /// The signal path's recorded frame holds the traced function inlined,
    /// named by DWARF without its path (release): that name is the cut, not
    /// the frame's outermost function.
    #[test]
    fn a_recorded_cut_finds_an_inlined_traced_fn_by_its_dwarf_name() {
        let gl = site("app", "generate_logs", false);
        let names = ["app::pad", "collect<u8>", "generate_logs", "app::main"];
        let frame_of = [0, 1, 1, 1];
        let sample = Sample {
            thread: 0,
            ts_ns: 0,
            shadow_depth: 1,
            cut: Some(1),
            frames: vec![0x10, 0x20],
        };
        let stack = SampleStack {
            sample: &sample,
            names: &names,
            frame_of: &frame_of,
            open: &[&gl],
            info: &[],
        };
        assert_eq!(RecordedCut.cut(&gl, &stack), Some(2));
        // A callee of the same short name inlined inside it is not it.
        let new = site("app", "Foo::new", false);
        let names = ["app::pad", "new<u8>", "new", "app::main"];
        let stack = SampleStack {
            names: &names,
            open: &[&new],
            ..stack
        };
        assert_eq!(RecordedCut.cut(&new, &stack), Some(2));
        let names = ["app::pad", "new<u8>", "app::Foo::new", "app::main"];
        let stack = SampleStack {
            names: &names,
            ..stack
        };
        assert_eq!(RecordedCut.cut(&new, &stack), Some(2));
    }

    #[test]
    fn resolved_names_match_their_sites() {
        let s = site("app::db", "Conn::query", false);
        assert!(site_matches(&s, "app::db::Conn::query"));
        assert!(site_matches(&s, "app::db::Conn::query::h0123456789abcdef"));
        assert!(site_matches(&s, "<app::db::Conn as app::Query>::query"));
        assert!(site_matches(&s, "app::db::Conn<u32>::query"));
        assert!(!site_matches(&s, "app::db::Conn::query_all"));
        assert!(!site_matches(&s, "app::db::Conn::query::{{closure}}"));
        assert!(!site_matches(&s, "other::db::Conn::query"));
        let a = site("app", "fetch", true);
        assert!(site_matches(&a, "app::fetch::{{closure}}"));
        assert!(site_matches(&a, "app::fetch::{closure#0}"));
    }

    #[test]
    fn largest_remainder_sums_exactly() {
        assert_eq!(largest_remainder(10, &[1, 1, 1]), [4, 3, 3]);
        assert_eq!(largest_remainder(100, &[3, 1]), [75, 25]);
        assert_eq!(largest_remainder(7, &[0, 0]), [7, 0]);
        assert_eq!(largest_remainder(0, &[5, 2]), [0, 0]);
        let counts = [7, 13, 1, 29, 3];
        for total in [0u64, 1, 52, 999_999_999_937, u64::MAX / 2] {
            let s = largest_remainder(total, &counts);
            assert_eq!(s.iter().sum::<u64>(), total);
        }
    }

    #[test]
    fn sampling_rates_parse() {
        assert_eq!(sampling_hz("cpu-clock@999Hz"), Some(999.0));
        assert_eq!(sampling_hz("task-clock@10kHz"), Some(10_000.0));
        assert_eq!(sampling_hz("timer 250 Hz"), Some(250.0));
        assert_eq!(sampling_hz("cpu-clock"), None);
    }
}
