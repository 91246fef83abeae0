//! Flamegraph SVGs of fgtrace's own stacks (traced, sampled, combined, and
//! the traced flame chart), on top of [`render_svg`]:
//!
//! - frames are coloured by where they came from: traced calls in blues,
//!   sampled frames in warm colours, threads grey, fgtrace's markers
//!   (`[unknown below <fn>]`) purple, through inferno's `PaletteMap`;
//! - each frame's tooltip (its SVG `<title>`) keeps inferno's text and adds
//!   the exact numbers of that frame: calls, total and self time, samples;
//!   for the chart, the call's start time and source location.
//!
//! inferno can only attach attributes per function *name*, not per frame, so
//! the frames are laid out here (lines are handed over in the order they are
//! to be drawn, with inferno's `flame_chart`, which keeps that order instead
//! of sorting) and every frame is known by its depth and its x offset in
//! counts. The tooltips are then written into the SVG inferno produced, which
//! carries both (`y` and `fg:x` on each frame's `rect`). A frame the
//! annotation cannot place keeps inferno's tooltip.

use super::flame::{render_svg, FlameError, FlameOptions};
use super::human::human_duration;
use crate::chart::Chart;
use crate::folded::{Folded, Origin, Tree};
use fgtrace_trace::TraceMeta;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;

/// RGB of a frame: the origin picks the palette, the name a shade in it (so
/// neighbouring frames stay distinguishable and colours are stable).
pub fn origin_color(origin: Origin, name: &str) -> [u8; 3] {
    // FNV-1a: deterministic across runs and platforms.
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    let v = |shift: u32, span: u32| ((h >> shift) % span) as u8;
    match origin {
        Origin::Traced => [40 + v(0, 50), 120 + v(8, 70), 200 + v(16, 55)],
        Origin::Sampled => [215 + v(0, 40), 90 + v(8, 120), 20 + v(16, 40)],
        Origin::Thread => [175 + v(0, 20), 175 + v(0, 20), 175 + v(0, 20)],
        Origin::Marker => [170, 110, 210],
    }
}

/// Lines in drawing order, the extra tooltip of each frame by (depth, x),
/// and the colour of each name.
struct Drawing {
    lines: Vec<String>,
    titles: HashMap<(usize, u64), String>,
    colors: BTreeMap<String, [u8; 3]>,
}

impl Drawing {
    fn new(tree: &Tree) -> Self {
        let mut colors = BTreeMap::new();
        // Traced colours win over sampled ones for a name that is both.
        for pass in [
            Origin::Sampled,
            Origin::Thread,
            Origin::Marker,
            Origin::Traced,
        ] {
            for n in tree.nodes.iter().filter(|n| n.origin == pass) {
                let name = &tree.names[n.name as usize];
                colors.insert(name.clone(), origin_color(pass, name));
            }
        }
        // inferno's root frame ("all") has the empty name.
        colors.insert(String::new(), [200, 200, 200]);
        Drawing {
            lines: Vec::new(),
            titles: HashMap::new(),
            colors,
        }
    }

    /// Adds a line (path of node ids) after `prev`: the frames inferno starts
    /// here are the ones past the common prefix of names.
    fn push(
        &mut self,
        tree: &Tree,
        path: &[u32],
        count: u64,
        prev: &mut Vec<u32>,
        x: &mut u64,
        title: &mut dyn FnMut(usize, u32) -> Option<String>,
    ) {
        let names: Vec<u32> = path.iter().map(|&n| tree.nodes[n as usize].name).collect();
        let shared = names
            .iter()
            .zip(prev.iter())
            .take_while(|(a, b)| a == b)
            .count();
        for (pos, &node) in path.iter().enumerate().skip(shared) {
            if let Some(t) = title(pos, node) {
                self.titles.insert((pos + 1, *x), t);
            }
        }
        let mut line = String::new();
        for (i, &n) in path.iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.push_str(tree.name(n));
        }
        line.push(' ');
        line.push_str(&count.to_string());
        self.lines.push(line);
        *x += count;
        *prev = names;
    }

    fn render(self, opts: &FlameOptions, mut out: impl Write) -> Result<(), FlameError> {
        let mut o = opts.clone();
        o.flame_chart = true;
        for (k, v) in self.colors {
            o.frame_colors.entry(k).or_insert(v);
        }
        let mut svg = Vec::new();
        render_svg(&self.lines, &o, &mut svg)?;
        let text = String::from_utf8_lossy(&svg);
        let annotated = annotate(&text, &self.titles, opts.inverted);
        out.write_all(annotated.as_bytes())?;
        out.flush()?;
        Ok(())
    }
}

/// Tooltip additions of one node of stacks built by [`Folded`].
fn node_title(f: &Folded, node: u32) -> Option<String> {
    let n = &f.tree.nodes[node as usize];
    let combined = f.mode_name == "combined";
    Some(match n.origin {
        Origin::Traced => {
            let mut s = format!(
                "traced: {} call{}, total {}, self {}",
                n.calls,
                if n.calls == 1 { "" } else { "s" },
                human_duration(n.total_ns),
                human_duration(n.self_ns)
            );
            if combined {
                s.push_str(&format!(", {} samples", n.samples));
            }
            s
        }
        Origin::Sampled => format!(
            "sampled: {} sample{}",
            n.samples,
            if n.samples == 1 { "" } else { "s" }
        ),
        Origin::Thread => {
            if n.samples > 0 {
                format!("thread: {} samples", n.samples)
            } else {
                "thread".to_string()
            }
        }
        Origin::Marker => format!(
            "marker: {} sample{} whose traced frame was not found in the sampled stack",
            n.samples,
            if n.samples == 1 { "" } else { "s" }
        ),
    })
}

/// Draws stacks built by a [`FoldedBuilder`](super::folded::FoldedBuilder):
/// frames sorted by name at every level (equal frames merged), coloured by
/// origin, with exact numbers in the tooltips.
pub fn folded_svg(folded: &Folded, opts: &FlameOptions, out: impl Write) -> Result<(), FlameError> {
    let tree = &folded.tree;
    let mut paths: Vec<(Vec<u32>, u64)> = tree
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.weight > 0)
        .map(|(i, n)| (tree.path(i as u32), n.weight))
        .collect();
    paths.sort_by(|a, b| {
        let na = a.0.iter().map(|&n| tree.name(n));
        let nb = b.0.iter().map(|&n| tree.name(n));
        na.cmp(nb).then_with(|| a.0.cmp(&b.0))
    });
    let mut d = Drawing::new(tree);
    let (mut prev, mut x) = (Vec::new(), 0u64);
    for (path, count) in &paths {
        d.push(tree, path, *count, &mut prev, &mut x, &mut |_, node| {
            node_title(folded, node)
        });
    }
    d.render(opts, out)
}

/// Draws a [`Chart`]: time order per thread, each call's frame as wide as
/// its duration, tooltips with its start time and source location.
pub fn chart_svg(
    chart: &Chart,
    meta: &TraceMeta,
    opts: &FlameOptions,
    out: impl Write,
) -> Result<(), FlameError> {
    let tree = &chart.tree;
    let mut starts: HashMap<(u32, u32), usize> = HashMap::new();
    for (i, &(line, pos, _)) in chart.starts.iter().enumerate() {
        starts.insert((line, pos), i);
    }
    let mut d = Drawing::new(tree);
    let (mut prev, mut x) = (Vec::new(), 0u64);
    for (li, &(node, count)) in chart.lines.iter().enumerate() {
        let path = tree.path(node);
        let mut title = |pos: usize, _node: u32| -> Option<String> {
            let &i = starts.get(&(li as u32, pos as u32))?;
            let c = chart.starts[i].2;
            let (full, loc) = match meta.sites.get(c.site as usize) {
                Some(s) => (s.full_name(), format!("{}:{}", s.file, s.line)),
                None => (format!("[site {}]", c.site), String::new()),
            };
            Some(format!(
                "{full} ({loc}): starts at {}, lasts {}{}",
                human_duration(c.start_ns),
                human_duration(c.dur_ns),
                if c.unwound { ", unwound" } else { "" }
            ))
        };
        d.push(tree, &path, count, &mut prev, &mut x, &mut title);
    }
    d.render(opts, out)
}

/// Minimal XML text escaping, as inferno writes its titles.
fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

fn attr<'s>(tag: &'s str, name: &str) -> Option<&'s str> {
    let key = format!(" {name}=\"");
    let i = tag.find(&key)? + key.len();
    let len = tag[i..].find('"')?;
    Some(&tag[i..i + len])
}

/// Appends `titles` to the `<title>` of the frames they belong to. A frame is
/// a `<title>` followed by its `<rect ... y=".." height=".." fg:x="..">`; its
/// depth comes from `y` relative to the root frame's (the lowest frame, or
/// the highest when inverted), in frame heights (rect height + 1 px padding).
fn annotate(svg: &str, titles: &HashMap<(usize, u64), String>, inverted: bool) -> String {
    struct Frame {
        text_end: usize,
        y: i64,
        fh: i64,
        x: u64,
    }
    let mut frames = Vec::new();
    let mut pos = 0;
    while let Some(i) = svg[pos..].find("<title>") {
        let start = pos + i + "<title>".len();
        let Some(len) = svg[start..].find("</title>") else {
            break;
        };
        let text_end = start + len;
        pos = text_end;
        let Some(r) = svg[text_end..].find("<rect ") else {
            break;
        };
        // The rect must belong to this frame: nothing but the closing title between.
        if svg[text_end..text_end + r].trim() != "</title>" {
            continue;
        }
        let rs = text_end + r;
        let Some(re) = svg[rs..].find("/>") else {
            break;
        };
        let tag = &svg[rs..rs + re];
        let (Some(y), Some(h), Some(x)) = (
            attr(tag, "y").and_then(|v| v.parse::<i64>().ok()),
            attr(tag, "height").and_then(|v| v.parse::<i64>().ok()),
            attr(tag, "fg:x").and_then(|v| v.parse::<u64>().ok()),
        ) else {
            continue;
        };
        frames.push(Frame {
            text_end,
            y,
            fh: h + 1,
            x,
        });
    }
    let root_y = if inverted {
        frames.iter().map(|f| f.y).min()
    } else {
        frames.iter().map(|f| f.y).max()
    };
    let Some(root_y) = root_y else {
        return svg.to_string();
    };
    let mut out = String::with_capacity(svg.len() + titles.len() * 64);
    let mut copied = 0;
    for f in &frames {
        if f.fh <= 0 {
            continue;
        }
        let dy = if inverted { f.y - root_y } else { root_y - f.y };
        if dy < 0 || dy % f.fh != 0 {
            continue;
        }
        let depth = (dy / f.fh) as usize;
        if let Some(t) = titles.get(&(depth, f.x)) {
            // inferno's script labels a frame with its title minus the final
            // `(...)`, so the details go inside those parentheses, and must
            // not contain any of their own.
            let extra = escape(t).replace(['(', ')'], "");
            if svg[..f.text_end].ends_with(')') {
                out.push_str(&svg[copied..f.text_end - 1]);
                out.push_str("; ");
                out.push_str(&extra);
                out.push(')');
            } else {
                out.push_str(&svg[copied..f.text_end]);
                out.push_str(" (");
                out.push_str(&extra);
                out.push(')');
            }
            copied = f.text_end;
        }
    }
    out.push_str(&svg[copied..]);
    out
}
