//! Per-function sample counts, the sampled columns beside `fgtrace report`:
//! *self*, samples whose innermost resolved frame is the function (it was
//! running), and *total*, samples with the function anywhere in the stack
//! (counted once per sample however deep the recursion), as perf report's
//! `Self` and `Children`.
//!
//! Functions are keyed by resolved name (inlined frames expanded, so an
//! inlined function gets its own row), through a [`Resolve`]r: the
//! `symbolize` feature's `Symbolizer`, or any other. Memory is one entry per
//! function, whatever the number of samples.

use crate::consume::{feed, Consume};
use crate::resolve::Resolve;
use crate::threads::{shown, thread_mask, ThreadSel};
use fgtrace_trace::{Event, Sample, TraceError, TraceMeta};
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io::{self, Write};

/// Row order of the sampled table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SampledSort {
    /// Most samples as the running function first (where CPU time went).
    #[default]
    SelfSamples,
    /// Most samples anywhere in the stack first (callers rank high).
    Total,
    /// By function name.
    Name,
}

/// What to count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampledOptions {
    /// Only these threads; empty means all.
    pub threads: Vec<ThreadSel>,
    /// What the rows are sorted by.
    pub sort: SampledSort,
    /// Keep only the first N rows (0 = all).
    pub limit: usize,
}

/// One function's sample counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampledRow {
    /// The function's name, as the resolver gave it.
    pub name: String,
    /// Samples where the function was the innermost frame.
    pub self_samples: u64,
    /// Samples with the function anywhere in the stack.
    pub total_samples: u64,
}

/// The sampled table: counts per function plus what the header says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SampledReport {
    /// How the samples were taken (`TraceMeta::sampling`).
    pub sampling: Option<String>,
    /// Samples counted (in the selected threads).
    pub samples: u64,
    /// Samples lost while recording (in the selected threads).
    pub lost: u64,
    /// One row per function seen in a sample, sorted and limited as asked.
    pub rows: Vec<SampledRow>,
}

/// Counts samples as they stream by.
pub struct SampledBuilder<'m, R> {
    meta: &'m TraceMeta,
    opts: SampledOptions,
    mask: Vec<bool>,
    resolve: R,
    counts: HashMap<String, (u64, u64)>,
    samples: u64,
    names: Vec<String>,
    seen: HashSet<String>,
}

impl<'m, R: Resolve> SampledBuilder<'m, R> {
    /// A builder for `meta`'s trace, naming frames with `resolve`.
    pub fn new(meta: &'m TraceMeta, opts: &SampledOptions, resolve: R) -> Self {
        SampledBuilder {
            meta,
            opts: opts.clone(),
            mask: thread_mask(meta, &opts.threads),
            resolve,
            counts: HashMap::new(),
            samples: 0,
            names: Vec::new(),
            seen: HashSet::new(),
        }
    }

    /// Counts one sample: its innermost name as self, every distinct name on its
    /// stack once as total (`[unknown]` when no frame has a name). Samples of
    /// threads not selected are left out.
    pub fn sample(&mut self, s: &Sample) {
        if !shown(&self.mask, !self.opts.threads.is_empty(), s.thread) {
            return;
        }
        self.samples += 1;
        self.names.clear();
        for (i, &a) in s.frames.iter().enumerate() {
            self.names.extend(self.resolve.frames(a, i > 0));
        }
        if self.names.is_empty() {
            self.names.push("[unknown]".into());
        }
        self.seen.clear();
        for (i, n) in self.names.iter().enumerate() {
            if !self.seen.insert(n.clone()) {
                continue;
            }
            let c = self.counts.entry(n.clone()).or_default();
            if i == 0 {
                c.0 += 1;
            }
            c.1 += 1;
        }
    }

    /// The rows, sorted and limited as the options say.
    pub fn finish(self) -> SampledReport {
        let mut rows: Vec<SampledRow> = self
            .counts
            .into_iter()
            .map(|(name, (s, t))| SampledRow {
                name,
                self_samples: s,
                total_samples: t,
            })
            .collect();
        let by_name = |a: &SampledRow, b: &SampledRow| a.name.cmp(&b.name);
        match self.opts.sort {
            SampledSort::SelfSamples => rows.sort_by(|a, b| {
                (b.self_samples, b.total_samples)
                    .cmp(&(a.self_samples, a.total_samples))
                    .then(by_name(a, b))
            }),
            SampledSort::Total => rows.sort_by(|a, b| {
                (b.total_samples, b.self_samples)
                    .cmp(&(a.total_samples, a.self_samples))
                    .then(by_name(a, b))
            }),
            SampledSort::Name => rows.sort_by(by_name),
        }
        if self.opts.limit > 0 {
            rows.truncate(self.opts.limit);
        }
        let filtered = !self.opts.threads.is_empty();
        let lost = (self.meta.threads.iter().enumerate())
            .filter(|(i, _)| shown(&self.mask, filtered, *i as u32))
            .map(|(_, t)| t.samples_lost)
            .fold(0, u64::saturating_add);
        SampledReport {
            sampling: self.meta.sampling.clone(),
            samples: self.samples,
            lost,
            rows,
        }
    }
}

impl<R: Resolve> Consume for SampledBuilder<'_, R> {
    type Error = Infallible;

    /// Counts the event if it is a sample of a selected thread.
    fn push(&mut self, ev: &Event) -> Result<(), Infallible> {
        if let Event::Sample(s) = ev {
            self.sample(s);
        }
        Ok(())
    }
}

impl SampledReport {
    /// The table: a `# sampled (...)` header line, then `Self% Self Total% Total Function`.
    pub fn write(&self, mut w: impl Write) -> io::Result<()> {
        let mut out = String::new();
        let how = self.sampling.as_deref().unwrap_or("samples");
        let _ = writeln!(
            out,
            "# sampled ({how}): {} samples, {} lost",
            self.samples, self.lost
        );
        let pct = |n: u64| format!("{:.2}%", n as f64 * 100.0 / self.samples.max(1) as f64);
        let rows: Vec<[String; 4]> = (self.rows.iter())
            .map(|r| {
                [
                    pct(r.self_samples),
                    r.self_samples.to_string(),
                    pct(r.total_samples),
                    r.total_samples.to_string(),
                ]
            })
            .collect();
        let headers = ["Self%", "Self", "Total%", "Total"];
        let mut widths = headers.map(str::len);
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.len());
            }
        }
        let name_width = self
            .rows
            .iter()
            .map(|r| r.name.chars().count())
            .max()
            .unwrap_or(0)
            .max(8);
        for (h, w) in headers.iter().zip(&widths) {
            let _ = write!(out, "  {h:>w$}");
        }
        let _ = writeln!(out, "  Function");
        for w in &widths {
            let _ = write!(out, "  {}", "=".repeat(*w));
        }
        let _ = writeln!(out, "  {}", "=".repeat(name_width));
        for (cells, r) in rows.iter().zip(&self.rows) {
            for (c, w) in cells.iter().zip(&widths) {
                let _ = write!(out, "  {c:>w$}");
            }
            let _ = writeln!(out, "  {}", r.name);
        }
        w.write_all(out.as_bytes())?;
        w.flush()
    }
}

/// Counts the samples of `events` and writes the table. On a read error
/// mid-stream, writes what was counted, then returns the error.
pub fn write_sampled<W: Write, R: Resolve>(
    meta: &TraceMeta,
    events: impl IntoIterator<Item = Result<Event, TraceError>>,
    opts: &SampledOptions,
    resolve: R,
    w: W,
) -> Result<SampledReport, TraceError> {
    let mut b = SampledBuilder::new(meta, opts, resolve);
    let Ok(failed) = feed(&mut b, events);
    let report = b.finish();
    report.write(w)?;
    failed.map_or(Ok(report), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::FnResolve;
    use fgtrace_trace::ThreadInfo;

    fn meta() -> TraceMeta {
        let mut m = TraceMeta {
            sampling: Some("timer@1000Hz".into()),
            ..Default::default()
        };
        for (tid, name, lost) in [(1, "main", 2), (2, "worker", 3)] {
            m.threads.push(ThreadInfo {
                tid,
                name: name.into(),
                samples_lost: lost,
                ..Default::default()
            });
        }
        m
    }

    fn sample(thread: u32, frames: &[u64]) -> Event {
        Event::Sample(Sample {
            thread,
            ts_ns: 0,
            shadow_depth: 0,
            cut: None,
            frames: frames.to_vec(),
        })
    }

    /// 0x10 = leaf, 0x20 = mid, 0x30 = main; 0x40 has `inl` inlined into `host`.
    /// Return addresses are looked up one byte lower, as the trait promises.
    fn names(addr: u64, ret: bool) -> Vec<String> {
        let a = if ret { addr - 1 } else { addr };
        match a & !0xf {
            0x10 => vec!["leaf".into()],
            0x20 => vec!["mid".into()],
            0x30 => vec!["main".into()],
            0x40 => vec!["inl".into(), "host".into()],
            _ => vec![],
        }
    }

    fn run(events: &[Event], opts: &SampledOptions) -> SampledReport {
        let m = meta();
        let mut b = SampledBuilder::new(&m, opts, FnResolve(names));
        for e in events {
            let Ok(()) = b.push(e);
        }
        b.finish()
    }

    fn row(r: &SampledReport, name: &str) -> (u64, u64) {
        let row = r
            .rows
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no row {name}: {r:?}"));
        (row.self_samples, row.total_samples)
    }

    #[test]
    fn self_is_the_innermost_frame_total_counts_once_per_sample() {
        let evs = [
            sample(0, &[0x10, 0x21, 0x31]),
            sample(0, &[0x10, 0x21, 0x21, 0x31]), // recursion in mid: still one total
            sample(0, &[0x20, 0x31]),
            sample(1, &[0x40, 0x31]),
            sample(1, &[0x99]), // unresolvable
            sample(1, &[]),
        ];
        let r = run(&evs, &SampledOptions::default());
        assert_eq!(r.samples, 6);
        assert_eq!(r.lost, 5);
        assert_eq!(row(&r, "leaf"), (2, 2));
        assert_eq!(row(&r, "mid"), (1, 3));
        assert_eq!(row(&r, "main"), (0, 4));
        assert_eq!(
            row(&r, "inl"),
            (1, 1),
            "the inlined function is the innermost frame"
        );
        assert_eq!(row(&r, "host"), (0, 1));
        assert_eq!(row(&r, "[unknown]"), (2, 2));
        assert_eq!(
            r.rows[0].name, "[unknown]",
            "self order, ties by total then name"
        );
        assert_eq!(r.rows[1].name, "leaf");

        let by_total = run(
            &evs,
            &SampledOptions {
                sort: SampledSort::Total,
                ..Default::default()
            },
        );
        assert_eq!(by_total.rows[0].name, "main");
        let only_worker = run(
            &evs,
            &SampledOptions {
                threads: vec!["worker".parse().unwrap()],
                limit: 2,
                ..Default::default()
            },
        );
        assert_eq!(
            (
                only_worker.samples,
                only_worker.lost,
                only_worker.rows.len()
            ),
            (3, 3, 2)
        );
    }

    #[test]
    fn table_layout() {
        let mut out = Vec::new();
        let r = run(
            &[
                sample(0, &[0x10, 0x31]),
                sample(0, &[0x10, 0x31]),
                sample(0, &[0x30]),
            ],
            &SampledOptions::default(),
        );
        r.write(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want = "\
# sampled (timer@1000Hz): 3 samples, 5 lost
   Self%  Self   Total%  Total  Function
  ======  ====  =======  =====  ========
  66.67%     2   66.67%      2  leaf
  33.33%     1  100.00%      3  main
";
        assert_eq!(text, want);
    }

    #[test]
    fn a_read_error_keeps_what_was_counted() {
        let m = meta();
        let evs = vec![
            Ok(sample(0, &[0x10])),
            Err(TraceError::NotATrace),
            Ok(sample(0, &[0x10])),
        ];
        let mut out = Vec::new();
        let r = write_sampled(
            &m,
            evs,
            &SampledOptions::default(),
            FnResolve(names),
            &mut out,
        );
        assert!(matches!(r, Err(TraceError::NotATrace)));
        assert!(String::from_utf8(out).unwrap().contains("1 samples"));
    }
}
