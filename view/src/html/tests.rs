use super::*;

#[test]
fn escapes_markup() {
    assert_eq!(
        escape("<a href='x'>&\"</a>"),
        "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
    );
}

#[test]
fn viewers_named_with_their_commands() {
    let mut p = String::new();
    viewers_section(&mut p, Some("run.fgt"));
    assert!(
        p.contains("<code>fgtrace perfetto run.fgt -o trace.pftrace</code>"),
        "{p}"
    );
    assert!(
        p.contains("<code>fgtrace firefox run.fgt -o profile.json.gz</code>"),
        "{p}"
    );
    assert!(p.contains("profiler.firefox.com"));
    assert!(p.contains("ui.perfetto.dev"));
    assert_eq!(p.matches("<tr>").count(), VIEWERS.len() + 1);
}

#[test]
fn utc_dates() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(1_709_210_096_000_000_000), "2024-02-29 12:34:56 UTC");
}

#[test]
fn flame_prolog_dropped_and_style_scoped() {
    let svg = "<?xml version=\"1.0\"?><!DOCTYPE svg><svg><style>\ntext { font-size:12px }\n</style></svg>";
    assert_eq!(
        inline_flame_svg(svg),
        "<svg><style>\n#flame text { font-size:12px }\n</style></svg>"
    );
}

#[test]
fn the_summary_names_the_busiest_threads_and_counts_the_others() {
    use fgtrace_trace::ThreadInfo;
    let meta = TraceMeta {
        threads: (0..13u32)
            .map(|i| ThreadInfo {
                tid: 100 + i,
                name: format!("t{i}"),
                calls: u64::from(i) + 1,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let all: Vec<_> = meta.threads.iter().enumerate().collect();
    let s = threads_summary(&meta, &all);
    assert!(
        s.starts_with("13 (t12-112 13 calls, t11-111 12 calls, "),
        "{s}"
    );
    assert!(s.contains("t3-103 4 calls"), "{s}");
    assert!(!s.contains("t2-102"), "{s}");
    assert!(s.ends_with(", and 3 other threads, 6 calls)"), "{s}");
    // Up to one more than the limit, every thread is named.
    let s = threads_summary(&meta, &all[..11]);
    assert!(
        s.contains("t0-100 1 calls") && !s.contains("other threads"),
        "{s}"
    );
}
