//! The sampler's signal handler against what a real process does around it:
//! code running on a stack that is not its thread's (a coroutine) with a
//! garbage frame pointer into memory unmapped since the last look at
//! `/proc/self/maps`; another library's `SIGPROF` timer carrying its own
//! pointer, and its own handler; blocking system calls under the wall
//! sampler; threads that come and go.
//!
//! Tests that could crash the process run their body in a child process (this
//! test binary again, one test, `FGTRACE_CHILD` set), so a crash is a failed
//! test with the signal named, not a dead test run.
#![cfg(target_os = "linux")]

use fgtrace::sampler::{Backend, Sampling};
use fgtrace::{Config, Session};
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `name` alone in a child process where `in_child` is true; returns
/// its stdout, panicking (with the signal or exit code and the output) if it
/// did not exit successfully.
fn in_child(name: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("FGTRACE_CHILD", name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.success(),
        "{name} in a child process: {} (signal {:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status,
        out.status.signal()
    );
    assert!(
        stdout.contains(&format!("CHILD OK {name}")),
        "{name}: the child did not finish its checks\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

fn is_child(name: &str) -> bool {
    std::env::var("FGTRACE_CHILD").is_ok_and(|v| v == name)
}

fn gettid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes our timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Busy for `ms` of this thread's CPU time (however loaded the machine is;
/// at most 20 s of wall time).
#[inline(never)]
fn spin(ms: u64) -> u64 {
    let (t, c) = (Instant::now(), thread_cpu());
    let mut x = 1u64;
    while thread_cpu() - c < Duration::from_millis(ms) && t.elapsed() < Duration::from_secs(20) {
        for i in 0..10_000u64 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

// ----------------------------------------- another library's SIGPROF timer

static FOREIGN: AtomicU64 = AtomicU64::new(0);
static FOREIGN_VALUE_OK: AtomicU64 = AtomicU64::new(0);
static FOREIGN_PAGE: AtomicU64 = AtomicU64::new(0);

extern "C" fn foreign_handler(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    FOREIGN.fetch_add(1, Relaxed);
    // SAFETY: the kernel's siginfo; a timer's value is the library's pointer.
    let v = unsafe { (*info).si_value().sival_ptr } as u64;
    if v == FOREIGN_PAGE.load(Relaxed) {
        FOREIGN_VALUE_OK.fetch_add(1, Relaxed);
    }
}

/// Another library installed a SIGPROF handler and runs a SIGPROF POSIX
/// timer whose sigevent carries a pointer to its own read-only data. fgtrace
/// samples at the same time: its handler must neither write through that
/// pointer (it used to, and the process died with SIGSEGV) nor swallow the
/// signal: every foreign signal reaches the library's handler, with its
/// value, while fgtrace's own samples keep coming.
#[test]
fn a_foreign_sigprof_timer_reaches_its_own_handler_and_corrupts_nothing() {
    const NAME: &str = "a_foreign_sigprof_timer_reaches_its_own_handler_and_corrupts_nothing";
    if !is_child(NAME) {
        let _s = serial();
        let out = in_child(NAME);
        println!("{out}");
        return;
    }
    // SAFETY: test set-up with plain libc calls.
    unsafe {
        // The library's handler, installed first.
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = foreign_handler as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()), 0);
        // Its data: one read-only page of 0xff bytes (a buffer "active" flag,
        // counts and pointers all set, and nothing may write there).
        let page = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(page, libc::MAP_FAILED);
        std::ptr::write_bytes(page as *mut u8, 0xff, 4096);
        assert_eq!(libc::mprotect(page, 4096, libc::PROT_READ), 0);
        FOREIGN_PAGE.store(page as u64, Relaxed);

        // The signal path's handler, and `timer`'s default (the perf ring
        // where the kernel allows it): neither disturbs the library.
        let samplings = [
            Sampling::timer(2000).backend(Backend::Signal),
            Sampling::timer(2000),
            Sampling::wall(2000),
        ];
        let rounds = samplings.len() as u64;
        for sampling in samplings {
            let before = FOREIGN.load(Relaxed);
            let session = Session::start(Config::builtin().sampling(sampling.clone())).unwrap();
            // The library's timer on this thread, 1 kHz of CPU time.
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = libc::SIGPROF;
            ev.sigev_value = libc::sigval { sival_ptr: page };
            ev.sigev_notify_thread_id = gettid();
            let mut t: libc::timer_t = std::mem::zeroed();
            assert_eq!(
                libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut ev, &mut t),
                0
            );
            let ms = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            let spec = libc::itimerspec {
                it_interval: ms,
                it_value: ms,
            };
            assert_eq!(libc::timer_settime(t, 0, &spec, std::ptr::null_mut()), 0);
            spin(300);
            // A plain `kill`-style SIGPROF (si_code SI_TKILL) is foreign too.
            libc::syscall(libc::SYS_tgkill, libc::getpid(), gettid(), libc::SIGPROF);
            libc::timer_delete(t);
            let trace = session.stop().unwrap();
            let ours = trace.samples().count();
            let theirs = FOREIGN.load(Relaxed) - before;
            println!("{sampling}: {ours} fgtrace samples, {theirs} foreign signals chained");
            assert!(
                theirs >= 10,
                "only {theirs} foreign signals reached their handler"
            );
            assert!(ours >= 100, "only {ours} samples of fgtrace's own");
        }
        assert_eq!(
            // One `tgkill` per round carries no value.
            FOREIGN_VALUE_OK.load(Relaxed) + rounds,
            FOREIGN.load(Relaxed),
            "every foreign timer signal arrived with the library's own value"
        );
        let bytes = std::slice::from_raw_parts(page as *const u8, 4096);
        assert!(bytes.iter().all(|&b| b == 0xff));
    }
    println!("CHILD OK {NAME}");
}

// ---------------------------------------- a stack that is not the thread's

/// Spins on `stack_top` (a stack that is not the thread's) with the frame
/// pointer at `bad_fp`, for about `iters` loop turns; no calls, no memory use.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn spin_on_other_stack(stack_top: u64, bad_fp: u64, iters: u64) {
    // SAFETY: saves rsp/rbp, switches, loops, restores; touches no memory
    // but the push/pop of rbp on the thread's own stack.
    unsafe {
        std::arch::asm!(
            "push rbp",
            "mov r12, rsp",
            "mov rsp, {top}",
            "mov rbp, {fp}",
            "2:",
            "dec {n}",
            "jnz 2b",
            "mov rsp, r12",
            "pop rbp",
            top = in(reg) stack_top,
            fp = in(reg) bad_fp,
            n = inout(reg) iters => _,
            out("r12") _,
        );
    }
}

/// Code on a stack that is not its thread's (a coroutine), with a frame
/// pointer into memory that was part of the same mapping when the sampler
/// last read `/proc/self/maps` and has been unmapped since. The handler used
/// to bound its reads by that stale mapping and died with SIGSEGV; now it
/// reads only the thread's own stack (`pthread_getattr_np`), so such a
/// sample is the PC alone.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_garbage_frame_pointer_off_the_threads_stack_is_never_read() {
    const NAME: &str = "a_garbage_frame_pointer_off_the_threads_stack_is_never_read";
    if !is_child(NAME) {
        let _s = serial();
        println!("{}", in_child(NAME));
        return;
    }
    const MB: usize = 1 << 20;
    // SAFETY: test set-up with plain libc calls.
    let (coro_top, gone) = unsafe {
        // One mapping: a 1 MiB "coroutine stack", then 1 MiB of other memory.
        let m = libc::mmap(
            std::ptr::null_mut(),
            2 * MB,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(m, libc::MAP_FAILED);
        let base = m as u64;
        (base + MB as u64 - 64, base + MB as u64)
    };
    // The signal handler's walk (the perf ring's is the kernel's).
    let sampling = Sampling::timer(5000).backend(Backend::Signal);
    let session = Session::start(Config::builtin().sampling(sampling)).unwrap();
    std::thread::sleep(Duration::from_millis(50)); // the sampler has read the maps
                                                   // SAFETY: unmapping the upper half of our own mapping.
    assert_eq!(unsafe { libc::munmap(gone as *mut _, MB) }, 0);
    let (t, c) = (Instant::now(), thread_cpu());
    while thread_cpu() - c < Duration::from_millis(300) && t.elapsed() < Duration::from_secs(20) {
        spin_on_other_stack(coro_top, gone + 4096, 20_000_000);
    }
    let trace = session.stop().unwrap();
    let me = gettid() as u32;
    let m = trace.meta();
    let th = m.threads.iter().position(|t| t.tid == me).unwrap() as u32;
    let mine: Vec<_> = trace.samples().filter(|s| s.thread == th).collect();
    let lone = mine.iter().filter(|s| s.frames.len() == 1).count();
    println!(
        "{} samples of this thread, {lone} of them the PC alone",
        mine.len()
    );
    assert!(mine.len() >= 200, "only {} samples", mine.len());
    assert!(
        lone * 2 > mine.len(),
        "samples on the other stack are the PC alone ({lone} of {})",
        mine.len()
    );
    println!("CHILD OK {NAME}");
}

// --------------------------------------------------- blocking system calls

/// The wall sampler signals a thread blocked in `read(2)` on a pipe many
/// times: with `SA_RESTART` the read resumes and returns the data, never
/// `EINTR`, and the blocked thread is still sampled (off-CPU time).
#[test]
fn wall_sampling_does_not_interrupt_restartable_blocking_calls() {
    let _s = serial();
    let mut fds = [0; 2];
    // SAFETY: a pipe of our own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (r, w) = (fds[0], fds[1]);
    let session = Session::start(Config::builtin().sampling(Sampling::wall(2000))).unwrap();
    let reader = std::thread::Builder::new()
        .name("blocked-reader".into())
        .spawn(move || {
            let tid = gettid() as u32;
            let mut results = Vec::new();
            for _ in 0..3 {
                let mut b = [0u8; 1];
                // SAFETY: reading into our own byte.
                let n = unsafe { libc::read(r, b.as_mut_ptr() as *mut _, 1) };
                let e = std::io::Error::last_os_error();
                results.push((n, if n < 0 { e.raw_os_error() } else { None }, b[0]));
            }
            (tid, results)
        })
        .unwrap();
    for i in 1..=3u8 {
        std::thread::sleep(Duration::from_millis(150));
        // SAFETY: writing one byte to our own pipe.
        assert_eq!(unsafe { libc::write(w, [i].as_ptr() as *const _, 1) }, 1);
    }
    let (tid, results) = reader.join().unwrap();
    let trace = session.stop().unwrap();
    // SAFETY: closing our own pipe.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
    assert_eq!(
        results,
        vec![(1, None, 1), (1, None, 2), (1, None, 3)],
        "each read returned its byte, none failed with EINTR ({})",
        libc::EINTR
    );
    let m = trace.meta();
    let th = m
        .threads
        .iter()
        .position(|t| t.tid == tid)
        .expect("reader sampled") as u32;
    let n = trace.samples().filter(|s| s.thread == th).count();
    println!("blocked reader: {n} wall samples while blocked in read(2)");
    assert!(
        n >= 300,
        "the blocked thread was sampled only {n} times in 450 ms at 2 kHz"
    );
}

// ------------------------------------------------ threads that come and go

/// Each sampled thread's buffer (about 4 MiB) is freed when the thread
/// exits, and every buffer is freed at stop; threads that came and went are
/// still in the trace with their samples.
#[test]
fn sample_buffers_are_freed_when_threads_exit_and_at_stop() {
    let _s = serial();
    // The signal paths, which hold per-thread buffers.
    for sampling in [
        Sampling::timer(1000).backend(Backend::Signal),
        Sampling::wall(1000),
    ] {
        let session = Session::start(Config::builtin().sampling(sampling.clone())).unwrap();
        let mut tids = Vec::new();
        for round in 0..4 {
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    std::thread::Builder::new()
                        .name(format!("short-{round}-{i}"))
                        .spawn(|| {
                            // Until the sampler's scan found this thread.
                            let me = gettid() as u32;
                            let t = Instant::now();
                            while !fgtrace::sampler::buffered_threads().contains(&me)
                                && t.elapsed() < Duration::from_secs(2)
                            {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            spin(30);
                            me
                        })
                        .unwrap()
                })
                .collect();
            tids.extend(hs.into_iter().map(|h| h.join().unwrap()));
        }
        // The sampler notices exits on its next scan (every 20 ms at most).
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut left;
        loop {
            let held = fgtrace::sampler::buffered_threads();
            left = tids.iter().filter(|t| held.contains(t)).count();
            if left == 0 || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(left, 0, "{sampling}: buffers of exited threads still held");
        let trace = session.stop().unwrap();
        assert_eq!(
            fgtrace::sampler::live_buffers(),
            0,
            "{sampling}: buffers left after stop"
        );
        let m = trace.meta();
        let sampled = tids
            .iter()
            .filter(|&&tid| {
                m.threads
                    .iter()
                    .position(|t| t.tid == tid)
                    .is_some_and(|th| trace.samples().any(|s| s.thread == th as u32))
            })
            .count();
        println!(
            "{sampling}: {sampled} of {} short threads in the trace with samples",
            tids.len()
        );
        assert_eq!(
            sampled,
            tids.len(),
            "{sampling}: samples of exited threads kept"
        );
    }
}
