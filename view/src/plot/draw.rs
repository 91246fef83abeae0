//! The SVG of a function's durations: the scatter of every call's duration
//! against its start time, one dot per occupied pixel and thread, and the
//! histogram with p50 and p99 marked.

use super::*;

/// A log axis's tick label: the tick's value to the nearest nanosecond as a
/// [`human_duration`] (ticks are powers of ten and their multiples).
pub(super) fn log_tick(v: &f64) -> String {
    human_duration(v.max(0.0).round() as u64).to_string()
}

/// Durations spanning more than this factor get log scales.
const LOG_RANGE: f64 = 50.0;
const HIST_BINS: usize = 40;

fn thread_color(i: usize) -> RGBColor {
    // Tableau 10: distinguishable, readable on white.
    const C: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = C[i % C.len()];
    RGBColor(r, g, b)
}

pub(super) fn draw_err<E: std::error::Error + Send + Sync>(
    e: DrawingAreaErrorKind<E>,
) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// Draws the two panels into an SVG string.
pub fn durations_svg(
    d: &CallDurations,
    meta: &TraceMeta,
    opts: &PlotOptions,
) -> Result<String, PlotError> {
    let mut svg = String::new();
    {
        let (w, h) = (opts.width.max(300), opts.height.max(240));
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let title = opts
            .title
            .clone()
            .unwrap_or_else(|| format!("Durations of {}", d.name));
        let root = root
            .titled(&title, ("sans-serif", 20).into_font())
            .map_err(draw_err)?;
        let (top, bottom) = root.split_vertically(h * 55 / 100);
        let lo = (d.min_ns.max(1)) as f64;
        let hi = (d.max_ns.max(1)) as f64;
        let log = hi / lo > LOG_RANGE;
        let span = meta
            .duration_ns
            .max(
                d.dots
                    .iter()
                    .chain(d.slowest.iter().map(|s| &s.call))
                    .map(|c| c.start_ns + c.dur_ns)
                    .max()
                    .unwrap_or(0),
            )
            .max(1) as f64;
        let caption = format!(
            "{} call{} on {} thread{}: duration against start time{}{}",
            d.count,
            if d.count == 1 { "" } else { "s" },
            d.threads().len(),
            if d.threads().len() == 1 { "" } else { "s" },
            if log { " (log scale)" } else { "" },
            if d.lost > 0 {
                format!(", LOST {} records", d.lost)
            } else {
                String::new()
            }
        );
        if log {
            let y = (lo / 1.5..hi * 1.5).log_scale();
            scatter(&top, d, meta, span, y, &caption, &log_tick)?;
            let edges = log_edges(lo, hi, HIST_BINS);
            let x = (edges[0] / 1.2..edges[HIST_BINS] * 1.2).log_scale();
            counts_axis(&bottom, d, x, &Bins::new(d, &edges), &log_tick)?;
        } else {
            // Equal durations still get an axis a few percent wide.
            let pad = if hi - lo < hi * 0.02 {
                (hi * 0.05).max(1.0)
            } else {
                (hi - lo) * 0.08
            };
            let (y0, y1) = ((lo - pad).max(0.0), hi + pad);
            scatter(
                &top,
                d,
                meta,
                span,
                y0..y1,
                &caption,
                &duration_axis(y0, y1),
            )?;
            let edges = lin_edges(d.min_ns as f64, d.max_ns as f64, HIST_BINS);
            let (x0, x1) = (edges[0], edges[HIST_BINS]);
            let margin = (x1 - x0) * 0.03;
            let (x0, x1) = ((x0 - margin).max(0.0), x1 + margin);
            counts_axis(
                &bottom,
                d,
                x0..x1,
                &Bins::new(d, &edges),
                &duration_axis(x0, x1),
            )?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// The histogram with a linear or log count axis.
fn counts_axis<X>(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    d: &CallDurations,
    x: X,
    bins: &Bins<'_>,
    fmt: &dyn Fn(&f64) -> String,
) -> Result<(), PlotError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    if bins.log {
        histogram(area, d, x, (bins.base..bins.top).log_scale(), bins, fmt)
    } else {
        histogram(area, d, x, bins.base..bins.top, bins, fmt)
    }
}

fn log_edges(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let (a, b) = (lo.ln(), (hi * 1.0001).ln());
    (0..=n)
        .map(|i| (a + (b - a) * i as f64 / n as f64).exp())
        .collect()
}

/// Labels of a linear duration axis from `lo` to `hi`: the unit of `hi`,
/// as many decimals as tell ticks a tenth of the range apart.
fn duration_axis(lo: f64, hi: f64) -> impl Fn(&f64) -> String {
    let (scale, unit) = if hi < 1e3 {
        (1.0, "ns")
    } else if hi < 1e6 {
        (1e3, "us")
    } else if hi < 1e9 {
        (1e6, "ms")
    } else {
        (1e9, "s")
    };
    let step = ((hi - lo) / 10.0 / scale).max(1e-9);
    let decimals = if step >= 1.0 {
        0
    } else {
        ((-step.log10()).ceil() as usize).min(6)
    };
    move |v: &f64| format!("{:.*} {unit}", decimals, v / scale)
}

fn lin_edges(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    // Equal durations: one bar in the middle of an axis 10% wide.
    let w = (hi * 0.05).max(1.0);
    let (lo, hi) = if hi - lo < w / 10.0 {
        (lo - w, hi + w)
    } else {
        (lo, hi)
    };
    let (lo, hi) = (lo.max(0.0), hi + (hi - lo) * 1e-4);
    (0..=n)
        .map(|i| lo + (hi - lo) * i as f64 / n as f64)
        .collect()
}

/// Upper panel: one series per thread, one dot per occupied pixel.
fn scatter<Y>(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    d: &CallDurations,
    meta: &TraceMeta,
    span: f64,
    y: Y,
    caption: &str,
    fmt: &dyn Fn(&f64) -> String,
) -> Result<(), PlotError>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let (x_scale, x_unit) = if span >= 2e9 {
        (1e9, "s")
    } else if span >= 2e6 {
        (1e6, "ms")
    } else {
        (1e3, "us")
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15).into_font())
        .margin(10)
        .x_label_area_size(38)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..span, y)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(235, 235, 235))
        .x_desc(format!("start, {x_unit} since session start"))
        .y_desc("duration")
        .x_label_formatter(&|v| {
            let s = format!("{:.3}", v / x_scale);
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        })
        .y_label_formatter(fmt)
        .draw()
        .map_err(draw_err)?;
    let radius = if d.count < 500 { 3 } else { 2 };
    // The threads with the most calls get a colour and a legend line each;
    // past `SHOWN`, the others are one grey series ("and N other threads").
    const SHOWN: usize = 9;
    let mut by_calls: Vec<(u32, u64)> = d.per_thread.clone();
    by_calls.sort_by_key(|&(t, n)| (Reverse(n), t));
    let named: Vec<(u32, u64)> = if by_calls.len() > SHOWN + 1 {
        by_calls[..SHOWN].to_vec()
    } else {
        by_calls.clone()
    };
    let slot = |t: u32| named.iter().position(|&(n, _)| n == t);
    let mut series: Vec<Vec<(f64, f64)>> = vec![Vec::new(); named.len() + 1];
    let mut seen: HashSet<(usize, i32, i32)> = HashSet::new();
    for c in &d.dots {
        let k = slot(c.thread).unwrap_or(named.len());
        let p = (c.start_ns as f64, c.dur_ns.max(1) as f64);
        let (px, py) = chart.backend_coord(&p);
        if seen.insert((k, px, py)) {
            series[k].push(p);
        }
    }
    // The grey series first, so that the named threads are drawn over it.
    let others = by_calls.len() - named.len();
    let other_calls: u64 = by_calls[named.len()..].iter().map(|&(_, n)| n).sum();
    let grey = RGBColor(150, 150, 150);
    if others > 0 {
        chart
            .draw_series(
                std::mem::take(&mut series[named.len()])
                    .into_iter()
                    .map(|p| Circle::new(p, radius, grey.mix(0.5).filled())),
            )
            .map_err(draw_err)?
            .label(format!("{others} other threads ({other_calls})"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, grey.filled()));
    }
    for (k, &(t, n)) in named.iter().enumerate() {
        let color = thread_color(k);
        chart
            .draw_series(
                std::mem::take(&mut series[k])
                    .into_iter()
                    .map(|p| Circle::new(p, radius, color.mix(0.7).filled())),
            )
            .map_err(draw_err)?
            .label(format!("{} ({n})", meta.thread_label(t)))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 12).into_font())
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// Calls per duration bin, and how the count axis is scaled.
struct Bins<'e> {
    edges: &'e [f64],
    counts: Vec<u64>,
    /// Count axis from `base` to `top`; log when single calls would vanish
    /// next to the tallest bar.
    base: f64,
    top: f64,
    log: bool,
}

impl<'e> Bins<'e> {
    fn new(d: &CallDurations, edges: &'e [f64]) -> Self {
        let n = edges.len() - 1;
        let mut counts = vec![0u64; n];
        // Each histogram bucket goes to the bin of the value standing for it
        // (within 1% of each of its calls).
        for (v, count) in d.histogram.counts() {
            let v = v.max(1) as f64;
            let i = edges
                .partition_point(|&e| e <= v)
                .saturating_sub(1)
                .min(n - 1);
            counts[i] += count;
        }
        let max = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
        let min = counts.iter().copied().filter(|&c| c > 0).min().unwrap_or(1) as f64;
        let log = max / min > LOG_RANGE;
        let (base, top) = if log {
            (0.7, max * 8.0)
        } else {
            (0.0, max * 1.35)
        };
        Bins {
            edges,
            counts,
            base,
            top,
            log,
        }
    }

    /// A height `at` (0..1) of the way up the count axis.
    fn height(&self, at: f64) -> f64 {
        if self.log {
            self.base * (self.top / self.base).powf(at)
        } else {
            self.top * at
        }
    }
}

/// Lower panel: calls per duration bin, p50 and p99 as labelled vertical lines.
fn histogram<X, Y>(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    d: &CallDurations,
    x: X,
    y: Y,
    bins: &Bins<'_>,
    fmt: &dyn Fn(&f64) -> String,
) -> Result<(), PlotError>
where
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!(
                "histogram{}: p50 {}, p99 {}, min {}, max {}",
                if bins.log { " (log counts)" } else { "" },
                human_duration(d.p50_ns),
                human_duration(d.p99_ns),
                human_duration(d.min_ns),
                human_duration(d.max_ns)
            ),
            ("sans-serif", 15).into_font(),
        )
        .margin(10)
        .x_label_area_size(38)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .light_line_style(RGBColor(235, 235, 235))
        .x_desc("duration")
        .y_desc("calls")
        .x_label_formatter(fmt)
        .y_label_formatter(&|v| {
            if v.fract().abs() < 1e-9 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(draw_err)?;
    let bar = RGBColor(70, 130, 180);
    let e = bins.edges;
    chart
        .draw_series(
            bins.counts
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, &c)| {
                    Rectangle::new([(e[i], bins.base), (e[i + 1], c as f64)], bar.filled())
                }),
        )
        .map_err(draw_err)?;
    let marks = [
        ("p50", d.p50_ns, RGBColor(30, 140, 60), 0.96),
        ("p99", d.p99_ns, RGBColor(200, 30, 30), 0.80),
    ];
    let (px, _) = chart.plotting_area().get_pixel_range();
    for (label, ns, color, at) in marks {
        let v = ns.max(1) as f64;
        // Labels right of the line, or left of it near the right edge.
        let (x, _) = chart.backend_coord(&(v, bins.base));
        let right_half = x > px.start + (px.end - px.start) * 7 / 10;
        let (text, anchor) = if right_half {
            (format!("{label} {} ", human_duration(ns)), HPos::Right)
        } else {
            (format!(" {label} {}", human_duration(ns)), HPos::Left)
        };
        let font = ("sans-serif", 13)
            .into_font()
            .color(&color)
            .pos(Pos::new(anchor, VPos::Top));
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(v, bins.base), (v, bins.top)],
                color.stroke_width(2),
            )))
            .map_err(draw_err)?;
        chart
            .draw_series(std::iter::once(Text::new(text, (v, bins.height(at)), font)))
            .map_err(draw_err)?;
    }
    Ok(())
}
