use super::*;

#[test]
fn timer_paths_parse_and_describe_alike() {
    let s = Sampling::parse("timer-signal:2000").unwrap();
    assert_eq!(
        (s.source, s.backend, s.rate),
        (SampleSource::Timer, Backend::Signal, 2000)
    );
    assert_eq!(s.describe(), "timer@2000Hz");
    let s = Sampling::parse("timer-ring").unwrap();
    assert_eq!((s.source, s.backend), (SampleSource::Timer, Backend::Ring));
    assert_eq!(Sampling::parse("timer").unwrap().backend, Backend::Auto);
    let e = Sampling::parse("timer-sig").unwrap_err();
    assert!(e.contains("timer-signal, timer-ring"), "{e}");
}

#[cfg(target_os = "linux")]
#[test]
fn the_trace_says_which_path_sampled_and_why() {
    let p = running::Paths {
        ring: 3,
        ..Default::default()
    };
    assert_eq!(
        p.describe(SampleSource::Timer).as_deref(),
        Some("perf ring (kernel call chains; shadow depth and cut joined from the trace)")
    );
    let p = running::Paths {
        signal: 2,
        ring_refused: Some("perf_event_open(cpu-clock) failed: EACCES".into()),
        ..Default::default()
    };
    assert_eq!(
        p.describe(SampleSource::Timer).as_deref(),
        Some(
            "signal (frame-pointer walk in the handler); \
             perf ring refused: perf_event_open(cpu-clock) failed: EACCES"
        )
    );
    let p = running::Paths {
        ring: 1,
        signal: 1,
        ..Default::default()
    };
    let d = p.describe(SampleSource::Timer).unwrap();
    assert!(d.contains("on 1 of 2 threads; signal"), "{d}");
    assert_eq!(
        running::Paths::default().describe(SampleSource::Timer),
        None
    );
}
