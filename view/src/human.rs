//! Number and column formatting shared by the text views, written to match the
//! tools people already read (the kernel's `function_graph`, uftrace) digit for
//! digit, so the views can be diffed against theirs; and [`human_duration`],
//! the one format for durations in running text (captions, tooltips, test
//! failure messages), outside those fixed columns.

use fgtrace_trace::TraceMeta;
use std::fmt::{self, Write};

/// A duration for people to read, in running text: `850 ns`, `1.5 us`,
/// `312.504 us`, `1.25 ms`, `2 s`.
///
/// Below 1 us, whole nanoseconds; from there, the largest of `us`, `ms` and `s`
/// that keeps the whole part at least 1, with at most three decimals,
/// truncated (like the ftrace and uftrace columns, so `999999 ns` is
/// `999.999 us`, never `1000 us`) and trailing zeros dropped. Seconds do not
/// roll over into minutes. ASCII `us`, as in the ftrace graph that failure
/// messages show next to these.
///
/// For fixed-width columns use [`uftrace_time`] or [`push_ftrace_duration`]
/// instead: they print a fixed number of decimals so that the digits line up.
///
/// Formats without allocating (`write!(out, "{}", human_duration(ns))`);
/// width, fill and alignment apply as for a `str` (`{:>12}`).
pub fn human_duration(ns: u64) -> HumanDuration {
    HumanDuration(ns)
}

/// Nanoseconds that display as [`human_duration`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub u64);

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The longest text is u64::MAX: `18446744073.709 s`, 17 bytes.
        let mut buf = StackStr::<24>::new();
        let ns = self.0;
        let (per_unit, unit) = match ns {
            0..=999 => (1, "ns"),
            1_000..=999_999 => (1_000, "us"),
            1_000_000..=999_999_999 => (1_000_000, "ms"),
            _ => (1_000_000_000, "s"),
        };
        write!(buf, "{}", ns / per_unit)?;
        // Thousandths of the unit, truncated; none for whole nanoseconds.
        let mut frac = ns % per_unit / (per_unit / 1000).max(1);
        if per_unit > 1 && frac != 0 {
            let mut digits = 3;
            while frac % 10 == 0 {
                frac /= 10;
                digits -= 1;
            }
            write!(buf, ".{frac:0digits$}")?;
        }
        write!(buf, " {unit}")?;
        f.pad(buf.as_str())
    }
}

/// A fixed-size, stack-allocated `fmt::Write` target for short ASCII text.
struct StackStr<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackStr<N> {
    fn new() -> Self {
        StackStr {
            buf: [0; N],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only whole `str`s are ever copied in, so the bytes are valid UTF-8.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> Write for StackStr<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Bytes with a binary unit: `512 B`, `4.0 KiB`, `1.5 MiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// A call's allocation figures for a tail comment: `3 allocs 4.0 KiB`, with
/// `, 2 frees 1.0 KiB` and `, 1 realloc` when there are any.
pub fn alloc_note(a: &fgtrace_core::record::AllocCounts) -> String {
    let plural = |n: u64, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
    let mut s = format!(
        "{} {}",
        plural(a.allocs, "alloc"),
        human_bytes(a.alloc_bytes)
    );
    if a.frees != 0 || a.freed_bytes != 0 {
        s.push_str(&format!(
            ", {} {}",
            plural(a.frees, "free"),
            human_bytes(a.freed_bytes)
        ));
    }
    if a.reallocs != 0 {
        s.push_str(&format!(", {}", plural(a.reallocs, "realloc")));
    }
    s
}

/// A call's per-call counters (named by `TraceMeta::counters`) as a tail
/// comment's text: allocation figures when it allocated or freed anything
/// (see [`alloc_note`]), `N instr`, `N name` for any other counter; `None`
/// when there is nothing to say.
pub fn counter_note(names: &[String], values: &[u64]) -> Option<String> {
    let at = |n: &str| {
        names
            .iter()
            .position(|x| x == n)
            .and_then(|i| values.get(i).copied())
    };
    let mut parts = Vec::new();
    if let Some(allocs) = at("allocs") {
        let a = fgtrace_core::record::AllocCounts {
            allocs,
            alloc_bytes: at("alloc_bytes").unwrap_or(0),
            frees: at("frees").unwrap_or(0),
            freed_bytes: at("freed_bytes").unwrap_or(0),
            reallocs: at("reallocs").unwrap_or(0),
        };
        if a != fgtrace_core::record::AllocCounts::ZERO {
            parts.push(alloc_note(&a));
        }
    }
    for (n, v) in names.iter().zip(values) {
        match n.as_str() {
            "allocs" | "alloc_bytes" | "frees" | "freed_bytes" | "reallocs" => {}
            "instructions" => parts.push(format!("{v} instr")),
            other => parts.push(format!("{v} {other}")),
        }
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// ftrace's overhead mark for a duration: strict greater-than on nanoseconds
/// (`trace_find_mark`), so exactly 10 us gets no `+`.
pub fn overhead_mark(ns: u64) -> char {
    const MARKS: [(u64, char); 6] = [
        (1_000_000_000, '$'),
        (100_000_000, '@'),
        (10_000_000, '*'),
        (1_000_000, '#'),
        (100_000, '!'),
        (10_000, '+'),
    ];
    MARKS
        .iter()
        .find(|&&(limit, _)| ns > limit)
        .map_or(' ', |&(_, c)| c)
}

/// A duration in microseconds as the kernel prints it (`trace_print_graph_duration`):
/// the whole microseconds, then decimals truncated (not rounded) so that at most
/// 7 digits are shown: `1.382`, `33998.59`, `119760.2`, `3594274`.
pub fn ftrace_usecs(ns: u64) -> String {
    let mut s = String::with_capacity(12);
    push_ftrace_usecs(&mut s, ns);
    s
}

/// [`ftrace_usecs`] appended to `out` without allocating (the graph's hot
/// path prints one per line); returns the number of characters written.
pub fn push_ftrace_usecs(out: &mut String, ns: u64) -> usize {
    let mut buf = [0u8; 24];
    let mut i = buf.len();
    let mut us = ns / 1000;
    loop {
        i -= 1;
        buf[i] = b'0' + (us % 10) as u8;
        us /= 10;
        if us == 0 {
            break;
        }
    }
    let int_len = buf.len() - i;
    let mut end = buf.len();
    let mut tmp = [0u8; 24];
    tmp[..int_len].copy_from_slice(&buf[i..]);
    end = end.min(int_len);
    if int_len < 7 {
        let decimals = (7 - int_len).min(3);
        let rem = ns % 1000;
        let digits = [
            b'0' + (rem / 100) as u8,
            b'0' + (rem / 10 % 10) as u8,
            b'0' + (rem % 10) as u8,
        ];
        tmp[end] = b'.';
        tmp[end + 1..end + 1 + decimals].copy_from_slice(&digits[..decimals]);
        end += 1 + decimals;
    }
    // SAFETY-free: only ASCII digits and '.'.
    out.push_str(std::str::from_utf8(&tmp[..end]).unwrap_or(""));
    end
}

/// The kernel's duration cell without the mark: number, ` us `, then spaces up
/// to 8 characters of number (12 characters in all for numbers up to 8 wide).
pub fn push_ftrace_duration(out: &mut String, ns: u64) {
    let n = push_ftrace_usecs(out, ns);
    out.push_str(" us ");
    for _ in n..8 {
        out.push(' ');
    }
}

/// uftrace's time format (`%3d.%03d` with `us`, `ms` or ` s`): the unit is the
/// largest that keeps the integer part under 1000. Unlike uftrace, zero prints
/// as `0.000 us` rather than blanks, and seconds do not roll over into minutes.
///
/// A column format, for the uftrace-style tables: running text uses
/// [`human_duration`].
pub fn uftrace_time(ns: u64) -> String {
    let (int, frac, unit) = if ns < 1_000_000 {
        (ns / 1000, ns % 1000, "us")
    } else if ns < 1_000_000_000 {
        (ns / 1_000_000, ns / 1000 % 1000, "ms")
    } else {
        (ns / 1_000_000_000, ns / 1_000_000 % 1000, " s")
    };
    format!("{int:3}.{frac:03} {unit}")
}

/// ftrace's absolute time (`funcgraph-abstime`): `%5lu.%06lu`, seconds and
/// microseconds (truncated) since session start.
pub fn abs_time(ns: u64) -> String {
    format!("{:5}.{:06}", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

/// Centres `s` in `width` columns the kernel's way (`print_graph_proc`): half
/// the spare spaces before (rounded down), the rest after; never truncates.
pub fn push_centered(out: &mut String, s: &str, width: usize) {
    let spaces = width.saturating_sub(s.chars().count());
    for _ in 0..spaces / 2 {
        out.push(' ');
    }
    out.push_str(s);
    for _ in 0..spaces - spaces / 2 {
        out.push(' ');
    }
}

/// One line per loss counter that is non-zero, for the threads `shown` selects:
/// `LOST N records on thread name-tid` and `(Overruns: N) on thread name-tid ...`.
/// Both views print these in their headers so a loss is never silent.
pub fn loss_lines(meta: &TraceMeta, shown: &[bool], lost_events: &[u64]) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(c) = &meta.cut_short {
        lines.push(format!("recording cut short {}", c.describe()));
    }
    if let Some(r) = fgtrace_trace::ring_text(meta) {
        lines.push(format!("ring recording: {r}"));
    }
    for (i, t) in meta.threads.iter().enumerate() {
        if !shown.get(i).copied().unwrap_or(true) {
            continue;
        }
        let label = meta.thread_label(i as u32);
        let lost = t.lost.max(lost_events.get(i).copied().unwrap_or(0));
        if lost > 0 {
            lines.push(format!("LOST {lost} records on thread {label}"));
        }
        if t.overruns > 0 {
            let mut l = String::new();
            let _ = write!(
                l,
                "(Overruns: {}) on thread {label}: calls not recorded, shadow stack full",
                t.overruns
            );
            lines.push(l);
        }
    }
    lines
}

/// `v` as indented JSON (`report --format json`, `diff --json`), with the
/// `json` feature; without it, an error saying which feature to turn on.
#[cfg(feature = "json")]
pub(crate) fn write_pretty_json(
    w: impl std::io::Write,
    v: &impl serde::Serialize,
) -> std::io::Result<()> {
    serde_json::to_writer_pretty(w, v).map_err(std::io::Error::other)
}

#[cfg(not(feature = "json"))]
pub(crate) fn write_pretty_json(
    _w: impl std::io::Write,
    _v: &impl serde::Serialize,
) -> std::io::Result<()> {
    Err(std::io::Error::other(
        "JSON output needs fgtrace-view's `json` feature (fgtrace's `json`)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ns: u64) -> String {
        let mut s = String::new();
        s.push(overhead_mark(ns));
        s.push(' ');
        push_ftrace_duration(&mut s, ns);
        s.push_str("|  ");
        s
    }

    #[test]
    fn ftrace_numbers_keep_seven_digits_and_truncate() {
        // Expected strings written from trace_print_graph_duration: whole us,
        // then "%03lu" of the ns remainder cut to 3/2/1/0 characters.
        assert_eq!(ftrace_usecs(0), "0.000");
        assert_eq!(ftrace_usecs(999), "0.999");
        assert_eq!(ftrace_usecs(1_382), "1.382");
        assert_eq!(ftrace_usecs(49_370), "49.370");
        assert_eq!(ftrace_usecs(1_837_709), "1837.709");
        assert_eq!(ftrace_usecs(9_999_999), "9999.999");
        assert_eq!(ftrace_usecs(10_000_000), "10000.00");
        assert_eq!(ftrace_usecs(33_998_599), "33998.59");
        assert_eq!(ftrace_usecs(119_760_299), "119760.2");
        assert_eq!(ftrace_usecs(999_999_999), "999999.9");
        assert_eq!(ftrace_usecs(1_000_000_000), "1000000");
        assert_eq!(ftrace_usecs(3_594_274_999), "3594274");
        assert_eq!(ftrace_usecs(123_456_789_000_000), "123456789000");
    }

    #[test]
    fn duration_cells_have_the_kernel_width() {
        assert_eq!(cell(1_382), "  1.382 us    |  ");
        assert_eq!(cell(49_370), "+ 49.370 us   |  ");
        assert_eq!(cell(1_837_709), "# 1837.709 us |  ");
        assert_eq!(cell(33_998_599), "* 33998.59 us |  ");
        assert_eq!(cell(119_760_299), "@ 119760.2 us |  ");
        assert_eq!(cell(3_594_274_999), "$ 3594274 us  |  ");
        // Every cell up to 8 characters of number is 14 wide before the bar.
        for ns in [
            0,
            1_382,
            49_370,
            1_837_709,
            33_998_599,
            119_760_299,
            3_594_274_999,
            99_999_999_999,
        ] {
            assert_eq!(cell(ns).find('|'), Some(14), "{ns}");
        }
    }

    #[test]
    fn overhead_marks_are_strictly_greater() {
        let cases = [
            (10_000, ' '),
            (10_001, '+'),
            (100_000, '+'),
            (100_001, '!'),
            (1_000_000, '!'),
            (1_000_001, '#'),
            (10_000_000, '#'),
            (10_000_001, '*'),
            (100_000_000, '*'),
            (100_000_001, '@'),
            (1_000_000_000, '@'),
            (1_000_000_001, '$'),
            (0, ' '),
            (u64::MAX, '$'),
        ];
        for (ns, mark) in cases {
            assert_eq!(overhead_mark(ns), mark, "{ns} ns");
        }
    }

    #[test]
    fn uftrace_units() {
        assert_eq!(uftrace_time(0), "  0.000 us");
        assert_eq!(uftrace_time(2_579), "  2.579 us");
        assert_eq!(uftrace_time(999_999), "999.999 us");
        assert_eq!(uftrace_time(1_000_000), "  1.000 ms");
        assert_eq!(uftrace_time(10_293_000), " 10.293 ms");
        assert_eq!(uftrace_time(999_999_999), "999.999 ms");
        assert_eq!(uftrace_time(1_000_000_000), "  1.000  s");
        assert_eq!(uftrace_time(3_594_274_999), "  3.594  s");
        assert_eq!(uftrace_time(1_234_000_000_000), "1234.000  s");
    }

    #[test]
    fn human_durations_at_unit_boundaries() {
        let h = |ns: u64| human_duration(ns).to_string();
        // Whole nanoseconds below 1 us.
        assert_eq!(h(0), "0 ns");
        assert_eq!(h(1), "1 ns");
        assert_eq!(h(850), "850 ns");
        assert_eq!(h(999), "999 ns");
        // Microseconds: three decimals at most, truncated, zeros dropped.
        assert_eq!(h(1_000), "1 us");
        assert_eq!(h(1_001), "1.001 us");
        assert_eq!(h(1_010), "1.01 us");
        assert_eq!(h(1_500), "1.5 us");
        assert_eq!(h(312_504), "312.504 us");
        assert_eq!(h(999_900), "999.9 us");
        assert_eq!(h(999_999), "999.999 us");
        // Milliseconds: sub-microsecond digits are cut, never rounded up into
        // the next unit.
        assert_eq!(h(1_000_000), "1 ms");
        assert_eq!(h(1_000_999), "1 ms");
        assert_eq!(h(1_250_000), "1.25 ms");
        assert_eq!(h(3_001_382), "3.001 ms");
        assert_eq!(h(999_999_999), "999.999 ms");
        // Seconds, which do not roll over into minutes or hours.
        assert_eq!(h(1_000_000_000), "1 s");
        assert_eq!(h(1_999_999_999), "1.999 s");
        assert_eq!(h(12_340_000_000), "12.34 s");
        assert_eq!(h(60_000_000_000), "60 s");
        assert_eq!(h(3_600_000_000_000), "3600 s");
        assert_eq!(h(u64::MAX), "18446744073.709 s");
    }

    #[test]
    fn human_durations_pad_like_str() {
        assert_eq!(format!("{:>10}|", human_duration(40)), "     40 ns|");
        assert_eq!(format!("{:<10}|", human_duration(1_060)), "1.06 us   |");
        assert_eq!(format!("{:*^9}", human_duration(2_000)), "**2 us***");
        // Narrower than the text: nothing is cut.
        assert_eq!(format!("{:3}", human_duration(312_504)), "312.504 us");
        let mut out = String::from("took ");
        write!(out, "{}", human_duration(u64::MAX)).unwrap();
        assert_eq!(out, "took 18446744073.709 s");
    }

    #[test]
    fn abs_time_and_centering() {
        assert_eq!(abs_time(0), "    0.000000");
        assert_eq!(abs_time(1_100_999), "    0.001100");
        assert_eq!(abs_time(3_595_274_999), "    3.595274");
        assert_eq!(abs_time(123_456_000_000_000), "123456.000000");
        let mut s = String::new();
        push_centered(&mut s, "main-4242", 14);
        assert_eq!(s, "  main-4242   ");
        s.clear();
        push_centered(&mut s, "a-very-long-label-1", 14);
        assert_eq!(s, "a-very-long-label-1");
    }
}
