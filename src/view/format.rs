//! Number and column formatting shared by the text views, written to match the
//! tools people already read (the kernel's `function_graph`, uftrace) digit for
//! digit, so the views can be diffed against theirs.

use crate::trace::TraceMeta;
use std::fmt::Write;

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
