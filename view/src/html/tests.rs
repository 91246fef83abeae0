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
