//! `cargo fgtrace plan`: the functions a build should leave without a probe,
//! from traces; and `--plan`, which gives the build such a file.
//!
//! A plan is a text file, one function path a line
//! (`regex_automata::util::search::Input::start`), `#` to the end of a line
//! a comment. Built with it (`FGTRACE_PLAN`, read by `#[traced]` at compile
//! time), each function it names gets an exact count instead of the timing
//! probe: see the guide's page on plans.

use crate::inputs;
use crate::prepare::Prepared;
use fgtrace_view::report::{FunctionStats, ReportBuilder, ReportOptions};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One planned function, and why.
#[derive(Debug, PartialEq)]
pub struct Entry {
    /// `module::path::Name`.
    pub path: String,
    /// What the traces said of it (the line's comment).
    pub why: String,
}

/// The plan the traces give: functions switched to count-only (auto-exclude),
/// functions already counted by a plan, and with `below_ns` those whose
/// recorded calls averaged under it. `async` functions and those recording
/// values keep their probe (a count would lose their futures and values).
pub fn entries(
    meta: &fgtrace_trace::TraceMeta,
    functions: &[FunctionStats],
    below_ns: Option<u64>,
) -> Vec<Entry> {
    let mut out: Vec<Entry> = functions
        .iter()
        .filter_map(|f| {
            let site = meta.sites.get(f.site as usize)?;
            if site.is_async || !site.values.is_empty() {
                return None;
            }
            let recorded = f.calls - f.count_only - f.counted;
            let why = if f.counted > 0 {
                format!("{} calls, counted by the plan it was built with", f.counted)
            } else if f.count_only > 0 {
                format!(
                    "{} calls, switched to count-only (auto-exclude) after {recorded} recorded",
                    f.calls
                )
            } else if below_ns.is_some_and(|b| recorded > 0 && f.avg_ns < b) {
                format!("{recorded} calls, {} ns on average", f.avg_ns)
            } else {
                return None;
            };
            let path = if site.module_path.is_empty() {
                site.name.clone()
            } else {
                format!("{}::{}", site.module_path, site.name)
            };
            Some(Entry { path, why })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path);
    out
}

/// The file's text; `uncounted`: the functions get neither probe nor count.
pub fn text(
    entries: &[Entry],
    sources: &[PathBuf],
    below_ns: Option<u64>,
    uncounted: bool,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# fgtrace plan: {} function{} built {}",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        if uncounted {
            "without probe or count (`uncounted`: as if not traced)"
        } else {
            "with a count instead of the probe"
        }
    );
    let names: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
    let _ = writeln!(s, "# from {}", names.join(" "));
    match below_ns {
        Some(b) => {
            let _ = writeln!(
                s,
                "# auto-excluded, already counted, or averaging under {b} ns"
            );
        }
        None => {
            let _ = writeln!(s, "# auto-excluded or already counted");
        }
    }
    let mark = if uncounted { "uncounted " } else { "" };
    for e in entries {
        let _ = writeln!(s, "{mark}{}  # {}", e.path, e.why);
    }
    s
}

/// `cargo fgtrace plan`: reads `traces` (merged), writes the plan to `output`
/// and says what it holds.
pub fn write_plan(
    traces: &[PathBuf],
    below_ns: Option<u64>,
    uncounted: bool,
    output: &Path,
) -> Result<(), String> {
    let input = inputs::open_inputs(traces)?;
    let meta = input.meta.clone();
    let opts = ReportOptions::default();
    let (report, read) = match input.source {
        inputs::InputEvents::One(r) => ReportBuilder::from_reader(&meta, &opts, *r),
        inputs::InputEvents::Merged(e) => ReportBuilder::on_cores(&meta, &opts, e),
    };
    read.map_err(|e| format!("{}: {e}", input.label.display()))?;
    let entries = entries(&meta, &report.functions, below_ns);
    std::fs::write(output, text(&entries, traces, below_ns, uncounted))
        .map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    eprintln!(
        "cargo fgtrace: {} function{} planned to be {}: {} (build with `--plan {}`)",
        entries.len(),
        if entries.len() == 1 { "" } else { "s" },
        if uncounted {
            "left untraced"
        } else {
            "counted, not timed"
        },
        output.display(),
        output.display()
    );
    Ok(())
}

/// Gives the build `plan` (or no plan): a copy under `<target>/fgtrace/`,
/// named in `FGTRACE_PLAN`. The copy is rewritten only when its bytes
/// change, so cargo rebuilds the instrumented crates only then (their
/// dep-info names the file and the variable).
pub fn give(prep: &mut Prepared, plan: Option<&Path>) -> Result<(), String> {
    let value = match plan {
        None => String::new(),
        Some(p) => {
            let text = std::fs::read(p)
                .map_err(|e| format!("--plan {}: cannot read it: {e}", p.display()))?;
            if std::str::from_utf8(&text).is_err() {
                return Err(format!("--plan {}: not a text file", p.display()));
            }
            let copy = prep.dir.join("plan.txt");
            if std::fs::read(&copy).ok().as_deref() != Some(&text[..]) {
                std::fs::create_dir_all(&prep.dir)
                    .and_then(|_| std::fs::write(&copy, &text))
                    .map_err(|e| format!("cannot write {}: {e}", copy.display()))?;
            }
            copy.display().to_string()
        }
    };
    // Always set, empty without a plan: a `FGTRACE_PLAN` left in the shell
    // does not reach the build unasked.
    prep.env.push(("FGTRACE_PLAN".into(), value));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fgtrace_trace::{SiteInfo, TraceMeta};
    use fgtrace_view::report::FunctionStats;

    fn site(name: &str, module: &str, is_async: bool) -> SiteInfo {
        SiteInfo {
            name: name.into(),
            module_path: module.into(),
            file: "src/lib.rs".into(),
            line: 1,
            is_async,
            values: Vec::new(),
        }
    }

    #[test]
    fn the_plan_names_switched_counted_and_tiny_sync_functions() {
        let meta = TraceMeta {
            sites: vec![
                site("Input::start", "regex_automata::util::search", false),
                site("search", "regex", false),
                site("poll_it", "app", true),
                site("tiny", "app", false),
                site("kept", "app::inner", false),
                site("short", "app", false),
            ],
            ..TraceMeta::default()
        };
        let row =
            |site: u32, calls: u64, count_only: u64, counted: u64, avg_ns: u64| FunctionStats {
                site,
                calls,
                count_only,
                counted,
                avg_ns,
                ..FunctionStats::default()
            };
        let rows = [
            row(0, 5000, 3976, 0, 3), // switched by auto-exclude
            row(1, 10, 0, 0, 900),    // slow: kept
            row(2, 4000, 0, 0, 2),    // async: kept whatever its time
            row(3, 7000, 0, 7000, 0), // counted by the plan already
            row(4, 100, 0, 0, 49),    // under 50 ns
            row(5, 100, 0, 0, 50),    // not under
        ];
        let paths = |below| -> Vec<String> {
            entries(&meta, &rows, below)
                .into_iter()
                .map(|e| e.path)
                .collect()
        };
        assert_eq!(
            paths(Some(50)),
            [
                "app::inner::kept",
                "app::tiny",
                "regex_automata::util::search::Input::start"
            ]
        );
        assert_eq!(
            paths(None),
            ["app::tiny", "regex_automata::util::search::Input::start"]
        );
        let e = entries(&meta, &rows, None);
        let text = text(&e, &[PathBuf::from("a.fgt")], None, false);
        assert!(text.starts_with("# fgtrace plan: 2 functions"), "{text}");
        let dropped = super::text(&e, &[PathBuf::from("a.fgt")], None, true);
        assert!(dropped.contains("\nuncounted app::tiny  # "), "{dropped}");
        assert!(
            text.contains("regex_automata::util::search::Input::start  # 5000 calls, switched to count-only (auto-exclude) after 1024 recorded"),
            "{text}"
        );
    }
}
