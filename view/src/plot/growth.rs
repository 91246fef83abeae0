//! `plot --x VALUE`: a function's call durations against one of its recorded
//! values, on log-log axes, with the power-law fit (see
//! [`crate::growth`]) drawn as a line and printed with the calls furthest
//! above it.

use super::{draw_err, log_tick, values_text, CallDurations, PlotError, PlotOptions};
use crate::growth::{fit_power, furthest_above, Fit};
use crate::human::uftrace_time;
use fgtrace_trace::TraceMeta;
use plotters::prelude::*;
use std::io::{self, Write};

/// Each call's `(value, duration ns)` for the value named `value`, from a
/// builder that kept the calls ([`DurationsBuilder::keeping_calls`](super::DurationsBuilder::keeping_calls)); calls
/// without it (or whose value is not a number) are left out. A value that
/// is a string in every call that records it is an error.
pub fn growth_points(
    d: &CallDurations,
    meta: &TraceMeta,
    value: &str,
) -> Result<Vec<(usize, f64, f64)>, PlotError> {
    let names: Vec<&String> = d
        .sites
        .iter()
        .filter_map(|&s| meta.sites.get(s as usize))
        .flat_map(|s| s.values.iter())
        .collect();
    // The slot of `value` in each of the function's sites.
    let slots: Vec<u8> = d
        .sites
        .iter()
        .filter_map(|&s| meta.sites.get(s as usize))
        .filter_map(|s| s.values.iter().position(|n| n == value))
        .map(|p| p as u8)
        .collect();
    if d.calls.len() as u64 != d.count {
        return Err(PlotError::CallsNotKept {
            name: d.name.clone(),
        });
    }
    if slots.is_empty() {
        return Err(PlotError::NoValue {
            name: d.name.clone(),
            value: value.to_string(),
            recorded: names.iter().map(|s| s.to_string()).collect(),
        });
    }
    let mut out = Vec::new();
    let mut strings = 0u64;
    for (i, (c, vals)) in d.calls.iter().zip(&d.values).enumerate() {
        let Some(v) = vals.iter().find(|v| slots.contains(&v.slot)) else {
            continue;
        };
        match v.number() {
            Some(x) => out.push((i, x, c.dur_ns as f64)),
            None if v.tag & fgtrace_core::values::tag::TYPE == fgtrace_core::values::tag::STR => {
                strings += 1
            }
            None => {}
        }
    }
    if out.is_empty() && strings > 0 {
        return Err(PlotError::NotANumber {
            name: d.name.clone(),
            value: value.to_string(),
        });
    }
    Ok(out)
}

/// The fit of `points` (see [`growth_points`]).
pub fn growth_fit(points: &[(usize, f64, f64)]) -> Option<Fit> {
    let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.1, p.2)).collect();
    fit_power(&xy)
}

/// Draws the scatter (log-log) and the fit line into an SVG string.
pub fn growth_svg(
    d: &CallDurations,
    value: &str,
    points: &[(usize, f64, f64)],
    fit: Option<&Fit>,
    opts: &PlotOptions,
) -> Result<String, PlotError> {
    let usable: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.1 > 0.0 && p.2 > 0.0)
        .map(|p| (p.1, p.2))
        .collect();
    let (x0, x1) = range(usable.iter().map(|p| p.0));
    let (y0, y1) = range(usable.iter().map(|p| p.1));
    let mut svg = String::new();
    {
        let (w, h) = (opts.width.max(300), opts.height.max(240));
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let title = opts
            .title
            .clone()
            .unwrap_or_else(|| format!("Duration of {} against {value}", d.name));
        let caption = match fit {
            Some(f) => f.describe("duration", value),
            None => format!("{} calls: too few distinct values to fit", usable.len()),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{title}: {caption}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (x0 / 1.2..x1 * 1.2).log_scale(),
                (y0 / 1.5..y1 * 1.5).log_scale(),
            )
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc(format!("{value} (log scale)"))
            .y_desc("duration (log scale)")
            .y_label_formatter(&log_tick)
            .draw()
            .map_err(draw_err)?;
        chart
            .draw_series(
                usable
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, RGBColor(31, 119, 180).filled())),
            )
            .map_err(draw_err)?;
        if let Some(f) = fit {
            let steps = 64;
            let line: Vec<(f64, f64)> = (0..=steps)
                .map(|i| {
                    let x = x0 * (x1 / x0).powf(i as f64 / steps as f64);
                    (x, f.at(x))
                })
                .collect();
            chart
                .draw_series(std::iter::once(PathElement::new(
                    line,
                    RGBColor(214, 39, 40).stroke_width(2),
                )))
                .map_err(draw_err)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn range(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for x in v {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    if hi <= lo {
        hi = lo * 2.0;
    }
    (lo, hi)
}

/// The fit, `duration ~ len^1.02 (r² 0.99)`, and the `top` calls furthest
/// above it, with their values and call paths.
pub fn write_growth(
    d: &CallDurations,
    meta: &TraceMeta,
    value: &str,
    points: &[(usize, f64, f64)],
    fit: Option<&Fit>,
    top: usize,
    mut w: impl Write,
) -> io::Result<()> {
    let Some(f) = fit else {
        writeln!(
            w,
            "# {}: {} call{} with `{value}`: at least two distinct positive values are needed for a fit",
            d.name,
            points.len(),
            if points.len() == 1 { "" } else { "s" }
        )?;
        return w.flush();
    };
    writeln!(
        w,
        "# {}: {} calls; {}{}",
        d.name,
        points.len(),
        f.describe("duration", value),
        if f.left_out > 0 {
            format!(", {} left out (value or duration not positive)", f.left_out)
        } else {
            String::new()
        }
    )?;
    let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.1, p.2)).collect();
    let above = furthest_above(&xy, f, top);
    if above.is_empty() {
        return w.flush();
    }
    writeln!(w, "# furthest above the fit:")?;
    writeln!(w, "#   DURATION      FIT   RATIO  THREAD  CALL")?;
    let site = d.sites.first().copied();
    for (k, ratio) in above {
        let (i, x, y) = points[k];
        writeln!(
            w,
            "  {:>10}  {:>8}  {ratio:>5.1}x  {}  {}({})",
            uftrace_time(y as u64),
            uftrace_time(f.at(x).round() as u64),
            meta.thread_label(d.calls[i].thread),
            site.map_or("?", |s| meta.site_name(s)),
            values_text(meta, site, &d.values[i])
        )?;
    }
    w.flush()
}
