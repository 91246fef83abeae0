//! Folded stacks to a flamegraph SVG, through `inferno`.
//!
//! Every flamegraph fgtrace draws (sampled stacks, traced durations, a Zephyr
//! import) ends as folded lines, `root;child;leaf count`; this is the one
//! place that knows inferno's options, so the views only say what to draw.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Write};

use inferno::flamegraph;

/// What the SVG says and how it lays stacks out. Unset fields keep inferno's
/// defaults (1200 px wide, 16 px frames, hot palette).
#[derive(Debug, Clone, PartialEq)]
pub struct FlameOptions {
    /// Headline at the top of the image.
    pub title: String,
    /// Second line under the title (e.g. the source file or a filter).
    pub subtitle: Option<String>,
    /// Unit of the counts, shown in tooltips: "samples", "ns", ...
    pub count_name: String,
    /// Keep input order on the x axis (a flame chart: time goes left to right)
    /// instead of sorting frames alphabetically and merging equal ones.
    pub flame_chart: bool,
    /// Icicle graph: root at the top.
    pub inverted: bool,
    /// Image width in pixels; `None` is inferno's default.
    pub width: Option<usize>,
    /// Frames narrower than this many pixels are omitted (inferno default 0.1).
    pub min_width: f64,
    /// Fixed RGB colours by frame name (e.g. by where a frame came from),
    /// through inferno's `PaletteMap`; other frames keep the palette's colour.
    pub frame_colors: BTreeMap<String, [u8; 3]>,
}

impl Default for FlameOptions {
    fn default() -> Self {
        FlameOptions {
            title: "Flame Graph".into(),
            subtitle: None,
            count_name: "samples".into(),
            flame_chart: false,
            inverted: false,
            width: None,
            min_width: 0.1,
            frame_colors: BTreeMap::new(),
        }
    }
}

/// Why no SVG came out.
#[derive(Debug)]
pub enum FlameError {
    /// No line with a positive count: inferno would draw only an error banner.
    Empty,
    /// Writing the SVG (or inferno rejecting a line) failed.
    Io(io::Error),
}

impl fmt::Display for FlameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlameError::Empty => write!(f, "nothing to draw: no stacks with a count above 0"),
            FlameError::Io(e) => write!(f, "cannot render the flamegraph: {e}"),
        }
    }
}

impl std::error::Error for FlameError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FlameError::Empty => None,
            FlameError::Io(e) => Some(e),
        }
    }
}

impl From<io::Error> for FlameError {
    fn from(e: io::Error) -> Self {
        FlameError::Io(e)
    }
}

/// Renders folded lines (`a;b;c 12`) as an SVG flamegraph into `out`.
///
/// Colours are derived from frame names (`deterministic`), so the same input
/// gives the same bytes: diffable, and testable.
///
/// ```
/// use fgtrace::view::flame::{render_svg, FlameOptions};
/// use fgtrace::view::folded::{traced_folded, FoldedOptions};
/// use fgtrace::view::ok_events;
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
/// // Traced stacks (self time in ns) as folded lines, then as a flamegraph.
/// let mut folded = Vec::new();
/// traced_folded(&trace.meta, ok_events(trace.events()), &FoldedOptions::default(), &mut folded)?;
/// let opts = FlameOptions { title: "outer".into(), count_name: "ns".into(), ..Default::default() };
/// let mut svg = Vec::new();
/// render_svg(String::from_utf8(folded)?.lines(), &opts, &mut svg)?;
/// let svg = String::from_utf8(svg)?;
/// assert!(svg.starts_with("<?xml") && svg.contains("inner"), "{}", &svg[..200]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn render_svg<I, S, W>(lines: I, opts: &FlameOptions, out: W) -> Result<(), FlameError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
    W: Write,
{
    let lines: Vec<S> = lines.into_iter().collect();
    let has_samples = lines.iter().any(|l| {
        l.as_ref()
            .trim_end()
            .rsplit_once(' ')
            .and_then(|(_, n)| n.parse::<f64>().ok())
            .is_some_and(|n| n > 0.0)
    });
    if !has_samples {
        return Err(FlameError::Empty);
    }

    let mut palette = flamegraph::color::PaletteMap::default();
    for (name, &[r, g, b]) in &opts.frame_colors {
        palette.insert(name, flamegraph::color::Color { r, g, b });
    }
    let mut options = flamegraph::Options::default();
    if !opts.frame_colors.is_empty() {
        options.palette_map = Some(&mut palette);
    }
    options.title = opts.title.clone();
    options.subtitle = opts.subtitle.clone();
    options.count_name = opts.count_name.clone();
    options.flame_chart = opts.flame_chart;
    options.image_width = opts.width;
    options.min_width = opts.min_width;
    options.deterministic = true;
    if opts.inverted {
        options.direction = flamegraph::Direction::Inverted;
    }
    // inferno's flame chart draws its *last* line first: hand the lines over
    // reversed so that input order is what ends up left to right.
    if opts.flame_chart {
        flamegraph::from_lines(&mut options, lines.iter().rev().map(AsRef::as_ref), out)?;
    } else {
        flamegraph::from_lines(&mut options, lines.iter().map(AsRef::as_ref), out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svg(lines: &[&str], opts: &FlameOptions) -> String {
        let mut out = Vec::new();
        render_svg(lines, opts, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn frames_titles_and_counts_appear() {
        let opts = FlameOptions {
            title: "Zephyr perf: dump.txt".into(),
            subtitle: Some("prog.elf".into()),
            ..FlameOptions::default()
        };
        let text = svg(&["main;fib 3", "main;work 1"], &opts);
        assert!(text.starts_with("<?xml"));
        assert!(text.contains("Zephyr perf: dump.txt"));
        assert!(text.contains("prog.elf"));
        assert!(
            text.contains("<title>fib (3 samples, 75.00%)</title>"),
            "{text}"
        );
        assert!(text.contains("<title>main (4 samples, 100.00%)</title>"));
        assert!(text.contains("<title>all (4 samples, 100%)</title>"));
    }

    #[test]
    fn same_input_same_bytes() {
        let opts = FlameOptions::default();
        let lines = ["a;b 2", "a;c 5", "d 1"];
        assert_eq!(svg(&lines, &opts), svg(&lines, &opts));
    }

    #[test]
    fn count_name_is_used() {
        let opts = FlameOptions {
            count_name: "ns".into(),
            ..FlameOptions::default()
        };
        assert!(svg(&["a 10"], &opts).contains("<title>a (10 ns, 100.00%)</title>"));
    }

    #[test]
    fn empty_input_is_an_error_not_a_banner() {
        let mut out = Vec::new();
        let err = render_svg(Vec::<String>::new(), &FlameOptions::default(), &mut out);
        assert!(matches!(err, Err(FlameError::Empty)));
        assert!(out.is_empty());
    }
}
