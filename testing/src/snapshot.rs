//! Snapshots of a capture's deterministic figures: `cap.assert_snapshot("name")`
//! keeps, per function, its calls and allocation counts (and, where counted,
//! its instructions) in `tests/snapshots/name.fgsnap` under the tested
//! crate's `CARGO_MANIFEST_DIR`, a text file meant to be committed and read
//! in review. A changed figure fails the test with a readable diff.
//!
//! As insta does: `FGTRACE_UPDATE=1` rewrites the files; a missing file is
//! written on first run (and the test passes, saying so on stderr), except
//! where the `CI` variable is set (and not `FGTRACE_UPDATE=1`), where a
//! missing snapshot fails: a snapshot nobody reviewed must not pass in CI.

use super::captured::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

const HEADER: &str = "# fgtrace snapshot: deterministic figures of a capture, per function.\n\
# calls | allocs (callees included) | self allocs | bytes allocated (callees included) | instructions (callees included)\n\
# '-' = not measured. Rewrite with FGTRACE_UPDATE=1.\n";

/// The figures of one function.
#[derive(Clone, Debug, PartialEq)]
struct Row {
    calls: u64,
    allocs: Option<u64>,
    self_allocs: Option<u64>,
    alloc_bytes: Option<u64>,
    instructions: Option<u64>,
}

const FIELDS: [&str; 5] = [
    "calls",
    "allocs",
    "self_allocs",
    "alloc_bytes",
    "instructions",
];

impl Row {
    fn values(&self) -> [Option<u64>; 5] {
        [
            Some(self.calls),
            self.allocs,
            self.self_allocs,
            self.alloc_bytes,
            self.instructions,
        ]
    }
}

fn cell(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |v| v.to_string())
}

fn render(rows: &BTreeMap<String, Row>, notes: &[String]) -> String {
    let mut out = String::from(HEADER);
    for n in notes {
        out.push_str(&format!("# note: {n}\n"));
    }
    for (name, r) in rows {
        let v = r.values();
        out.push_str(&format!(
            "{:>8} {:>8} {:>8} {:>10} {:>12}  {name}\n",
            cell(v[0]),
            cell(v[1]),
            cell(v[2]),
            cell(v[3]),
            cell(v[4])
        ));
    }
    out
}

fn parse(text: &str, path: &Path) -> Result<BTreeMap<String, Row>, String> {
    let mut rows = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut vals = [None; 5];
        let mut fields = line.split_whitespace();
        for v in vals.iter_mut() {
            let f = fields.next().ok_or_else(|| {
                format!(
                    "{}:{}: expected 5 figures and a name",
                    path.display(),
                    n + 1
                )
            })?;
            *v =
                if f == "-" {
                    None
                } else {
                    Some(f.parse::<u64>().map_err(|_| {
                        format!("{}:{}: `{f}` is not a count", path.display(), n + 1)
                    })?)
                };
        }
        let name = fields.collect::<Vec<_>>().join(" ");
        if name.is_empty() {
            return Err(format!("{}:{}: no function name", path.display(), n + 1));
        }
        rows.insert(
            name,
            Row {
                calls: vals[0].unwrap_or(0),
                allocs: vals[1],
                self_allocs: vals[2],
                alloc_bytes: vals[3],
                instructions: vals[4],
            },
        );
    }
    Ok(rows)
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

impl Capture {
    /// The per-function figures a snapshot keeps, keyed by full path.
    fn snapshot_rows(&self) -> BTreeMap<String, Row> {
        let meta = self.trace.meta();
        let counted_allocs = self.counts_allocations();
        let counted_instr = self.status.is_counting();
        let mut rows = BTreeMap::new();
        for (site, info) in meta.sites.iter().enumerate() {
            let site = site as u32;
            let of_site = |i: usize| self.spans[i].call.site == site;
            let spans: Vec<usize> = (0..self.spans.len()).filter(|&i| of_site(i)).collect();
            let outer: Vec<usize> = spans
                .iter()
                .copied()
                .filter(|&i| !self.ancestors(i).any(of_site))
                .collect();
            let calls = if info.is_async {
                self.futures.iter().filter(|f| f.site == site).count()
            } else {
                spans.len()
            } as u64;
            let sum = |ix: &[usize], g: &dyn Fn(&Span) -> Option<u64>| -> Option<u64> {
                ix.iter().map(|&i| g(&self.spans[i])).sum::<Option<u64>>()
            };
            let row = Row {
                calls,
                allocs: counted_allocs
                    .then(|| sum(&outer, &|s| s.allocs.map(|a| a.allocs)))
                    .flatten(),
                self_allocs: counted_allocs
                    .then(|| sum(&spans, &|s| s.self_allocs.map(|a| a.allocs)))
                    .flatten(),
                alloc_bytes: counted_allocs
                    .then(|| sum(&outer, &|s| s.allocs.map(|a| a.alloc_bytes)))
                    .flatten(),
                instructions: counted_instr.then(|| sum(&outer, &|s| s.instr)).flatten(),
            };
            let key = info.full_name();
            // Two sites with one full name (generic instances): add them up.
            rows.entry(key)
                .and_modify(|r: &mut Row| {
                    r.calls += row.calls;
                    let add = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a + b);
                    r.allocs = add(r.allocs, row.allocs);
                    r.self_allocs = add(r.self_allocs, row.self_allocs);
                    r.alloc_bytes = add(r.alloc_bytes, row.alloc_bytes);
                    r.instructions = add(r.instructions, row.instructions);
                })
                .or_insert(row);
        }
        rows
    }

    fn snapshot_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.counts_allocations() {
            notes.push(
                "allocations not counted: install fgtrace::alloc::Counting as the global allocator"
                    .to_string(),
            );
        }
        if !self.status.is_counting() {
            let why = match &self.status {
                super::CounterStatus::Unavailable(why) => why.clone(),
                _ => "the capture was made without counters".to_string(),
            };
            notes.push(format!(
                "instructions not counted ({why}); they are compared only where both sides have them"
            ));
        }
        notes
    }

    /// Compares the capture's per-function figures (calls, allocations,
    /// instructions where counted) with `tests/snapshots/<name>.fgsnap` under
    /// the tested crate's `CARGO_MANIFEST_DIR`; fails with a readable diff
    /// when they changed. Instructions may differ by 1% (see
    /// [`Capture::assert_snapshot_with_tolerance`]). `FGTRACE_UPDATE=1`
    /// rewrites the file; a missing file is written and the test passes,
    /// unless `CI` is set (then it fails).
    #[track_caller]
    pub fn assert_snapshot(&self, name: &str) {
        self.assert_snapshot_with_tolerance(name, 1.0)
    }

    /// [`Capture::assert_snapshot`] with instructions allowed to differ by
    /// `percent` (calls and allocations must match exactly).
    #[track_caller]
    pub fn assert_snapshot_with_tolerance(&self, name: &str, percent: f64) {
        let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") else {
            fail(format!(
                "snapshot `{name}`: CARGO_MANIFEST_DIR is not set, so the tested crate's \
                 directory is unknown (run the test through cargo)"
            ));
        };
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            fail(format!(
                "snapshot name `{name}` must be a plain file name (no '/', not starting with '.')"
            ));
        }
        let path = PathBuf::from(dir)
            .join("tests")
            .join("snapshots")
            .join(format!("{name}.fgsnap"));
        let rows = self.snapshot_rows();
        let text = render(&rows, &self.snapshot_notes());
        let update = env_set("FGTRACE_UPDATE");
        let old = match std::fs::read_to_string(&path) {
            Ok(s) => Some(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => fail(format!(
                "snapshot `{name}`: cannot read {}: {e}",
                path.display()
            )),
        };
        let write = |why: &str| {
            if let Err(e) = std::fs::create_dir_all(path.parent().expect("has a parent"))
                .and_then(|_| std::fs::write(&path, &text))
            {
                fail(format!(
                    "snapshot `{name}`: cannot write {}: {e}",
                    path.display()
                ));
            }
            let _ = writeln!(
                std::io::stderr(),
                "fgtrace: {why} snapshot {}",
                path.display()
            );
        };
        let Some(old) = old else {
            if env_set("CI") && !update {
                fail(format!(
                    "snapshot `{name}` does not exist ({}), and new snapshots are not written \
                     when CI is set: run the test locally (or with FGTRACE_UPDATE=1), review \
                     the file and commit it. It would hold:\n{text}",
                    path.display()
                ));
            }
            return write("wrote new");
        };
        if update {
            if old != text {
                write("updated");
            }
            return;
        }
        let before = match parse(&old, &path) {
            Ok(r) => r,
            Err(e) => fail(format!(
                "snapshot `{name}` cannot be read: {e} (FGTRACE_UPDATE=1 rewrites it)"
            )),
        };
        let diff = diff_rows(&before, &rows, percent);
        if !diff.is_empty() {
            fail(format!(
                "snapshot `{name}` ({}) changed:\n{diff}\nIf the change is intended, rerun with \
                 FGTRACE_UPDATE=1 and commit the file.\n\nThe calls now:\n{}",
                path.display(),
                self.graph()
            ));
        }
    }
}

/// The changed figures as a table; empty when nothing changed.
fn diff_rows(old: &BTreeMap<String, Row>, new: &BTreeMap<String, Row>, percent: f64) -> String {
    let mut lines: Vec<[String; 5]> = Vec::new();
    let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for name in names {
        match (old.get(name), new.get(name)) {
            (Some(_), None) => lines.push([
                name.clone(),
                "calls".into(),
                cell(old.get(name).map(|r| r.calls)),
                "-".into(),
                "no longer called".into(),
            ]),
            (None, Some(r)) => lines.push([
                name.clone(),
                "calls".into(),
                "-".into(),
                r.calls.to_string(),
                "newly called".into(),
            ]),
            (Some(a), Some(b)) => {
                for (k, (x, y)) in a.values().into_iter().zip(b.values()).enumerate() {
                    let (Some(x), Some(y)) = (x, y) else {
                        continue; // not measured on one side: not compared
                    };
                    let changed = if FIELDS[k] == "instructions" {
                        (y as f64 - x as f64).abs() > x as f64 * percent / 100.0
                    } else {
                        x != y
                    };
                    if changed {
                        let d = y as i128 - x as i128;
                        let pct = if x == 0 {
                            String::new()
                        } else {
                            format!(", {:+.1}%", d as f64 * 100.0 / x as f64)
                        };
                        lines.push([
                            name.clone(),
                            FIELDS[k].into(),
                            x.to_string(),
                            y.to_string(),
                            format!("{d:+}{pct}"),
                        ]);
                    }
                }
            }
            (None, None) => {}
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    let head = [
        "function".to_string(),
        "figure".into(),
        "snapshot".into(),
        "now".into(),
        "change".into(),
    ];
    let mut w = [0usize; 5];
    for l in std::iter::once(&head).chain(&lines) {
        for (i, c) in l.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let mut out = String::new();
    for l in std::iter::once(&head).chain(&lines) {
        out.push_str(&format!(
            "  {:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {}\n",
            l[0],
            l[1],
            l[2],
            l[3],
            l[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(calls: u64, allocs: Option<u64>, instr: Option<u64>) -> Row {
        Row {
            calls,
            allocs,
            self_allocs: allocs,
            alloc_bytes: allocs.map(|a| a * 16),
            instructions: instr,
        }
    }

    #[test]
    fn snapshot_text_parses_back() {
        let mut rows = BTreeMap::new();
        rows.insert("my_crate::parse".to_string(), row(3, Some(6), None));
        rows.insert(
            "<impl Foo for Bar>::run".to_string(),
            row(1, None, Some(1000)),
        );
        let text = render(&rows, &["a note".to_string()]);
        assert_eq!(parse(&text, Path::new("x")).unwrap(), rows);
        assert!(parse("1 2 x\n", Path::new("x")).is_err());
        assert!(parse("1 2 3 4 5\n", Path::new("x")).is_err());
    }

    #[test]
    fn diffs_name_each_changed_figure_and_tolerate_instructions() {
        let mut a = BTreeMap::new();
        a.insert("parse".to_string(), row(3, Some(6), Some(1000)));
        a.insert("gone".to_string(), row(1, Some(0), None));
        let mut b = BTreeMap::new();
        b.insert("parse".to_string(), row(3, Some(7), Some(1005)));
        b.insert("new".to_string(), row(2, Some(0), None));
        let d = diff_rows(&a, &b, 1.0);
        assert!(
            d.contains("parse") && d.contains("allocs") && d.contains("+1"),
            "{d}"
        );
        assert!(!d.contains("instructions"), "within 1%: {d}");
        assert!(
            d.contains("no longer called") && d.contains("newly called"),
            "{d}"
        );
        assert!(diff_rows(&a, &b, 0.1).contains("instructions"));
        assert_eq!(diff_rows(&a, &a, 0.0), "");
    }
}
