use super::*;
use crate::buffer::RawCall;

/// With an output file the collector keeps no records in memory: each
/// batch is encoded, written and dropped; without one it keeps the
/// encoded chunk (a few bytes per call), never the 16-byte records.
#[test]
fn the_collector_holds_encoded_chunks_in_memory_and_nothing_with_a_file() {
    let recs: Vec<RawCall> = (0..4096u64)
        .map(|i| RawCall::pack(1000 + i * 50, 1, 30, 0, false, buffer::kind::CALL))
        .collect();
    let who = |_| (7, "t".to_string());
    let mut g = Gathered::new(1000, None);
    g.add_records(0, &recs, &who);
    let kept: usize = g.threads[0].raw.iter().map(|c| c.payload.len()).sum();
    assert!(
        kept > 0 && kept <= 4 * recs.len(),
        "{kept} bytes for {} calls",
        recs.len()
    );
    assert_eq!(g.threads[0].enc.calls, 4096);

    let path = std::env::temp_dir().join(format!("fgtrace-collector-{}.fgt", std::process::id()));
    let cal = Calibration {
        origin: ClockPoint::now(),
        ticks_per_ns: 1.0,
    };
    let out = open_output(&path, &cal, &Config::builtin(), None).unwrap();
    let mut g = Gathered::new(1000, Some(out));
    for _ in 0..10 {
        g.add_records(0, &recs, &who);
    }
    assert!(g.threads[0].raw.is_empty());
    assert_eq!(g.threads[0].enc.calls, 40960);
    g.idle();
    let o = g.out.as_ref().unwrap();
    assert!(o.error.is_none());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), o.w.written);
    let _ = std::fs::remove_file(&path);
}

/// A collector thread that cannot be spawned leaves no session behind:
/// the next `start` works.
#[test]
fn a_failed_collector_spawn_leaves_no_session_running() {
    let failed = Session::start_with(Config::builtin(), |_, _, _, _| {
        Err(std::io::Error::other("no threads left"))
    });
    match failed {
        Err(Error::Collector(e)) => assert!(e.contains("no threads left"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("started without a collector"),
    }
    assert!(!control_word::session_is_on());
    let s = Session::start(Config::builtin()).expect("a later session starts");
    s.stop().unwrap();
}
