use super::*;

/// A thread that exited between the scan and the open: `register`
/// fails with ESRCH, keeps no buffer, and prints no POSIX-timer
/// fallback warning (perf_event was not refused).
#[test]
fn registering_an_exited_thread_leaks_nothing_and_warns_nothing() {
    let tid = std::thread::spawn(own_tid).join().unwrap();
    while alive(tid) {
        std::thread::yield_now();
    }
    signal::install().unwrap();
    for sampling in [Sampling::timer(1000), Sampling::wall(1000)] {
        let mut st = State {
            sampling,
            ..State::empty()
        };
        let before = LIVE_BUFS.load(SeqCst);
        let e = st.register(tid, None).expect_err("the thread is gone");
        assert!(esrch(&e) || e.raw_os_error() == Some(libc::EINVAL), "{e}");
        assert_eq!(LIVE_BUFS.load(SeqCst), before, "a buffer leaked");
        assert!(
            !st.warned_fallback,
            "fallback warning for a thread that exited"
        );
        assert!(st.threads.is_empty());
    }
}
