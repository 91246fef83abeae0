//! The combined join: which traced call each sample ran under, and where the
//! sampled frames go below it.
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
//! found goes under the traced call as `[unknown below <fn>];<leaf frame>`:
//! it ran inside the open calls, but which frames lie between them and its
//! leaf is not known. Samples taken outside any traced call keep their whole
//! stack and weigh one sampling period each (from `meta.sampling`, e.g.
//! `cpu-clock@999Hz`).

use crate::resolve::FrameInfo;
use fgtrace_trace::{Sample, SiteInfo};

/// A sample's resolved stack, as a [`Cut`] sees it.
pub struct SampleStack<'s> {
    /// The sample whose frames were resolved (its thread, time, shadow
    /// depth and cut).
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
    /// Every traced function of the trace (`TraceMeta::sites`; empty: not
    /// known): a leaf in one that is not open ran at a call's boundary.
    pub sites: &'s [SiteInfo],
}

/// Finds the traced function's own frame in a sampled stack: the pluggable
/// step of the combined join.
pub trait Cut {
    /// Index into `stack.names` of the frame of `site` (the innermost traced
    /// call open at the sample); the names before it ran below that call.
    /// `None`: not found (the sample goes under `[unknown below <fn>]`).
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
///
/// Inlined frames named without their path (line tables) match any site of
/// that last segment: `push<HirFrame, Global>` (a `Vec::push`) fits a traced
/// `TranslatorI::push` as well. Where that leaves more than one answer, the
/// match is tried again with such names left out for every open call whose
/// function is in the stack under its full name: the full name says which
/// frame is that function's, a path-less one only that it might be.
pub fn chain_match(open: &[&SiteInfo], names: &[&str]) -> ChainMatch {
    match chain_match_by(open, names, |k, n| chain_site_matches(open[k], n)) {
        ChainMatch::Ambiguous => {
            let exact = full_names_seen(open, names);
            chain_match_by(open, names, |k, n| {
                if exact[k] {
                    site_matches(open[k], n)
                } else {
                    chain_site_matches(open[k], n)
                }
            })
        }
        other => other,
    }
}

/// For each open call, whether its function is in `names` under its full
/// name (see [`chain_match`]).
fn full_names_seen(open: &[&SiteInfo], names: &[&str]) -> Vec<bool> {
    open.iter()
        .map(|s| names.iter().any(|n| site_matches(s, n)))
        .collect()
}

/// [`chain_match`] with `matches(k, name)` telling whether `name` may be the
/// frame of `open[k]`.
fn chain_match_by(
    open: &[&SiteInfo],
    names: &[&str],
    matches: impl Fn(usize, &str) -> bool,
) -> ChainMatch {
    if open.is_empty() {
        return ChainMatch::NotFound;
    }
    // From the root: each call takes the outermost frame left (highest index).
    let mut from_root = names.len();
    for k in 0..open.len() {
        match names[..from_root].iter().rposition(|n| matches(k, n)) {
            Some(j) => from_root = j,
            None => return ChainMatch::NotFound,
        }
    }
    // From the leaf: each call, innermost first, takes the innermost frame
    // left (lowest index past the previous one).
    let mut from_leaf = None;
    let mut next = 0;
    for k in (0..open.len()).rev() {
        match names[next..].iter().position(|n| matches(k, n)) {
            Some(j) => {
                if k == open.len() - 1 {
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
/// under `[unknown below <fn>]` and is counted.
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
        if let ChainMatch::At(j) = chain_match_walk(open, stack.names, stack.frame_of, stack.info) {
            return Some(j);
        }
        // A walk that ended before the thread's first frame (the copied
        // stack ran out inside a large frame) has only the innermost open
        // calls: those from the one the outermost frame belongs to.
        let open = match walk_cut_short(open, stack.names, stack.frame_of) {
            Some(m) if m > 0 => {
                let inner = &open[m..];
                if let ChainMatch::At(j) =
                    chain_match_walk(inner, stack.names, stack.frame_of, stack.info)
                {
                    return Some(j);
                }
                inner
            }
            _ => open,
        };
        symbol_cut(open, stack)
    }
}

/// Where a walk that did not reach the thread's first frame starts among
/// the open calls (outermost first): the index of the one call whose
/// function is the outermost sampled frame's (its own name, with its path,
/// or failing that an inlined one's). The calls before it were opened in
/// frames above the last one the walk saw (the stack copy the unwinder had
/// ended there), so they cannot be in the stack. `None`: the walk reached
/// the thread's first frame, the outermost frame is no open call's
/// function, or its function has more than one open call (recursion: which
/// one is not known).
fn walk_cut_short(open: &[&SiteInfo], names: &[&str], frame_of: &[u32]) -> Option<usize> {
    let (&top, _) = frame_of.split_last()?;
    if frame_of.len() != names.len() {
        return None;
    }
    let first = frame_of.iter().position(|&f| f == top)?;
    let frame = &names[first..];
    if frame.iter().any(|n| is_thread_entry(n)) {
        return None;
    }
    // Outermost name first: the frame's own function, then what was
    // inlined into it, by full name only (a path-less name may be any
    // function of that last segment); a site named exactly so first, and a
    // free fn's site by its exact name only (`site_matches` lets a crate's
    // free `new` match any `new` of that crate, for methods whose `impl`
    // is in another module than their type).
    for n in frame.iter().rev() {
        let norm = normalize(n);
        let exact: Vec<usize> = (0..open.len())
            .filter(|&i| open[i].full_name() == norm)
            .collect();
        let calls = if exact.is_empty() {
            (0..open.len())
                .filter(|&i| open[i].name.contains("::") && site_matches(open[i], n))
                .collect()
        } else {
            exact
        };
        match calls[..] {
            [] => continue,
            [m] => return Some(m),
            _ => return None,
        }
    }
    None
}

/// The cut from symbols alone, where [`chain_match_walk`] found no single
/// answer (a default release build: inlined traced functions have no names
/// without DWARF, and a walk without frame pointers skips frames). Each case
/// below needs no more frames of the function it relies on than open calls
/// of it, so that recursion is not guessed:
///
/// * **The innermost open call's frames are there**, as many as its
///   function has open calls: the innermost of them is its frame, wherever
///   the outer calls went (inlined into frames named otherwise).
/// * **The leaf frame is an open call's function.** The innermost open call
///   is that frame's function or was inlined into it (a call in its own
///   frame below would be the leaf frame): nothing ran below the call but
///   the leaf frame's own code. The cut is the innermost name of that frame
///   that matches an open call.
/// * **The leaf is fgtrace's probe** (and helpers it called): a traced call
///   is being entered or left. The frame that called the probe holds that
///   call's code: an open call's function (the call is the innermost open
///   one, or was inlined into it), and the cut is there; or another traced
///   function, a child outside its recorded time, whose frame goes below the
///   innermost open call with the probe's.
/// * **The leaf is a traced function with no open call** ([`SampleStack::sites`]):
///   a child of the innermost open call before its probe read the clock or
///   after (its first or last instructions); its frame goes below that call.
///
/// Anything else (a leaf in an untraced function whose callers the walk did
/// not see) is not guessed.
fn symbol_cut(open: &[&SiteInfo], stack: &SampleStack<'_>) -> Option<usize> {
    let (names, frame_of, info) = (stack.names, stack.frame_of, stack.info);
    if names.is_empty() || frame_of.len() != names.len() {
        return None;
    }
    // Name ranges of the sampled frames, innermost first.
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (i, &f) in frame_of.iter().enumerate() {
        match ranges.last_mut() {
            Some(r) if frame_of[r.0] == f => r.1 = i + 1,
            _ => ranges.push((i, i + 1)),
        }
    }
    let is_open = |i: &usize| open.iter().any(|s| chain_site_matches(s, names[*i]));
    let in_probe = |k: usize| {
        info.get(frame_of[ranges[k].0] as usize)
            .is_some_and(|f| f.in_probe)
            || names[ranges[k].0..ranges[k].1]
                .iter()
                .any(|n| n.contains("fgtrace_core::probe::"))
    };
    // A leaf frame in the probe may be a call at its boundary, not open,
    // of the same function as an open one (recursion): not this case.
    let same = |a: &SiteInfo, b: &SiteInfo| a.full_name() == b.full_name();
    let opened = |site: &SiteInfo| open.iter().filter(|s| same(s, site)).count();
    // A function's frames: under its full name where it has one in the
    // stack (a path-less name of that last segment may be another
    // function's, see `chain_match`), else path-less ones too.
    let seen = |site: &SiteInfo| {
        let exact: Vec<usize> = (0..names.len())
            .filter(|&i| site_matches(site, names[i]))
            .collect();
        if !exact.is_empty() {
            return exact;
        }
        (0..names.len())
            .filter(|&i| chain_site_matches(site, names[i]))
            .collect::<Vec<_>>()
    };
    let (r0, r1) = ranges[0];
    if !in_probe(0) {
        let inner = open.last()?;
        let at = seen(inner);
        if !at.is_empty() && at.len() == opened(inner) && !(0..at[0]).any(|i| is_open(&i)) {
            return Some(at[0]);
        }
        if let Some(i) = (r0..r1).find(is_open) {
            // The site named exactly so first: `site_matches` lets a
            // crate's free `new` match any `new` of that crate.
            let n = normalize(names[i]);
            let site = open
                .iter()
                .find(|s| s.full_name() == n)
                .or_else(|| open.iter().find(|s| chain_site_matches(s, names[i])))?;
            return (seen(site).len() <= opened(site)).then_some(i);
        }
        let traced = |i: usize| stack.sites.iter().any(|s| site_matches(s, names[i]));
        if (r0..r1).any(traced) {
            return Some(r1);
        }
    }
    // The outermost probe frame before any open call's frame: the frames
    // below it were called by the probe.
    let first_open = (0..ranges.len())
        .find(|&k| (ranges[k].0..ranges[k].1).any(|i| is_open(&i)))
        .unwrap_or(ranges.len());
    let p = (0..first_open.min(ranges.len()))
        .rev()
        .find(|&k| in_probe(k))?;
    let (c0, c1) = *ranges.get(p + 1)?;
    match (c0..c1).find(is_open) {
        Some(i) => Some(i),
        None => Some(c1),
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

/// Whether the frames a sample ran in below a traced call's frame
/// (resolved names, innermost first) are fgtrace's probe leaving a call:
/// some are the probe's exit path (`exit`, `exit_other`, `finish`, a
/// guard's drop, and what they call), none its entry path.
pub fn leaving_probe(names: &[&str]) -> bool {
    let mut leaving = false;
    for n in names {
        let n = strip_hash(n);
        let Some(i) = n.find("fgtrace_core::probe::") else {
            continue;
        };
        let rest = &n[i + "fgtrace_core::probe::".len()..];
        let f = rest.split("::").next().unwrap_or("");
        if f.starts_with("enter") || f.starts_with("push") || f.starts_with("capture_push") {
            return false;
        }
        if f.starts_with("exit") || f == "finish" || f == "pop_to" || f.contains("Guard") {
            leaving = true;
        }
    }
    leaving
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

/// The line to show once per combined view when samples were not joined and
/// the traced program's file (`binary`) has no DWARF line tables: without
/// them a sampled address has no inlined frames, so a traced function the
/// compiler inlined has no frame to join a sample to, and the profile setting
/// that keeps line tables in a release build is the fix. `None` when there is
/// nothing to say: line tables are there (the join failed for another
/// reason), or every sample was joined.
pub fn missing_debug_lines_note(
    binary: &str,
    has_debug_lines: bool,
    unjoined: u64,
    total: u64,
) -> Option<String> {
    if has_debug_lines || unjoined == 0 {
        return None;
    }
    Some(format!(
        "{binary}: no debug line info, so inlined frames cannot be matched to traced calls; \
         {unjoined} of {total} sample{} {} placed under their innermost call. Build with \
         `[profile.release] debug = \"line-tables-only\"` (or `debug = true`) to join them.",
        if total == 1 { "" } else { "s" },
        if unjoined == 1 { "was" } else { "were" },
    ))
}

/// What `TraceMeta::sampler` says of `.eh_frame` unwinding (fgtrace's
/// feature `unwind` in the recorded program): `(unwound, copied)`, the
/// samples whose unwound chain was kept and those that carried a stack
/// copy. `None`: the recorder copied no stacks.
pub fn eh_frame_unwinding(sampler: &str) -> Option<(u64, u64)> {
    let end = sampler.find(" samples unwound through .eh_frame")?;
    let head = &sampler[..end];
    let (u, c) = head.rsplit_once(' ')?;
    let copied = c.parse().ok()?;
    let unwound = u.strip_suffix(" of")?.rsplit(' ').next()?.parse().ok()?;
    Some((unwound, copied))
}

/// The line to show once per combined view when samples were not joined and
/// the traced program's file (`binary`) has no frame pointers in most of its
/// functions: the sampler's walk follows them, so it skips every function
/// without one, and an open call's frame may be one of those. `None` when
/// the file has them, when the recorder unwound the samples through
/// `.eh_frame` instead (`unwound`, see [`eh_frame_unwinding`]), or every
/// sample was joined.
pub fn missing_frame_pointers_note(
    binary: &str,
    has_frame_pointers: bool,
    unwound: bool,
    unjoined: u64,
    total: u64,
) -> Option<String> {
    if has_frame_pointers || unwound || unjoined == 0 {
        return None;
    }
    Some(format!(
        "{binary}: no frame pointers, so the stack walk skips functions and open calls \
         may have no frame in a sample; {unjoined} of {total} sample{} {} placed under \
         their innermost call. Record with fgtrace's `unwind` feature (the perf-ring \
         sampler then unwinds stacks through .eh_frame, as `perf record --call-graph \
         dwarf` does), or build with `RUSTFLAGS=\"-C force-frame-pointers=yes\"` \
         (or `[build] rustflags = [\"-C\", \"force-frame-pointers=yes\"]` in \
         .cargo/config.toml), to join them.",
        if total == 1 { "" } else { "s" },
        if unjoined == 1 { "was" } else { "were" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_frame_pointers_note_only_when_it_explains_something() {
        assert_eq!(
            missing_frame_pointers_note("/bin/app", true, false, 5, 10),
            None
        );
        assert_eq!(
            missing_frame_pointers_note("/bin/app", false, false, 0, 10),
            None
        );
        // Unwound through .eh_frame: frame pointers are not what is missing.
        assert_eq!(
            missing_frame_pointers_note("/bin/app", false, true, 5, 10),
            None
        );
        let note = missing_frame_pointers_note("/bin/app", false, false, 3, 10).unwrap();
        assert!(note.starts_with("/bin/app: no frame pointers"), "{note}");
        assert!(note.contains("3 of 10 samples were placed"), "{note}");
        assert!(note.contains("force-frame-pointers=yes"), "{note}");
        assert!(note.contains("`unwind` feature"), "{note}");
        let one = missing_frame_pointers_note("app", false, false, 1, 1).unwrap();
        assert!(one.contains("; 1 of 1 sample was placed"), "{one}");
    }

    #[test]
    fn eh_frame_unwinding_is_read_from_the_sampler_line() {
        let s = "perf ring (kernel call chains; shadow depth and cut joined from the trace); \
                 1890 of 1993 samples unwound through .eh_frame";
        assert_eq!(eh_frame_unwinding(s), Some((1890, 1993)));
        assert_eq!(eh_frame_unwinding("perf ring (kernel call chains)"), None);
        assert_eq!(
            eh_frame_unwinding("x samples unwound through .eh_frame"),
            None
        );
    }

    #[test]
    fn the_missing_debug_lines_note_only_when_it_explains_something() {
        assert_eq!(missing_debug_lines_note("/bin/app", true, 5, 10), None);
        assert_eq!(missing_debug_lines_note("/bin/app", false, 0, 10), None);
        assert_eq!(
            missing_debug_lines_note("/bin/app", false, 3, 10).as_deref(),
            Some(
                "/bin/app: no debug line info, so inlined frames cannot be matched to traced \
                 calls; 3 of 10 samples were placed under their innermost call. Build with \
                 `[profile.release] debug = \"line-tables-only\"` (or `debug = true`) to join them."
            )
        );
        let one = missing_debug_lines_note("app", false, 1, 1).unwrap();
        assert!(one.contains("; 1 of 1 sample was placed"), "{one}");
    }

    fn site(module: &str, name: &str, is_async: bool) -> SiteInfo {
        SiteInfo {
            name: name.into(),
            module_path: module.into(),
            file: "x.rs".into(),
            line: 1,
            is_async,
            values: Vec::new(),
        }
    }

    /// Recursion told apart by the number of open calls; extra
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
        cut_in(open, &[], frames)
    }

    /// [`cut_of`] in a trace whose traced functions are `sites`.
    fn cut_in(
        open: &[&SiteInfo],
        sites: &[SiteInfo],
        frames: &[(&[&str], FrameInfo)],
    ) -> Option<usize> {
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
            sites,
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
        // A leaf that is an open call's function is not below it: it is
        // that call's own code (see `symbol_cut`), nothing below.
        assert_eq!(cut_of(&open, &[(&["tokenize"][..], NO_REC)]), Some(0));
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
        // is missing: the skipped frames above the leaf are no answer, but
        // the innermost call's own frame, its only one, is (wherever the
        // middle call went, it is above it: see `symbol_cut`).
        let b = site("app", "b", false);
        let a = site("app", "a", false);
        let frames = [
            (spin, NO_REC),
            (&["app::b"][..], REC),
            (wr, REC),
            (entry, NO_REC),
        ];
        assert_eq!(cut_of(&[&w, &a, &b], &frames), Some(1));
        let twice = [
            (spin, NO_REC),
            (&["app::b"][..], REC),
            (&["app::b"][..], REC),
            (wr, REC),
            (entry, NO_REC),
        ];
        assert_eq!(cut_of(&[&w, &a, &b], &twice), None);
    }

    /// A default release build: no DWARF (inlined traced fns have no names)
    /// and no frame pointers (the walk skips frames), so the open calls are
    /// not all in the stack. Symbols alone still place a sample whose leaf
    /// frame is an open call's function (the innermost call was inlined into
    /// it: nothing ran below that call), and one in the probe (a call at its
    /// boundary: the probe's frames, and the frame that called it when that
    /// is not an open call's, go below the innermost open call).
    #[test]
    fn symbols_alone_place_leaves_in_open_calls_and_in_the_probe() {
        let main: &[&str] = &["main"];
        let step = site("regex_automata::backtrack", "Backtracker::step", false);
        let search = site("regex_automata::backtrack", "Backtracker::search", false);
        let index = site("regex_automata::util", "Slots::index", false);
        let open = [&search, &step, &index];
        let step_sym: &[&str] = &["regex_automata::backtrack::Backtracker::step"];
        let search_sym: &[&str] = &["regex_automata::backtrack::Backtracker::search"];
        // `index` inlined into `step`; `search` skipped by the walk.
        let frames = [(step_sym, NO_REC), (main, REC)];
        assert_eq!(cut_of(&open, &frames), Some(0));
        // The leaf is an outer open call's function (`step` and `index` both
        // inlined into `search`).
        assert_eq!(cut_of(&open, &[(search_sym, NO_REC), (main, REC)]), Some(0));
        // In the probe, called from the function `index` was inlined into.
        let exit: &[&str] = &["fgtrace_core::probe::exit"];
        let frames = [(exit, REC), (step_sym, NO_REC), (main, REC)];
        assert_eq!(cut_of(&open, &frames), Some(1));
        // The probe's own helpers below it (a chunk handed to the collector).
        let send: &[&str] = &["crossbeam_channel::Sender<T>::try_send"];
        let handoff: &[&str] = &["fgtrace_core::probe::handoff"];
        let frames = [
            (send, REC),
            (handoff, REC),
            (exit, REC),
            (step_sym, NO_REC),
            (main, REC),
        ];
        assert_eq!(cut_of(&open, &frames), Some(3));
        // Called from a child's own function, not an open call's (the child
        // is being entered or left, outside its recorded time): that frame
        // goes below the innermost open call too.
        let enter: &[&str] = &["fgtrace_core::probe::enter_out"];
        let child: &[&str] = &["regex_automata::util::Input::start"];
        let frames = [(enter, REC), (child, NO_REC), (main, REC)];
        assert_eq!(cut_of(&open, &frames), Some(2));
        // A leaf in an untraced function: which frames lie between it and
        // the open calls is not known without them in the stack.
        let memchr: &[&str] = &["memchr::memchr::fallback::One::find"];
        assert_eq!(cut_of(&open, &[(memchr, REC), (main, REC)]), None);
        // Nor is a probe leaf whose callers are all unknown.
        assert_eq!(cut_of(&open, &[(exit, REC)]), None);
        // A leaf in a traced fn that is not open: a child at its first or
        // last instructions, outside its recorded time; its frame goes below
        // the innermost open call. Only a traced fn's: an untraced one may
        // lie below frames the walk skipped.
        let end = site("regex_automata::util", "Input::end", false);
        let other: &[&str] = &["regex_automata::util::Input::end"];
        let frames = [(other, NO_REC), (main, REC)];
        assert_eq!(cut_of(&open, &frames), None);
        let sites = [search.clone(), step.clone(), index.clone(), end];
        assert_eq!(cut_in(&open, &sites, &frames), Some(1));
        assert_eq!(cut_in(&open, &sites, &[(memchr, REC), (main, REC)]), None);

        // The innermost open call's own frames are there, as many as its
        // function has open calls, while an outer call was inlined into the
        // thread's closure (no name without DWARF): that is the cut.
        let sw = site("app::split", "split_workload", false);
        let a = site("app::split", "parent_a", false);
        let b = site("app::split", "parent_b", false);
        let helper: &[&str] = &["app::split::helper"];
        let a_sym: &[&str] = &["app::split::parent_a"];
        let b_sym: &[&str] = &["app::split::parent_b"];
        let begin: &[&str] = &["std::sys::backtrace::__rust_begin_short_backtrace"];
        let entry: &[&str] = &["start_thread"];
        let frames = [
            (helper, NO_REC),
            (a_sym, REC),
            (begin, REC),
            (entry, NO_REC),
        ];
        assert_eq!(cut_of(&[&sw, &a], &frames), Some(1));
        let frames = [
            (helper, NO_REC),
            (b_sym, REC),
            (b_sym, REC),
            (b_sym, REC),
            (begin, REC),
            (entry, NO_REC),
        ];
        assert_eq!(cut_of(&[&sw, &b, &b, &b], &frames), Some(1));
        // More frames of it than open calls, or fewer: which is which is
        // not known.
        assert_eq!(cut_of(&[&sw, &b, &b], &frames), None);
        assert_eq!(cut_of(&[&sw, &b, &b, &b, &b], &frames), None);
    }
    /// `.eh_frame` unwinding of a stack copy that ends inside a large frame
    /// (regex-automata's `meta::strategy::new` takes 16 KiB of stack, more
    /// than the sampler copies): the walk stops there, and the open calls
    /// outside that frame are not in the stack. The calls from the one the
    /// outermost frame belongs to are matched as if they were all.
    #[test]
    fn a_walk_cut_short_is_matched_from_its_outermost_frame() {
        let regex_new = site("regex::regex::string", "Regex::new", false);
        let build = site("regex_automata::meta::regex", "Builder::build", false);
        let strategy = site("regex_automata::meta::strategy", "new", false);
        let core_new = site("regex_automata::meta::strategy", "Core::new", false);
        let pikevm = site("regex_automata::meta::wrappers", "PikeVM::new", false);
        let engine = site("regex_automata::meta::wrappers", "PikeVMEngine::new", false);
        let c = site(
            "regex_automata::nfa::thompson::compiler",
            "Compiler::c",
            false,
        );
        let top: &[&str] = &["new", "regex_automata::meta::strategy::new"];
        let c_sym: &[&str] = &["regex_automata::nfa::thompson::compiler::Compiler::c"];
        let compile = site(
            "regex_automata::nfa::thompson::compiler",
            "Utf8Compiler::compile",
            false,
        );
        let hash = site(
            "regex_automata::nfa::thompson::map",
            "Utf8BoundedMap::hash",
            false,
        );
        // In the probe entering the innermost open call (past its start
        // time), inlined into its own frame.
        let open = [
            &regex_new, &build, &strategy, &core_new, &c, &c, &compile, &hash,
        ];
        let probe: &[&str] = &[
            "enter",
            "regex_automata::nfa::thompson::map::Utf8BoundedMap::hash",
        ];
        let compile_sym: &[&str] =
            &["regex_automata::nfa::thompson::compiler::Utf8Compiler::compile"];
        let frames = [
            (probe, PROBE),
            (compile_sym, NO_REC),
            (c_sym, NO_REC),
            (c_sym, NO_REC),
            (top, REC),
        ];
        assert_eq!(cut_of(&open, &frames), Some(1));
        // Only where the walk did not reach the thread's first frame: there
        // the open calls missing are not above the stack.
        let entry: &[&str] = &["start_thread"];
        let mut whole = frames.to_vec();
        whole.push((entry, NO_REC));
        assert_eq!(cut_of(&open, &whole), None);
        // Nor when the outermost frame's function has two open calls
        // (which one the frame is, is not known).
        let twice = [
            &regex_new, &strategy, &build, &strategy, &core_new, &c, &c, &compile, &hash,
        ];
        assert_eq!(cut_of(&twice, &frames), None);
        // Nor when the outermost frame is another function of the crate
        // named like its traced free fn.
        let mut other = frames.to_vec();
        other[4].0 = &["new", "regex_automata::util::pool::new"];
        assert_eq!(cut_of(&open, &other), None);
        // The calls from the outermost frame's on must all be there, in
        // order, as in a whole stack.
        let three = [
            &regex_new, &build, &strategy, &core_new, &c, &c, &c, &compile, &hash,
        ];
        assert_eq!(cut_of(&three, &frames), None);
        // The leaf is an open call's function, the innermost call inlined
        // into it at an address line tables give to the outer one; a
        // crate's free `new` (`meta::strategy::new`) is not `PikeVM::new`.
        let open = [&regex_new, &build, &strategy, &core_new, &pikevm, &engine];
        let leaf: &[&str] = &["regex_automata::meta::wrappers::PikeVM::new"];
        assert_eq!(cut_of(&open, &[(leaf, NO_REC), (top, REC)]), Some(0));
    }

    /// Line tables name inlined functions without their path, so `drop<Ast,
    /// Global>` (a `Vec`'s drop) fits a traced `Ast::drop` as well as the
    /// frame named `<Ast as Drop>::drop`. The full name says which frame is
    /// the traced function's.
    #[test]
    fn a_full_name_outweighs_a_path_less_name_of_the_same_last_segment() {
        let build = site("regex_automata::meta::regex", "Builder::build", false);
        let build_many = site("regex_automata::meta::regex", "Builder::build_many", false);
        let ast_drop = site("regex_syntax::ast", "Ast::drop", false);
        let names = [
            "core::ptr::drop_in_place<regex_syntax::ast::ClassSetItem>",
            "<regex_syntax::ast::Ast as core::ops::drop::Drop>::drop",
            "core::ptr::drop_in_place<regex_syntax::ast::Ast>",
            "drop<regex_syntax::ast::Ast, alloc::alloc::Global>",
            "build_many<&str>",
            "regex_automata::meta::regex::Builder::build",
            "start_thread",
        ];
        assert_eq!(
            chain_match(&[&build, &build_many, &ast_drop], &names),
            ChainMatch::At(1)
        );
        // Without the full name, the path-less one is the only candidate.
        let mut inlined = names;
        inlined[1] = "drop";
        assert_eq!(
            chain_match(&[&build, &build_many, &ast_drop], &inlined),
            ChainMatch::Ambiguous
        );
        // Two frames under the full name for one open call stay a guess.
        let mut twice = names;
        twice[3] = "regex_syntax::ast::Ast::drop";
        assert_eq!(
            chain_match(&[&build, &build_many, &ast_drop], &twice),
            ChainMatch::Ambiguous
        );
        // In the probe of a call being entered, inlined into the open call:
        // the path-less name is the callee's (its own traced function), the
        // full one the open call's.
        let states = site("regex_automata::util::determinize", "add_nfa_states", false);
        let add = site(
            "regex_automata::util::determinize::state",
            "StateBuilderNFA::add_nfa_state_id",
            false,
        );
        let frames = [
            (
                &[
                    "atomic_load<u32>",
                    "load",
                    "enter",
                    "add_nfa_state_id",
                    "regex_automata::util::determinize::state::StateBuilderNFA::add_nfa_state_id",
                ][..],
                PROBE,
            ),
            (
                &["regex_automata::util::determinize::add_nfa_states"][..],
                REC,
            ),
            (&["start_thread"][..], NO_REC),
        ];
        assert_eq!(cut_of(&[&states, &add], &frames), Some(4));
        // The callee open (past its start time): its path-less frame.
        let repr = site(
            "regex_automata::util::determinize::state",
            "ReprVec::add_nfa_state_id",
            false,
        );
        assert_eq!(cut_of(&[&states, &add, &repr], &frames), Some(3));
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
            sites: &[],
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
}
