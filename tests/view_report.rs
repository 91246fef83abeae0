//! The report through the public API: numbers, filters, damaged input.

use fgtrace::trace::{Event, LossKind, Lost, TraceBuilder, TraceError, TraceMeta};
use fgtrace::view::TraceViews;
use fgtrace::view::{write_report, Column, ReportOptions, ReportStyle, ThreadSel};

#[path = "support/traces.rs"]
mod traces;
use traces::call;

fn meta() -> TraceMeta {
    let mut m = traces::meta(&["handle", "parse", "respond"], &[(10, "main"), (11, "io")]);
    m.duration_ns = 1_000_000_000;
    m.threads[1].lost = 3;
    m
}

#[test]
fn self_time_of_a_parent_with_two_children() {
    let mut b = TraceBuilder::new(meta());
    // handle 90 us { parse 20 us, respond 40 us } on main, and the same shape on io.
    for (t, t0) in [(0, 0), (1, 5_000)] {
        b.push(call(t, 0, 0, t0, 90_000));
        b.push(call(t, 1, 1, t0 + 1_000, 20_000));
        b.push(call(t, 2, 1, t0 + 30_000, 40_000));
    }
    b.push(Event::Lost(Lost {
        thread: 1,
        depth: 0,
        at_ns: 200_000,
        count: 3,
        kind: LossKind::Overwritten,
    }));
    let trace = b.finish();

    let r = trace.report(&ReportOptions::default());
    let handle = r.functions.iter().find(|f| f.name == "handle").unwrap();
    assert_eq!(handle.calls, 2);
    assert_eq!(handle.total_ns, 2 * 90_000);
    assert_eq!(handle.self_ns, 2 * (90_000 - 20_000 - 40_000));
    assert_eq!(r.functions[0].name, "handle", "sorted by total");
    assert_eq!(r.calls, 6);
    assert_eq!(r.losses.len(), 1);
    assert_eq!(r.losses[0].lost, 3);

    let by_self = trace.report(&ReportOptions {
        sort_by: Column::SelfTime,
        ..Default::default()
    });
    assert_eq!(
        by_self
            .functions
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>(),
        ["respond", "handle", "parse"]
    );

    let main_only = trace.report(&ReportOptions {
        threads: vec![ThreadSel::Tid(10)],
        ..Default::default()
    });
    assert_eq!(main_only.calls, 3);
    assert!(main_only.losses.is_empty());

    let mut out = Vec::new();
    trace
        .write_report(&ReportOptions::default(), &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("# LOST 3 records on thread io-11\n"),
        "{text}"
    );
    assert!(text.contains(" 60.000 us "), "handle's self time: {text}");
}

#[test]
fn a_read_error_still_writes_the_report_of_what_was_read() {
    let m = meta();
    let events = vec![
        Ok(call(0, 1, 0, 0, 2_000)),
        Ok(call(0, 1, 0, 5_000, 4_000)),
        Err(TraceError::NotATrace),
    ];
    let mut out = Vec::new();
    let opts = ReportOptions {
        style: ReportStyle::Ftrace,
        ..Default::default()
    };
    let err = write_report(&m, events, &opts, &mut out).unwrap_err();
    assert!(matches!(err, TraceError::NotATrace));
    let text = String::from_utf8(out).unwrap();
    // avg 3 us, s^2 = ((1000)^2 + (1000)^2) / 1 ns^2 = 2 us^2.
    assert!(text.contains("  parse                                    2    6.000 us        3.000 us        2.000 us    \n"), "{text}");
    assert!(
        text.starts_with("# LOST 3 records on thread io-11\n"),
        "{text}"
    );
}
