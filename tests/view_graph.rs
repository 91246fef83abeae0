//! The function-graph view through the public API: files read back, damaged
//! files, filters.

use fgtrace::trace::{flags, Call, Event, TraceBuilder, TraceError, TraceMeta, TraceReader};
use fgtrace::view::TraceViews;
use fgtrace::view::{write_graph, GraphOptions, ThreadSel};

#[path = "support/traces.rs"]
mod traces;
use traces::call;

fn meta() -> TraceMeta {
    traces::meta(&["root", "leaf", "mid"], &[(10, "main"), (11, "io")])
}

fn body(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn a_damaged_file_renders_up_to_the_damage_then_errors() {
    // root { 20_000 leaves }: three chunks of up to 8192 events.
    let mut b = TraceBuilder::new(meta());
    b.push(call(0, 0, 0, 0, 100_000_000));
    for i in 0..20_000u64 {
        b.push(call(0, 1, 1, 1_000 + i * 4_000, 1_500));
    }
    let trace = b.finish();
    let mut bytes = Vec::new();
    trace.write_to(&mut bytes).unwrap();
    // Cut inside the last chunk: the first two (8192 events each) stay readable.
    let cut = &bytes[..bytes.len() - 200];
    let reader = TraceReader::new(cut).unwrap();
    let meta = reader.meta().clone();
    let mut out = Vec::new();
    let err = write_graph(&meta, reader.events(), &GraphOptions::default(), &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            TraceError::Corrupt { .. } | TraceError::Truncated { .. }
        ),
        "{err}"
    );
    let text = String::from_utf8(out).unwrap();
    let lines = body(&text);
    assert_eq!(lines.first(), Some(&" 10)               |  root() {"));
    assert_eq!(
        lines.iter().filter(|l| l.ends_with("leaf();")).count(),
        2 * 8192 - 1
    );
    assert_eq!(
        lines.last(),
        Some(&" 10) * 100000.0 us |  }"),
        "the open root is closed with its known duration"
    );
}

#[test]
fn thresh_prints_exit_lines_in_exit_order_like_tracing_thresh() {
    let mut b = TraceBuilder::new(meta());
    b.push(call(0, 0, 0, 0, 50_000));
    b.push(call(0, 2, 1, 1_000, 30_000));
    b.push(call(0, 1, 2, 2_000, 20_000));
    b.push(call(0, 1, 2, 25_000, 1_000));
    b.push(call(0, 1, 1, 40_000, 9_999));
    let trace = b.finish();
    let mut out = Vec::new();
    trace
        .write_graph(
            &GraphOptions {
                thresh_ns: 10_000,
                ..Default::default()
            },
            &mut out,
        )
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        body(&text),
        [
            " 10) + 20.000 us   |      } /* leaf */",
            " 10) + 30.000 us   |    } /* mid */",
            " 10) + 50.000 us   |  } /* root */",
        ]
    );
}

#[test]
fn thread_filter_by_name_and_depth_limit() {
    let mut b = TraceBuilder::new(meta());
    b.push(call(0, 0, 0, 0, 50_000));
    b.push(call(0, 1, 1, 1_000, 2_000));
    b.push(call(1, 2, 0, 500, 7_000));
    b.push(call(1, 1, 1, 600, 1_000));
    let trace = b.finish();
    let opts = GraphOptions {
        threads: vec!["io".parse::<ThreadSel>().unwrap()],
        max_depth: 1,
        ..Default::default()
    };
    let mut out = Vec::new();
    trace.write_graph(&opts, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(body(&text), [" 11)   7.000 us    |  mid();"]);
    // Unfiltered, both threads appear with a context-switch block between them.
    let mut out = Vec::new();
    trace
        .write_graph(&GraphOptions::default(), &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(" ------------------------------------------\n"),
        "{text}"
    );
    assert_eq!(
        body(&text).iter().filter(|l| l.contains("leaf();")).count(),
        2
    );
}

#[test]
fn has_children_flag_decides_leaf_or_nested() {
    // A hand-made stream (no builder): the flag alone tells `f() {` from `f();`.
    let m = meta();
    let events = vec![
        Ok(Event::Call(Call {
            thread: 0,
            site: 0,
            depth: 0,
            start_ns: 0,
            dur_ns: 5_000,
            flags: flags::HAS_CHILDREN,
        })),
        Ok(Event::Call(Call {
            thread: 0,
            site: 1,
            depth: 1,
            start_ns: 100,
            dur_ns: 1_000,
            flags: 0,
        })),
    ];
    let mut out = Vec::new();
    write_graph(&m, events, &GraphOptions::default(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        body(&text),
        [
            " 10)               |  root() {",
            " 10)   1.000 us    |    leaf();",
            " 10)   5.000 us    |  }"
        ]
    );
}
