//! Failure messages: the offending call's function graph in ftrace format
//! (drawn by `view::graph`), with instructions per call added as trailing
//! comments and marks on the lines an assertion is about.

use super::captured::{Capture, Unit};
use fgtrace_trace::Event;
use fgtrace_view::human::human_duration;
use fgtrace_view::{self as view, GraphOptions, ThreadColumn};
use std::collections::HashMap;
use std::fmt::Write;

/// Graph lines kept in a message: the first `HEAD` and the last `TAIL`.
const HEAD: usize = 60;
const TAIL: usize = 15;

/// What each line of the graph body is, in the order `GraphWriter` prints.
enum Line {
    Open(usize),
    Leaf(usize),
    Close(usize),
}

/// The graph of spans `lo..hi` (one thread, pre-order), depths shifted so
/// that `lo` is at 0, with `marks` appended to the lines of those calls.
/// `max_lines` bounds the body (middle lines dropped); `header` keeps the
/// ftrace column titles.
fn range(
    cap: &Capture,
    lo: usize,
    hi: usize,
    marks: &[(usize, &str)],
    header: bool,
    max_lines: usize,
) -> String {
    let spans = &cap.spans;
    let d0 = spans[lo..hi]
        .iter()
        .map(|s| s.call.depth)
        .min()
        .unwrap_or(0);
    let events = spans[lo..hi].iter().map(|s| {
        let mut c = s.call;
        c.depth -= d0;
        Event::Call(c)
    });
    let opts = GraphOptions {
        thread_column: ThreadColumn::Off,
        tail: true,
        ..Default::default()
    };
    let mut buf = Vec::new();
    if view::write_graph(cap.trace().meta(), view::ok_events(events), &opts, &mut buf).is_err() {
        return String::from("(graph unavailable)\n");
    }
    let text = String::from_utf8_lossy(&buf);
    // The header ends with the column titles' second line (body lines may
    // start with `#` too: ftrace's mark for calls over 1 ms).
    let all: Vec<&str> = text.lines().collect();
    let split = all
        .iter()
        .position(|l| l.contains("FUNCTION CALLS"))
        .map_or(0, |i| (i + 2).min(all.len()));
    let (head, body) = all.split_at(split);

    let mut lines = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for i in lo..hi {
        let d = spans[i].call.depth;
        while let Some(&o) = open.last() {
            if spans[o].call.depth < d {
                break;
            }
            lines.push(Line::Close(o));
            open.pop();
        }
        if spans[i].call.has_children() {
            lines.push(Line::Open(i));
            open.push(i);
        } else {
            lines.push(Line::Leaf(i));
        }
    }
    lines.extend(open.into_iter().rev().map(Line::Close));

    let mark = |i: usize| {
        marks
            .iter()
            .filter(|m| m.0 == i)
            .map(|m| format!("   {}", m.1))
            .collect::<String>()
    };
    // Instructions and allocation figures (callees included), as tail comments.
    let instr = |i: usize| {
        let mut parts = Vec::new();
        if let Some(n) = spans[i].instr {
            parts.push(format!("{n} instr"));
        }
        if let Some(a) = spans[i].allocs {
            parts.push(fgtrace_view::human::alloc_note(&a));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    };
    let annotated: Vec<String> = if lines.len() == body.len() {
        body.iter()
            .zip(&lines)
            .map(|(l, k)| match *k {
                Line::Leaf(i) => match instr(i) {
                    Some(n) => format!("{l}  /* {n} */{}", mark(i)),
                    None => format!("{l}{}", mark(i)),
                },
                Line::Open(i) => format!("{l}{}", mark(i)),
                Line::Close(i) => match (instr(i), l.strip_suffix(" */")) {
                    (Some(n), Some(s)) => format!("{s}: {n} */"),
                    _ => l.to_string(),
                },
            })
            .collect()
    } else {
        body.iter().map(|l| l.to_string()).collect()
    };

    let mut out = String::new();
    if header {
        for l in head.iter().filter(|l| l.len() > 2) {
            out.push_str(l);
            out.push('\n');
        }
    }
    let n = annotated.len();
    if n > max_lines.max(HEAD + TAIL + 1) {
        for l in &annotated[..HEAD] {
            let _ = writeln!(out, "{l}");
        }
        let _ = writeln!(
            out,
            "                 ... {} lines left out ...",
            n - HEAD - TAIL
        );
        for l in &annotated[n - TAIL..] {
            let _ = writeln!(out, "{l}");
        }
    } else {
        for l in &annotated {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

/// The graph of one call and everything it called.
pub(super) fn tree(cap: &Capture, root: usize, marks: &[(usize, &str)]) -> String {
    range(cap, root, cap.spans[root].end, marks, true, HEAD + TAIL)
}

/// The whole capture, thread by thread.
pub(super) fn whole(cap: &Capture, max_lines: usize) -> String {
    let meta = cap.trace().meta();
    let mut out = String::new();
    let mut lo = 0;
    while lo < cap.spans.len() {
        let t = cap.spans[lo].call.thread;
        let hi = lo
            + cap.spans[lo..]
                .iter()
                .take_while(|s| s.call.thread == t)
                .count();
        if meta.threads.len() > 1 {
            let _ = writeln!(out, "thread {}:", meta.thread_label(t));
        }
        out.push_str(&range(cap, lo, hi, &[], lo == 0, max_lines));
        lo = hi;
    }
    if out.is_empty() {
        out.push_str("(no traced calls)\n");
    }
    out
}

/// `handle > parse > parse_headers (thread main-1234)`.
pub(super) fn path(cap: &Capture, i: usize) -> String {
    let mut names: Vec<&str> = cap
        .ancestors(i)
        .map(|a| cap.site_of(a).name.as_str())
        .collect();
    names.reverse();
    names.push(&cap.site_of(i).name);
    format!(
        "{} (thread {})",
        names.join(" > "),
        cap.trace().meta().thread_label(cap.spans[i].call.thread)
    )
}

/// A call's path, graph, and its direct callees by time.
pub(super) fn unit(cap: &Capture, u: &Unit) -> String {
    let Some(i) = u.span else {
        return "(the future's polls were not recorded)\n".into();
    };
    let mut out = format!("at {}:\n", path(cap, i));
    match u.polls {
        // A future: each of its polls, with whatever ran between them left out.
        Some((first, last)) => {
            let (site, id) = (cap.spans[first].call.site, cap.spans[first].future);
            // The future's own polls: those of its id, where recorded (the
            // polls of its site's other futures interleave with them).
            let polls: Vec<usize> = (first..=last)
                .filter(|&j| {
                    let s = &cap.spans[j];
                    s.call.site == site
                        && s.call.is_poll() == cap.spans[first].call.is_poll()
                        && match id {
                            Some(id) => s.future == Some(id),
                            None => s.call.depth == cap.spans[first].call.depth,
                        }
                })
                .collect();
            let _ = writeln!(out, "its {} polls:", polls.len());
            for (k, &p) in polls.iter().enumerate().take(8) {
                out.push_str(&range(cap, p, cap.spans[p].end, &[], k == 0, HEAD + TAIL));
            }
            if polls.len() > 8 {
                let _ = writeln!(
                    out,
                    "                 ... {} more polls ...",
                    polls.len() - 8
                );
            }
        }
        None => {
            out.push_str(&tree(cap, i, &[]));
            out.push_str(&callees(cap, i));
        }
    }
    out
}

/// The direct callees of span `i`, by site, most time first.
fn callees(cap: &Capture, i: usize) -> String {
    let s = &cap.spans[i];
    let mut by: HashMap<u32, (usize, u64, Option<u64>)> = HashMap::new();
    let mut j = i + 1;
    while j < s.end {
        let c = &cap.spans[j];
        let e = by.entry(c.call.site).or_insert((0, 0, Some(0)));
        e.0 += 1;
        e.1 += c.call.dur_ns;
        e.2 = e.2.zip(c.instr).map(|(a, b)| a + b);
        j = c.end;
    }
    if by.is_empty() {
        return String::new();
    }
    let mut rows: Vec<_> = by.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
    let total = s.call.dur_ns.max(1) as f64;
    let mut out = String::from("\ndirect callees of this call, most time first:\n");
    let mut row = |name: &str, n: Option<usize>, ns: u64, instr: Option<u64>| {
        let calls = n.map_or(String::new(), |n| {
            format!("{n} call{}", if n == 1 { "" } else { "s" })
        });
        let instr = instr.map_or(String::new(), |v| format!("  {v} instr"));
        let _ = writeln!(
            out,
            "  {:>12} {:>6.1}%  {calls:>9}  {name}{instr}",
            human_duration(ns),
            ns as f64 * 100.0 / total
        );
    };
    for (site, (n, ns, instr)) in rows.iter().take(10) {
        row(cap.trace().meta().site_name(*site), Some(*n), *ns, *instr);
    }
    if rows.len() > 10 {
        let rest: u64 = rows[10..].iter().map(|r| r.1 .1).sum();
        row(&format!("({} more)", rows.len() - 10), None, rest, None);
    }
    row("(self)", None, s.self_ns, s.self_instr);
    out
}

/// For call-count failures: who called `name`, then the whole graph.
pub(super) fn callers(cap: &Capture, name: &str) -> String {
    let mask = cap.site_mask(name);
    let mut by: Vec<(String, usize)> = Vec::new();
    for s in &cap.spans {
        if !mask[s.call.site as usize] {
            continue;
        }
        let caller = s.parent.map_or("(the captured closure)".to_string(), |p| {
            cap.site_of(p).name.clone()
        });
        match by.iter_mut().find(|b| b.0 == caller) {
            Some(b) => b.1 += 1,
            None => by.push((caller, 1)),
        }
    }
    let mut out = String::new();
    if !by.is_empty() {
        out.push_str("called from:\n");
        for (c, n) in &by {
            let _ = writeln!(out, "  {n:>6} x  {c}");
        }
    }
    out.push_str("\neverything captured:\n");
    out.push_str(&whole(cap, HEAD + TAIL));
    out
}

/// Two calls shown together: the graph of their innermost common caller, or
/// of each one's outermost caller.
pub(super) fn pair(cap: &Capture, x: usize, y: usize) -> String {
    let up = |i: usize| {
        std::iter::once(i)
            .chain(cap.ancestors(i))
            .collect::<Vec<_>>()
    };
    let (ux, uy) = (up(x), up(y));
    let marks = [(x, "<== this"), (y, "<== and this")];
    if let Some(&lca) = ux.iter().find(|a| uy.contains(a)) {
        return tree(cap, lca, &marks);
    }
    let (rx, ry) = (*ux.last().unwrap_or(&x), *uy.last().unwrap_or(&y));
    let (a, b) = if cap.spans[rx].call.start_ns <= cap.spans[ry].call.start_ns {
        (rx, ry)
    } else {
        (ry, rx)
    };
    let mut out = tree(cap, a, &marks);
    out.push('\n');
    out.push_str(&tree(cap, b, &marks));
    out
}
