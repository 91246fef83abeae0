//! Why samples go under `[unknown below <fn>]` in a combined flamegraph.
//!
//! `cargo run --release --example unmatched -- TRACE.fgt [--names-only | --compare]`
//!
//! Prints every sample the combined join leaves unmatched: the traced calls
//! open at its time (outermost first) and its stack, one line per sampled
//! frame with the mapped file and offset, whether the function had its frame
//! record there (from `.eh_frame`: `rec=Some(false)` means a frame-pointer
//! walk skipped its caller) and the resolved names (innermost first), then
//! the view's summary.
//!
//! * `--names-only`: the join by names alone ([`chain_match`]), as before the
//!   frames the walk skipped were taken into account.
//! * `--compare`: on the signal path's samples, compares [`ChainCut`] (names
//!   and the binary) with the cut the handler recorded ([`RecordedCut`]),
//!   printing each disagreement.
//!
//! The binaries the trace names must be the ones that ran (the symbolizer
//! checks their build ids).

use fgtrace::symbolize::Symbolizer;
use fgtrace::trace::SiteInfo;
use fgtrace::view::folded::{FoldedBuilder, FoldedOptions};
use fgtrace::view::join::{chain_match, ChainCut, ChainMatch, Cut, RecordedCut, SampleStack};
use fgtrace::view::ok_events;
use fgtrace::Trace;
use std::cell::Cell;
use std::rc::Rc;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Join,
    NamesOnly,
    Compare,
}

struct Explain {
    sym: Symbolizer,
    mode: Mode,
    /// Samples compared (`--compare`), and those that disagree.
    counts: Rc<Cell<(u64, u64)>>,
    flagged: u64,
}

impl Explain {
    fn print_stack(&mut self, stack: &SampleStack<'_>) {
        let s = stack.sample;
        let open: Vec<&str> = stack.open.iter().map(|o| o.name.as_str()).collect();
        println!("  open: {}", open.join(" > "));
        for (i, &a) in s.frames.iter().enumerate() {
            let probe = a.saturating_sub((i > 0) as u64);
            let at = self.sym.mapping(probe).map(|(_, m)| {
                let file = m.path.rsplit('/').next().unwrap_or("").to_string();
                format!("{file}+{:#x}", a - m.start + m.offset)
            });
            let rec = self.sym.frame_record(a, i > 0);
            let names: Vec<String> = self
                .sym
                .frames(a, i > 0)
                .iter()
                .map(|f| format!("{}{}", f.name, if f.inlined { " (inl)" } else { "" }))
                .collect();
            println!(
                "  #{i} {a:#x} {} rec={rec:?} {}",
                at.unwrap_or_default(),
                names.join(" | ")
            );
        }
    }
}

impl Cut for Explain {
    fn cut(&mut self, site: &SiteInfo, stack: &SampleStack<'_>) -> Option<usize> {
        let recorded = stack.sample.cut.is_some();
        let r = match self.mode {
            Mode::Compare if recorded => {
                let rec = RecordedCut.cut(site, stack);
                let chain = ChainCut.cut(site, stack);
                let (n, d) = self.counts.get();
                self.counts.set((n + 1, d + u64::from(rec != chain)));
                if rec != chain {
                    println!("--- recorded cut {rec:?}, join {chain:?}");
                    self.print_stack(stack);
                }
                return rec;
            }
            Mode::Compare => return RecordedCut.cut(site, stack),
            Mode::NamesOnly if !recorded => match chain_match(stack.open, stack.names) {
                ChainMatch::At(j) => Some(j),
                _ => None,
            },
            _ => RecordedCut.cut(site, stack),
        };
        if r.is_none() {
            self.flagged += 1;
            let s = stack.sample;
            println!(
                "--- unmatched #{}: thread {}, {} open call(s), recorded cut {:?}",
                self.flagged, s.thread, s.shadow_depth, s.cut
            );
            self.print_stack(stack);
        }
        r
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: unmatched TRACE.fgt [--names-only | --compare]")?;
    let mode = match args.next().as_deref() {
        None => Mode::Join,
        Some("--names-only") => Mode::NamesOnly,
        Some("--compare") => Mode::Compare,
        Some(other) => return Err(format!("unknown option {other}").into()),
    };
    let trace = Trace::load(&path)?;
    let meta = trace.meta();
    println!(
        "sampler: {}",
        meta.sampler.as_deref().unwrap_or("(not recorded)")
    );
    let opts = FoldedOptions::default();
    let counts = Rc::new(Cell::new((0, 0)));
    let explain = Explain {
        sym: Symbolizer::new(&meta.mappings),
        mode,
        counts: counts.clone(),
        flagged: 0,
    };
    let mut b =
        FoldedBuilder::combined(meta, &opts, Symbolizer::new(&meta.mappings)).with_cut(explain);
    b.extend(ok_events(trace.events()))?;
    let f = b.finish();
    let s = f.summary();
    if mode == Mode::Compare {
        let (n, d) = counts.get();
        println!(
            "compare: {n} samples with a recorded cut, the join agrees on {} ({:.2}%)",
            n - d,
            100.0 * (n - d) as f64 / n.max(1) as f64
        );
    } else {
        println!(
            "summary: {} samples, {} outside traced calls, {} unmatched, {} depth mismatches",
            s.samples, s.untraced, s.unmatched, s.depth_mismatches
        );
    }
    Ok(())
}
