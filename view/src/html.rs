//! One self-contained HTML page per trace: the summary, a sortable table of
//! the top functions, the flamegraph (combined when the trace has samples,
//! inferno's own zoom and search kept), per-call duration plots of the top
//! functions, and the function graph of the slowest root call. Everything is
//! inline (CSS, a few lines of JS, SVGs): the file can be mailed, attached to
//! a CI run or opened offline, and fetches nothing.
//!
//! Two streaming passes over the events, so memory stays bounded: the first
//! builds the report, the flamegraph's stacks, finds the slowest root call
//! and, as `fgtrace graph` does, the values of `async fn`s to draw on their
//! polls (their futures come after the polls); the second, knowing the top functions and that call, collects the
//! plotted functions' calls and the call's subtree (capped at
//! [`HtmlOptions::graph_calls`]). `events` is therefore asked for twice.
//!
//! Placement matters for inferno's script: it takes the document's *first*
//! `<svg>` as the flamegraph and uses fixed element ids, so the flamegraph
//! comes before the plots and the page uses none of those ids. Its global
//! `text { .. }` style rule is scoped to the flamegraph so the plots keep
//! their fonts.

mod passes;

use self::passes::{longest_stretches, FirstPass, Flame, Root, SecondPass, Stretch, Subtree};
use super::flame::{FlameError, FlameOptions};
use super::flame_svg::folded_svg;
use super::graph::{GraphOptions, PollValues, PollValuesBuilder};
use super::human::human_duration;
use super::offcpu::{OffCpuFoldedBuilder, OffCpuFoldedOptions, OffCpuSummary};
use super::plot::{durations_svg, CallDurations, DurationsBuilder, PlotOptions};
use super::report::{Report, ReportBuilder, ReportOptions};
use crate::consume::feed;
use crate::folded::{Folded, FoldedBuilder, FoldedOptions};
use crate::resolve::Resolve;
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{saturating_sum, Event, TraceError, TraceMeta};
use std::fmt::Write as _;
use std::io::Write;

/// What goes on the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HtmlOptions {
    /// Page title; `None`: `fgtrace: PROGRAM`.
    pub title: Option<String>,
    /// Where the trace came from (a file name), shown under the title.
    pub source: Option<String>,
    /// Rows of the function table (the functions with the most total time).
    pub rows: usize,
    /// How many of the top functions get a duration plot.
    pub plots: usize,
    /// Slowest calls listed under each plot.
    pub slowest: usize,
    /// Most calls of the slowest root call's graph shown (the rest is counted).
    pub graph_calls: usize,
    /// Only these threads (empty: all).
    pub threads: Vec<ThreadSel>,
}

impl Default for HtmlOptions {
    fn default() -> Self {
        HtmlOptions {
            title: None,
            source: None,
            rows: 100,
            plots: 3,
            slowest: 5,
            graph_calls: 2000,
            threads: Vec::new(),
        }
    }
}

/// Renders the page into `out`. `events` is called twice (see the module
/// doc); `resolver` names sampled addresses. On a read error everything read
/// before it is on the page (which says the trace is damaged) and the error
/// is returned; write errors come back as [`TraceError::Io`].
///
/// ```
/// use fgtrace::view::html::{write_html, HtmlOptions};
/// use fgtrace::view::{ok_events, HexResolve};
///
/// #[fgtrace::traced]
/// fn outer() -> u32 { inner() + inner() }
/// #[fgtrace::traced]
/// fn inner() -> u32 { 1 }
///
/// let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// outer();
/// let trace = session.stop()?;
///
/// // One self-contained page: summary, table, flamegraph, plots, graph.
/// let mut page = Vec::new();
/// write_html(&trace.meta, || ok_events(trace.events()), HexResolve, &HtmlOptions::default(), &mut page)?;
/// let page = String::from_utf8(page)?;
/// assert!(page.contains("<html") && page.contains("inner"), "{}", &page[..200]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_html<I, R, W>(
    meta: &TraceMeta,
    events: impl FnMut() -> I,
    resolver: R,
    opts: &HtmlOptions,
    out: W,
) -> Result<(), TraceError>
where
    I: IntoIterator<Item = Result<Event, TraceError>>,
    R: Resolve,
    W: Write,
{
    write_html_passes(meta, events, resolver, opts, out)
}

/// [`write_html`]'s two passes: the report, the flamegraph and the slowest
/// root call first, then the top functions' plots and that call's graph.
fn write_html_passes<I, R, W>(
    meta: &TraceMeta,
    mut events: impl FnMut() -> I,
    resolver: R,
    opts: &HtmlOptions,
    mut out: W,
) -> Result<(), TraceError>
where
    I: IntoIterator<Item = Result<Event, TraceError>>,
    R: Resolve,
    W: Write,
{
    let mask = thread_mask(meta, &opts.threads);
    let filtered = !opts.threads.is_empty();
    let ropts = ReportOptions {
        threads: opts.threads.clone(),
        ..ReportOptions::default()
    };
    let fopts = FoldedOptions {
        threads: opts.threads.clone(),
        ..FoldedOptions::default()
    };
    let samples: u64 = meta.total_samples();
    let has_samples = samples > 0 || meta.sampling.is_some();
    let flame = match (meta.total_calls() > 0, has_samples) {
        (true, true) => Flame::Other(
            FoldedBuilder::combined(meta, &fopts, resolver),
            "traced + sampled",
        ),
        (false, true) => Flame::Other(FoldedBuilder::sampled(meta, &fopts, resolver), "sampled"),
        _ => Flame::Traced(FoldedBuilder::traced(meta, &fopts)),
    };

    // Off-CPU time (when recorded): stacks by time switched out, and the
    // longest stretches with the innermost call each started in.
    let off_stacks = OffCpuFoldedBuilder::new(
        meta,
        &OffCpuFoldedOptions {
            threads: opts.threads.clone(),
            ..OffCpuFoldedOptions::default()
        },
    )
    .ok();
    let stretches = longest_stretches(meta, &mask, filtered, 10);

    // Pass 1: report, stacks, slowest root call.
    let mut first = FirstPass {
        mask: &mask,
        filtered,
        report: ReportBuilder::new(meta, &ropts),
        flame,
        off_stacks,
        stretches,
        root: None,
        poll_values: PollValues::wanted(meta).then(|| PollValuesBuilder::new(meta)),
    };
    let Ok(failed) = feed(&mut first, events());
    let FirstPass {
        report,
        flame,
        off_stacks,
        stretches,
        root,
        poll_values,
        ..
    } = first;
    let report = report.finish();
    let (folded, flame_kind) = flame.finish();
    let off_stacks = off_stacks.map(|b| b.finish());

    // Pass 2: the top functions' calls and the slowest root's subtree (up to
    // where pass 1 stopped, if it failed).
    let top: Vec<_> = report.functions.iter().take(opts.plots).collect();
    let gopts = GraphOptions {
        off_cpu: meta.off_cpu.as_ref().is_some_and(|o| o.is_available()),
        poll_values: poll_values.map(|b| std::sync::Arc::new(b.finish())),
        ..GraphOptions::default()
    };
    let mut second = SecondPass {
        plots: top
            .iter()
            .map(|f| DurationsBuilder::for_sites(meta, &[f.site], opts.slowest, &opts.threads))
            .collect(),
        graph: Subtree::new(meta, &gopts, root, opts.graph_calls)?,
    };
    if !second.plots.is_empty() || root.is_some() {
        // Pass 1 already reported a read error, if any.
        let _ = feed(&mut second, events())?;
    }
    let durations: Vec<Option<CallDurations>> =
        second.plots.into_iter().map(|p| p.finish().ok()).collect();
    let graph_text = second.graph.finish()?;

    // The page.
    let mut page = String::with_capacity(1 << 20);
    let title = opts
        .title
        .clone()
        .unwrap_or_else(|| format!("fgtrace: {}", program_name(&meta.program)));
    head(&mut page, &title);
    header(&mut page, &title, meta, opts, failed.as_ref());
    summary(&mut page, meta, &report, &mask, filtered);
    table(&mut page, &report, opts.rows);
    flamegraph(&mut page, &folded, flame_kind, opts);
    off_cpu_section(&mut page, meta, off_stacks.as_ref(), &stretches);
    duration_plots(
        &mut page,
        meta,
        &top.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
        &durations,
    );
    graph_section(&mut page, meta, root, &graph_text);
    viewers_section(&mut page, opts.source.as_deref());
    tail(&mut page);
    out.write_all(page.as_bytes())?;
    out.flush()?;
    failed.map_or(Ok(()), Err)
}

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + s.len() / 8);
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn program_name(p: &str) -> &str {
    p.rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(p)
}

/// `YYYY-MM-DD HH:MM:SS UTC` from Unix nanoseconds (civil-from-days).
fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

const CSS: &str = r#"
:root { --fg: #1d2330; --muted: #5b6475; --line: #dde2ea; --accent: #2f6fb3; --bad: #b3261e; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: #f6f7f9; }
header.page { background: #1d2330; color: #fff; padding: 18px 28px; }
header.page h1 { margin: 0; font-size: 22px; font-weight: 600; }
header.page .sub { color: #b8c2d6; margin-top: 4px; }
main { padding: 8px 28px 40px; max-width: 1500px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 14px 18px; margin: 18px 0; }
h2 { font-size: 17px; margin: 0 0 10px; }
h3 { font-size: 15px; margin: 18px 0 6px; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.note { color: var(--muted); margin: 6px 0; }
.bad { color: var(--bad); font-weight: 600; }
.damaged { background: #fdecea; border: 1px solid #f5c2c0; color: var(--bad); padding: 10px 14px; border-radius: 6px; margin-top: 14px; }
dl.summary { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 0; }
dl.summary dt { color: var(--muted); }
dl.summary dd { margin: 0; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
td.name { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; white-space: normal; word-break: break-all; }
thead th { background: #eef1f6; position: sticky; top: 0; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th:hover { background: #e2e7f0; }
th[aria-sort="ascending"]::after { content: " \25B2"; font-size: 10px; }
th[aria-sort="descending"]::after { content: " \25BC"; font-size: 10px; }
tbody tr:hover { background: #f3f6fb; }
.scroll { max-height: 560px; overflow: auto; border: 1px solid var(--line); }
#flame { width: 100%; }
#flame svg { display: block; width: 100%; }
.plot svg { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); }
table.slowest { max-width: 1100px; margin: 6px 0 22px; }
pre.graph { background: #fbfbfc; border: 1px solid var(--line); padding: 10px; overflow: auto; max-height: 700px; font: 12px/1.35 ui-monospace, SFMono-Regular, Menlo, monospace; }
footer { color: var(--muted); padding: 0 28px 24px; }
"#;

/// Runs first: every error on the page ends up in `data-fg-errors` on
/// `<html>` ("none" once the page has loaded cleanly), where a headless
/// browser's DOM dump (and a test) can see it.
const ERROR_CAPTURE: &str = r#"(function () {
  var errors = [];
  var root = document.documentElement;
  function note(m) { errors.push(String(m)); root.setAttribute("data-fg-errors", errors.join(" | ")); }
  window.addEventListener("error", function (e) {
    note(e.message || ("failed to load " + ((e.target && (e.target.src || e.target.href)) || "a resource")));
  }, true);
  window.addEventListener("unhandledrejection", function (e) { note(e.reason); });
  var consoleError = console.error;
  console.error = function () { note(Array.prototype.join.call(arguments, " ")); return consoleError.apply(console, arguments); };
  window.addEventListener("load", function () {
    setTimeout(function () {
      if (!errors.length) root.setAttribute("data-fg-errors", "none");
    }, 100);
  });
})();"#;

/// Click a header to sort (numbers largest first, names A to Z; again to
/// reverse); `#sort=<key>` in the URL sorts on load.
const SORT_JS: &str = r#"(function () {
  function sort(table, th, dir) {
    var col = th.cellIndex, num = th.getAttribute("data-type") === "num";
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    function key(r) { var c = r.cells[col]; return c.hasAttribute("data-v") ? c.getAttribute("data-v") : c.textContent; }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      return dir * (num ? parseFloat(x) - parseFloat(y) : x.localeCompare(y));
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener("click", function () {
        var cur = th.getAttribute("aria-sort");
        var first = th.getAttribute("data-type") === "num" ? -1 : 1;
        sort(table, th, cur ? (cur === "ascending" ? -1 : 1) : first);
      });
    });
  });
  var m = /(?:^#|&)sort=([a-z0-9]+)(?:-(asc|desc))?/.exec(location.hash);
  if (m) {
    var th = document.querySelector('table.sortable th[data-key="' + m[1] + '"]');
    if (th) sort(th.closest("table"), th, m[2] ? (m[2] === "asc" ? 1 : -1) : (th.getAttribute("data-type") === "num" ? -1 : 1));
  }
})();"#;

fn head(p: &mut String, title: &str) {
    let _ = write!(
        p,
        "<!DOCTYPE html>\n<html lang=\"en\" data-fg-errors=\"pending\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"fgtrace {}\">\n<title>{}</title>\n<script>{}</script>\n<style>{}</style>\n</head>\n<body>\n",
        env!("CARGO_PKG_VERSION"),
        escape(title),
        ERROR_CAPTURE,
        CSS
    );
}

fn header(
    p: &mut String,
    title: &str,
    meta: &TraceMeta,
    opts: &HtmlOptions,
    failed: Option<&TraceError>,
) {
    let mut sub = Vec::new();
    if let Some(s) = &opts.source {
        sub.push(escape(s));
    }
    if meta.clock.start_unix_ns > 0 {
        sub.push(format!("recorded {}", utc(meta.clock.start_unix_ns)));
    }
    let _ = write!(
        p,
        "<header class=\"page\"><h1>{}</h1><div class=\"sub\">{}</div></header>\n<main>\n",
        escape(title),
        sub.join(" &middot; ")
    );
    if let Some(e) = failed {
        let _ = writeln!(
            p,
            "<div class=\"damaged\" id=\"damaged\">The trace is damaged: {}. Everything read before the damage is shown.</div>",
            escape(&e.to_string())
        );
    }
}

/// `3 (main-1 10 calls, ...)`: every thread with its calls, or past
/// [`SUMMARY_THREADS`] the busiest ones and how many calls the others made.
fn threads_summary(meta: &TraceMeta, threads: &[(usize, &fgtrace_trace::ThreadInfo)]) -> String {
    let mut busiest: Vec<_> = threads.to_vec();
    if busiest.len() > SUMMARY_THREADS + 1 {
        busiest.sort_by_key(|&(i, t)| (std::cmp::Reverse(t.calls), i));
        busiest.truncate(SUMMARY_THREADS);
    }
    let mut parts: Vec<String> = busiest
        .iter()
        .map(|(i, t)| {
            format!(
                "{} {} calls",
                escape(&meta.thread_label(*i as u32)),
                t.calls
            )
        })
        .collect();
    let others = threads.len() - busiest.len();
    if others > 0 {
        let shown: u64 = busiest.iter().map(|(_, t)| t.calls).sum();
        let all = saturating_sum(threads.iter().map(|(_, t)| t.calls));
        parts.push(format!(
            "and {others} other threads, {} calls",
            all.saturating_sub(shown)
        ));
    }
    format!("{} ({})", threads.len(), parts.join(", "))
}

/// Threads the summary names one by one.
const SUMMARY_THREADS: usize = 10;

fn summary(p: &mut String, meta: &TraceMeta, report: &Report, mask: &[bool], filtered: bool) {
    let sel = |i: usize| shown(mask, filtered, i as u32);
    let threads: Vec<_> = meta
        .threads
        .iter()
        .enumerate()
        .filter(|(i, _)| sel(*i))
        .collect();
    let samples = saturating_sum(threads.iter().map(|(_, t)| t.samples));
    let samples_lost = saturating_sum(threads.iter().map(|(_, t)| t.samples_lost));
    let lost = saturating_sum(report.losses.iter().map(|l| l.lost));
    let overruns = saturating_sum(report.losses.iter().map(|l| l.overruns));
    let mut rows: Vec<(&str, String)> = vec![
        ("Program", escape(&meta.program_and_pid())),
        ("Duration", human_duration(meta.duration_ns).to_string()),
        ("Threads", threads_summary(meta, &threads)),
        (
            "Calls",
            format!("{} of {} functions", report.calls, report.functions.len()),
        ),
        (
            "Samples",
            match &meta.sampling {
                Some(s) => format!("{samples} ({})", escape(s)),
                None if samples == 0 => "none (sampling off)".to_string(),
                None => samples.to_string(),
            },
        ),
    ];
    let loss = |n: u64| {
        if n > 0 {
            format!("<span class=\"bad\">{n}</span>")
        } else {
            "0".to_string()
        }
    };
    rows.push((
        "Losses",
        format!(
            "{} call records lost, {} overruns, {} samples lost",
            loss(lost),
            loss(overruns),
            loss(samples_lost)
        ),
    ));
    rows.push((
        "Clock",
        format!(
            "{} at {:.4} GHz, {:?} mode",
            escape(&meta.clock.source),
            meta.clock.ticks_per_ns,
            meta.mode
        ),
    ));
    if !meta.filters.is_empty() {
        rows.push(("Filters", escape(&meta.filters)));
    }
    if let Some(o) = &meta.off_cpu {
        let v = if o.is_available() {
            let (mut blocked, mut preempted) = (0u64, 0u64);
            for t in o.threads.iter().filter(|t| sel(t.thread as usize)) {
                let x = t.total();
                blocked = blocked.saturating_add(x.blocked_ns);
                preempted = preempted.saturating_add(x.preempted_ns);
            }
            format!(
                "{} blocked, {} preempted{}",
                human_duration(blocked),
                human_duration(preempted),
                if o.lost() > 0 {
                    format!(
                        ", <span class=\"bad\">{} switch records lost</span>",
                        o.lost()
                    )
                } else {
                    String::new()
                }
            )
        } else {
            format!(
                "<span class=\"bad\">off-CPU unavailable: {}</span>",
                escape(o.reason())
            )
        };
        rows.push(("Off-CPU", v));
    }
    p.push_str("<section id=\"summary\"><h2>Summary</h2>\n<dl class=\"summary\">\n");
    for (k, v) in rows {
        let _ = writeln!(p, "<dt>{k}</dt><dd>{v}</dd>");
    }
    p.push_str("</dl>\n");
    for l in &report.loss_lines {
        let _ = writeln!(p, "<p class=\"bad\">{}</p>", escape(l.trim()));
    }
    p.push_str("</section>\n");
}

fn table(p: &mut String, report: &Report, rows: usize) {
    p.push_str("<section id=\"functions\"><h2>Top functions</h2>\n");
    if report.functions.is_empty() {
        p.push_str("<p class=\"note\">No traced calls.</p></section>\n");
        return;
    }
    let _ = writeln!(
        p,
        "<p class=\"note\">By total (inclusive) time; click a header to sort. {} of {} functions.</p>",
        rows.min(report.functions.len()),
        report.functions.len()
    );
    p.push_str("<div class=\"scroll\"><table class=\"sortable\" id=\"fn-table\">\n<thead><tr>");
    let cols = [
        ("name", "Function", "text"),
        ("calls", "Calls", "num"),
        ("total", "Total", "num"),
        ("self", "Self", "num"),
        ("avg", "Avg", "num"),
        ("min", "Min", "num"),
        ("max", "Max", "num"),
        ("p50", "p50", "num"),
        ("p99", "p99", "num"),
    ];
    // Per-call counters (allocation figures, instructions), as the text report shows them.
    let counter_cols: Vec<(&str, usize, bool)> = report
        .counter_names
        .iter()
        .enumerate()
        .flat_map(|(i, n)| match n.as_str() {
            "allocs" => vec![("Allocs", i, false), ("Self allocs", i, true)],
            "alloc_bytes" => vec![("Alloc bytes", i, false)],
            "instructions" => vec![("Instr", i, false), ("Self instr", i, true)],
            _ => vec![],
        })
        .collect();
    let has_off = report.off_cpu == Some(Ok(()));
    let off_cols = [
        ("oncpu", "On-CPU", "num"),
        ("oncpuself", "On-CPU self", "num"),
        ("offcpu", "Off-CPU", "num"),
        ("offcpuself", "Off-CPU self", "num"),
        ("blocked", "Blocked", "num"),
    ];
    let off_cols = if has_off { &off_cols[..] } else { &[] };
    let counter_heads: Vec<(&str, &str, &str)> = counter_cols
        .iter()
        .enumerate()
        .map(|(k, c)| (["c0", "c1", "c2", "c3", "c4", "c5"][k.min(5)], c.0, "num"))
        .collect();
    for &(key, label, ty) in cols.iter().chain(&counter_heads).chain(off_cols) {
        let sort = if key == "total" {
            " aria-sort=\"descending\""
        } else {
            ""
        };
        let _ = write!(
            p,
            "<th data-key=\"{key}\" data-type=\"{ty}\"{sort}>{label}</th>"
        );
    }
    p.push_str("</tr></thead>\n<tbody>\n");
    for f in report.functions.iter().take(rows) {
        let _ = write!(
            p,
            "<tr><td class=\"name\" data-v=\"{}\">{}{}</td><td data-v=\"{}\">{}</td>",
            escape(&f.name),
            escape(&f.name),
            if f.unwound > 0 {
                format!(" <span class=\"bad\">({} unwound)</span>", f.unwound)
            } else {
                String::new()
            },
            f.calls,
            f.calls
        );
        for ns in [
            f.total_ns, f.self_ns, f.avg_ns, f.min_ns, f.max_ns, f.p50_ns, f.p99_ns,
        ] {
            let _ = write!(p, "<td data-v=\"{ns}\">{}</td>", human_duration(ns));
        }
        for &(label, i, own) in &counter_cols {
            let v = if own { &f.self_counters } else { &f.counters };
            let v = v.get(i).copied().unwrap_or(0);
            let shown = if label == "Alloc bytes" {
                super::human::human_bytes(v)
            } else {
                v.to_string()
            };
            let _ = write!(p, "<td data-v=\"{v}\">{shown}</td>");
        }
        if has_off {
            for v in [
                f.on_cpu_ns(),
                f.self_on_cpu_ns(),
                f.off_cpu.map(|o| o.total.total_ns()),
                f.off_cpu.map(|o| o.self_.total_ns()),
                f.off_cpu.map(|o| o.total.blocked_ns),
            ] {
                match v {
                    Some(ns) => {
                        let _ = write!(p, "<td data-v=\"{ns}\">{}</td>", human_duration(ns));
                    }
                    None => p.push_str("<td data-v=\"-1\">-</td>"),
                }
            }
        }
        p.push_str("</tr>\n");
    }
    p.push_str("</tbody></table></div>\n");
    if !report.futures.is_empty() {
        p.push_str(
            "<h3>Async futures (first poll to completion)</h3>\n<div class=\"scroll\"><table class=\"sortable\" id=\"future-table\">\n<thead><tr>\
             <th data-key=\"fname\" data-type=\"text\">Future</th><th data-key=\"futures\" data-type=\"num\">Futures</th>\
             <th data-key=\"polls\" data-type=\"num\">Polls</th><th data-key=\"ftotal\" data-type=\"num\">Total</th>\
             <th data-key=\"favg\" data-type=\"num\">Avg</th><th data-key=\"fmax\" data-type=\"num\">Max</th>\
             <th data-key=\"fp99\" data-type=\"num\">p99</th><th data-key=\"cancelled\" data-type=\"num\">Cancelled</th>\
             <th data-key=\"busy99\" data-type=\"num\">Busy p99</th><th data-key=\"sched99\" data-type=\"num\">Scheduled p99</th>\
             <th data-key=\"wakes\" data-type=\"num\">Wakes</th><th data-key=\"longest\" data-type=\"num\">Longest poll</th></tr></thead>\n<tbody>\n",
        );
        for f in report.futures.iter().take(rows) {
            let _ = write!(
                p,
                "<tr><td class=\"name\">{}</td><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td>",
                escape(&f.name),
                f.futures,
                f.futures,
                f.polls,
                f.polls
            );
            for ns in [f.total_ns, f.avg_ns, f.max_ns, f.p99_ns] {
                let _ = write!(p, "<td data-v=\"{ns}\">{}</td>", human_duration(ns));
            }
            let _ = write!(p, "<td data-v=\"{0}\">{0}</td>", f.cancelled);
            // Busy and scheduled time per future, and the longest poll:
            // `-` where the futures did not measure them.
            let cells = [
                f.busy.as_ref().map(|s| s.p99_ns),
                f.scheduled.as_ref().map(|s| s.p99_ns),
            ];
            for v in cells {
                match v {
                    Some(ns) => {
                        let _ = write!(p, "<td data-v=\"{ns}\">{}</td>", human_duration(ns));
                    }
                    None => p.push_str("<td data-v=\"-1\">-</td>"),
                }
            }
            match f.wakes {
                Some(w) => {
                    let _ = write!(p, "<td data-v=\"{w}\">{w}</td>");
                }
                None => p.push_str("<td data-v=\"-1\">-</td>"),
            }
            match &f.longest_poll {
                Some(l) => {
                    let _ = write!(
                        p,
                        "<td data-v=\"{}\">{} on {}</td>",
                        l.dur_ns,
                        human_duration(l.dur_ns),
                        escape(&l.thread_label)
                    );
                }
                None => p.push_str("<td data-v=\"-1\">-</td>"),
            }
            p.push_str("</tr>\n");
        }
        p.push_str("</tbody></table></div>\n");
    }
    p.push_str("</section>\n");
}

/// inferno's SVG as an inline element: the XML prolog dropped (it is not
/// HTML) and its global `text` rule scoped to `#flame`.
fn inline_flame_svg(svg: &str) -> String {
    let start = svg.find("<svg").unwrap_or(0);
    svg[start..].replacen("\ntext {", "\n#flame text {", 1)
}

fn flamegraph(p: &mut String, folded: &Folded, kind: &str, opts: &HtmlOptions) {
    p.push_str("<section id=\"flamegraph\"><h2>Flame graph</h2>\n");
    let fopts = FlameOptions {
        title: format!("Flame graph ({kind})"),
        subtitle: Some(folded.subtitle()),
        count_name: folded.count_name().into(),
        ..FlameOptions::default()
    };
    let mut svg = Vec::new();
    match folded_svg(folded, &fopts, &mut svg) {
        Ok(()) => {
            let _ = writeln!(
                p,
                "<p class=\"note\">Traced frames in blue (exact time), sampled frames in warm colours. \
                 Click a frame to zoom, Ctrl-F to search.{}</p>",
                if opts.threads.is_empty() { "" } else { " Selected threads only." }
            );
            p.push_str("<div id=\"flame\">");
            p.push_str(&inline_flame_svg(&String::from_utf8_lossy(&svg)));
            p.push_str("</div>\n");
        }
        Err(FlameError::Empty) => p.push_str(
            "<p class=\"note\">Nothing to draw: no stacks with any time or samples.</p>\n",
        ),
        Err(e) => {
            let _ = writeln!(p, "<p class=\"bad\">{}</p>", escape(&e.to_string()));
        }
    }
    p.push_str("</section>\n");
}

/// Off-CPU time: the stacks that spent most time switched out, and the
/// longest stretches (a second flamegraph would clash with inferno's script,
/// which takes the page's first SVG; `fgtrace flame --offcpu` draws one).
fn off_cpu_section(
    p: &mut String,
    meta: &TraceMeta,
    stacks: Option<&(Vec<(String, u64)>, OffCpuSummary)>,
    stretches: &[Stretch],
) {
    let Some(o) = &meta.off_cpu else {
        return;
    };
    p.push_str("<section id=\"offcpu\"><h2>Off-CPU time</h2>\n");
    let Some((lines, summary)) = stacks.filter(|_| o.is_available()) else {
        let _ = writeln!(
            p,
            "<p class=\"bad\">off-CPU unavailable: {}</p></section>",
            escape(o.reason())
        );
        return;
    };
    let _ = writeln!(
        p,
        "<p class=\"note\">Time the traced calls spent switched out: <b>blocked</b> (voluntarily: sleep, lock, I/O) \
         or <b>preempted</b> (still runnable). {}. The whole graph: <code>fgtrace flame --offcpu</code>.</p>",
        escape(&summary.subtitle(false))
    );
    let mut top: Vec<&(String, u64)> = lines.iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    p.push_str("<table class=\"slowest\"><thead><tr><th>Stack (innermost last)</th><th>Off-CPU</th></tr></thead><tbody>\n");
    for (stack, ns) in top.iter().take(20) {
        let _ = writeln!(
            p,
            "<tr><td class=\"name\">{}</td><td>{}</td></tr>",
            escape(&stack.replace(';', " > ")),
            human_duration(*ns)
        );
    }
    p.push_str("</tbody></table>\n");
    if !stretches.is_empty() {
        p.push_str("<h3>Longest off-CPU stretches</h3>\n<table class=\"slowest\"><thead><tr><th>Kind</th><th>Duration</th><th>Start</th><th>Thread</th><th>In call</th></tr></thead><tbody>\n");
        for s in stretches {
            let _ = writeln!(
                p,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"name\">{}</td></tr>",
                s.iv.kind.name(),
                human_duration(s.iv.dur_ns),
                human_duration(s.iv.start_ns),
                escape(&meta.thread_label(s.thread)),
                s.call
                    .map_or("(outside traced calls)".to_string(), |(site, _)| escape(
                        meta.site_name(site)
                    ))
            );
        }
        p.push_str("</tbody></table>\n");
    }
    p.push_str("</section>\n");
}

fn duration_plots(
    p: &mut String,
    meta: &TraceMeta,
    names: &[String],
    durations: &[Option<CallDurations>],
) {
    p.push_str("<section id=\"durations\"><h2>Per-call durations of the top functions</h2>\n");
    if names.is_empty() {
        p.push_str("<p class=\"note\">No traced calls.</p>\n");
    }
    for (name, d) in names.iter().zip(durations) {
        let _ = writeln!(p, "<h3>{}</h3>", escape(name));
        let Some(d) = d else {
            p.push_str("<p class=\"note\">No calls were read.</p>\n");
            continue;
        };
        let popts = PlotOptions {
            width: 1100,
            height: 640,
            title: Some(format!("Durations of {}", d.name)),
            ..PlotOptions::default()
        };
        match durations_svg(d, meta, &popts) {
            Ok(svg) => {
                p.push_str("<div class=\"plot\">");
                p.push_str(&svg);
                p.push_str("</div>\n");
            }
            Err(e) => {
                let _ = writeln!(p, "<p class=\"bad\">{}</p>", escape(&e.to_string()));
            }
        }
        if !d.slowest.is_empty() {
            p.push_str(
                "<table class=\"slowest\"><thead><tr><th>Slowest calls: call path</th><th>Duration</th><th>Start</th><th>Thread</th></tr></thead><tbody>\n",
            );
            for s in &d.slowest {
                let _ = writeln!(
                    p,
                    "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    escape(&{
                        let v = s.values_text(meta);
                        if v.is_empty() {
                            s.path_names(meta)
                        } else {
                            format!("{}({v})", s.path_names(meta))
                        }
                    }),
                    human_duration(s.call.dur_ns),
                    human_duration(s.call.start_ns),
                    escape(&meta.thread_label(s.call.thread))
                );
            }
            p.push_str("</tbody></table>\n");
        }
    }
    p.push_str("</section>\n");
}

fn graph_section(p: &mut String, meta: &TraceMeta, root: Option<Root>, text: &str) {
    p.push_str("<section id=\"graph\"><h2>Function graph of the slowest root call</h2>\n");
    match root {
        None => p.push_str("<p class=\"note\">No root calls.</p>\n"),
        Some(r) => {
            let _ = writeln!(
                p,
                "<p class=\"note\"><code>{}</code> on {}, {} starting at {}.</p>\n<pre class=\"graph\">{}</pre>",
                escape(meta.site_name(r.site)),
                escape(&meta.thread_label(r.thread)),
                human_duration(r.dur_ns),
                human_duration(r.start_ns),
                escape(text)
            );
        }
    }
    p.push_str("</section>\n");
}

/// Which outside viewer opens which export of this trace, and what it shows.
const VIEWERS: &[(&str, &str, &str, &str)] = &[
    (
        "perfetto",
        "trace.pftrace",
        "ui.perfetto.dev, trace_processor",
        "a track per thread with every call as a slice (source locations), a track per future with its polls and flow arrows from the polling threads, per-call counter tracks, callstack samples, losses",
    ),
    (
        "chrome",
        "trace.json",
        "ui.perfetto.dev, chrome://tracing, speedscope",
        "every call on its thread, each future on an async lane with its polls, samples as instants with their stacks, losses",
    ),
    (
        "firefox",
        "profile.json.gz",
        "profiler.firefox.com (load from file)",
        "per thread: call tree, flame graph and stack chart of the symbolized samples; marker chart and table with every traced call; a row per future in the async futures thread",
    ),
    (
        "pprof",
        "profile.pb.gz",
        "go tool pprof",
        "the samples, aggregated",
    ),
];

fn viewers_section(p: &mut String, source: Option<&str>) {
    let file = escape(source.unwrap_or("FILE"));
    p.push_str("<section id=\"viewers\"><h2>Open this trace in other viewers</h2>\n");
    p.push_str("<table class=\"viewers\"><thead><tr><th>command</th><th>opens in</th><th>what it shows</th></tr></thead><tbody>\n");
    for (cmd, out, viewer, what) in VIEWERS {
        let _ = writeln!(
            p,
            "<tr><td><code>fgtrace {cmd} {file} -o {out}</code></td><td>{}</td><td>{}</td></tr>",
            escape(viewer),
            escape(what)
        );
    }
    p.push_str("</tbody></table>\n</section>\n");
}

fn tail(p: &mut String) {
    let _ = write!(
        p,
        "</main>\n<footer>Generated by fgtrace {}. Self-contained: nothing on this page is fetched.</footer>\n<script>{}</script>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION"),
        SORT_JS
    );
}

#[cfg(test)]
mod tests;
