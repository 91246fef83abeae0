// A program under control for the control tests (`tests/control.rs`,
// `cli/tests/control.rs`): the test binary runs itself again as the target
// (or as an intruder of another uid), through an ignored test that does
// nothing unless `FGTRACE_TEST_ROLE` names a role.
//
// Included with `#[path = ".../support/control.rs"] mod control_support;`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const ROLE: &str = "FGTRACE_TEST_ROLE";
/// The ignored test that runs a role (each including test file has one).
pub const ENTRY: &str = "zz_child_process";
/// The file the target counts its rounds in ([`Progress`]).
pub const PROGRESS_ENV: &str = "FGTRACE_TEST_PROGRESS";
/// How long a test waits for the target to get somewhere: generous, since
/// a loaded machine may give it little CPU; a broken feature still fails.
pub const PATIENCE: Duration = Duration::from_secs(60);

#[fgtrace::traced]
pub fn checksum(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ b as u32).wrapping_mul(0x0100_0193)
    })
}

#[fgtrace::traced]
pub fn parse(line: &str) -> u32 {
    line.split(' ')
        .take(4)
        .map(|p| checksum(p.as_bytes()))
        .fold(0, u32::wrapping_add)
}

/// One round: 1 tick, 3 parse, 12 checksum.
#[fgtrace::traced]
pub fn tick(round: u64) -> u32 {
    (0..3)
        .map(|i| {
            parse(&format!(
                "GET /item/{} HTTP/1.1 {}",
                round * 3 + i,
                round % 7
            ))
        })
        .fold(0, u32::wrapping_add)
}

/// Set when stdin says `panic`: the main thread then panics in [`explode`].
static PANIC: AtomicBool = AtomicBool::new(false);

#[fgtrace::traced]
pub fn explode(round: u64) -> u32 {
    panic!("target: asked to panic at round {round}");
}

/// The rounds each of the target's two threads (main, worker) has done,
/// in a file both the target and the test map (`FGTRACE_TEST_PROGRESS`):
/// the test reads the counts as they are now, so it can wait for the
/// workload to make progress instead of sleeping for a while and hoping.
pub struct Progress {
    map: *mut AtomicU64,
}

// SAFETY: the mapping is only accessed through atomics.
unsafe impl Send for Progress {}
unsafe impl Sync for Progress {}

const PROGRESS_LEN: usize = 4096;

impl Progress {
    /// Maps `path` (created, zeroed, if `create`).
    pub fn map(path: &Path, create: bool) -> Progress {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(path)
            .unwrap_or_else(|e| panic!("progress file {}: {e}", path.display()));
        f.set_len(PROGRESS_LEN as u64).unwrap();
        // SAFETY: a shared mapping of a file of that length; it stays valid
        // after `f` is closed, until `munmap` in `drop`.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PROGRESS_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        Progress {
            map: p as *mut AtomicU64,
        }
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < 2);
        // SAFETY: the page holds far more than two aligned u64s.
        unsafe { &*self.map.add(i) }
    }

    /// Rounds done by (main, worker).
    pub fn rounds(&self) -> [u64; 2] {
        [0, 1].map(|i| self.slot(i).load(Ordering::Acquire))
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this length.
        unsafe { libc::munmap(self.map as *mut libc::c_void, PROGRESS_LEN) };
    }
}

/// `rounds`: how many rounds count (are summed and printed); `hold`: then
/// go on working, uncounted, until `stop`.
fn work(
    name: &str,
    rounds: Option<u64>,
    hold: bool,
    stop: &AtomicBool,
    progress: Option<&Progress>,
) -> u32 {
    let mut sum = 0u32;
    let mut round = 0u64;
    let slot = progress.map(|p| p.slot(usize::from(name != "main")));
    loop {
        let counted = rounds.is_none_or(|n| round < n);
        let go = match rounds {
            Some(_) => counted || (hold && !stop.load(Ordering::Relaxed)),
            None => !stop.load(Ordering::Relaxed),
        };
        if !go {
            break;
        }
        if name == "main" && PANIC.load(Ordering::Relaxed) {
            sum = sum.wrapping_add(explode(round));
        }
        let v = tick(round);
        if counted {
            sum = sum.wrapping_add(v);
        }
        round += 1;
        if let Some(s) = slot {
            s.store(round, Ordering::Release);
        }
        if counted && rounds.is_some() && round % 500 == 0 {
            println!("target: {name} round {round} sum {sum:08x}");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    sum
}

/// The target: main and `worker` call `tick` until `FGTRACE_TEST_ROUNDS`
/// rounds are done, or (without it) until a line arrives on stdin. With
/// `FGTRACE_TEST_HOLD` as well, they go on after those rounds (printing
/// nothing more) until the line arrives, so that a test that needs the
/// workload running is not raced by its end.
pub fn run_target() {
    if std::env::var_os("FGTRACE_TEST_FORK").is_some() {
        fork_a_child_that_exits();
    }
    let rounds: Option<u64> = std::env::var("FGTRACE_TEST_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok());
    let hold = std::env::var_os("FGTRACE_TEST_HOLD").is_some();
    let stop = Arc::new(AtomicBool::new(false));
    if rounds.is_none() || hold {
        let s = stop.clone();
        std::thread::spawn(move || {
            let mut l = String::new();
            let _ = std::io::stdin().read_line(&mut l);
            if l.trim() == "panic" {
                PANIC.store(true, Ordering::Relaxed);
                return;
            }
            s.store(true, Ordering::Relaxed);
        });
    }
    // The program's own stream-mode session (`FGTRACE_TEST_OWN_SESSION`),
    // stopped when the work is done.
    let own = std::env::var_os("FGTRACE_TEST_OWN_SESSION")
        .map(|_| fgtrace::Session::start(fgtrace::Config::builtin()).expect("own session"));
    let progress =
        std::env::var_os(PROGRESS_ENV).map(|p| Arc::new(Progress::map(Path::new(&p), false)));
    let s = stop.clone();
    let p = progress.clone();
    let worker = std::thread::Builder::new()
        .name("worker".into())
        .spawn(move || work("worker", rounds, hold, &s, p.as_deref()))
        .unwrap();
    let a = work("main", rounds, hold, &stop, progress.as_deref());
    let b = worker.join().unwrap();
    if let Some(own) = own {
        let t = own.stop().expect("own session stops");
        println!("target: own session {} calls", t.meta().total_calls());
    }
    if rounds.is_some() {
        println!("target: done {:08x}", a ^ b);
    } else {
        println!("target: stopped");
    }
}

/// A private directory to serve as `$XDG_RUNTIME_DIR` for one test,
/// removed when dropped.
pub struct RuntimeDir(PathBuf);

impl std::ops::Deref for RuntimeDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for RuntimeDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn runtime_dir(test: &str) -> RuntimeDir {
    let d = std::env::temp_dir().join(format!("fgtrace-ctl-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&d)
        .unwrap();
    RuntimeDir(d)
}

/// A running target.
pub struct Target {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub socket: PathBuf,
    /// The rounds its threads have done.
    pub progress: Progress,
}

impl Target {
    /// Starts the target with `FGTRACE_CONTROL=control` and the runtime dir
    /// `xdg`, and (unless `wait` is false) waits for its socket and for both
    /// of its threads to be at work.
    pub fn start(xdg: &Path, control: &str, rounds: Option<u64>, wait: bool) -> Target {
        Target::start_with(xdg, control, rounds, wait, &[])
    }

    /// [`Target::start`] with more variables set.
    pub fn start_with(
        xdg: &Path,
        control: &str,
        rounds: Option<u64>,
        wait: bool,
        vars: &[(&str, &str)],
    ) -> Target {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.envs(vars.iter().copied());
        cmd.args([
            "--ignored",
            "--exact",
            ENTRY,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "target")
        .env("FGTRACE_CONTROL", control)
        .env("XDG_RUNTIME_DIR", xdg)
        .env_remove("FGTRACE_MODE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        match rounds {
            Some(r) => cmd.env("FGTRACE_TEST_ROUNDS", r.to_string()),
            None => cmd.env_remove("FGTRACE_TEST_ROUNDS"),
        };
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let progress_path = xdg.join(format!("progress-{}", SEQ.fetch_add(1, Ordering::Relaxed)));
        let progress = Progress::map(&progress_path, true);
        cmd.env(PROGRESS_ENV, &progress_path);
        let mut child = cmd.spawn().expect("start the target");
        let stdin = child.stdin.take();
        let socket = xdg.join("fgtrace").join(format!("{}.sock", child.id()));
        let t = Target {
            child,
            stdin,
            socket,
            progress,
        };
        if wait {
            t.wait_until("its socket to appear", |t| t.socket.exists());
            t.wait_rounds([0, 0], 1);
        }
        t
    }

    /// Waits (polling, up to [`PATIENCE`]) until `ready`, failing with
    /// `what` if it never is or if the target exits first.
    pub fn wait_until(&self, what: &str, mut ready: impl FnMut(&Target) -> bool) {
        let until = Instant::now() + PATIENCE;
        while !ready(self) {
            assert!(
                !self.exited(),
                "the target exited while the test waited for {what}"
            );
            assert!(
                Instant::now() < until,
                "waited {} s for {what} (rounds done: {:?})",
                PATIENCE.as_secs(),
                self.progress.rounds()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until each of the target's threads has done `n` rounds more
    /// than `since` (from [`Progress::rounds`]); returns the rounds then.
    pub fn wait_rounds(&self, since: [u64; 2], n: u64) -> [u64; 2] {
        self.wait_until(&format!("{n} more rounds in each thread"), |t| {
            let r = t.progress.rounds();
            r[0] >= since[0] + n && r[1] >= since[1] + n
        });
        self.progress.rounds()
    }

    /// Whether the target has exited (it is not reaped: `finish` still can).
    pub fn exited(&self) -> bool {
        // SAFETY: waitid on our own child, WNOWAIT leaves it to be waited for.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r == 0 && info.si_pid() != 0
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks the target to finish (stdin), waits; (success, stdout, stderr).
    pub fn finish(mut self) -> (bool, String, String) {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "exit");
        }
        let mut out = String::new();
        let mut err = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let st = self.child.wait().unwrap();
        (st.success(), out, err)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The lines the target printed itself (libtest's own output left out: its
/// `test zz_child_process ... ` may start the first one).
pub fn target_lines(stdout: &str) -> Vec<String> {
    BufReader::new(stdout.as_bytes())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.find("target: ").map(|i| l[i..].to_string()))
        .collect()
}

/// Calls per function name in a trace.
pub fn counts(t: &fgtrace::Trace) -> std::collections::HashMap<String, u64> {
    let mut m = std::collections::HashMap::new();
    for c in t.calls() {
        *m.entry(t.meta().site_name(c.site).to_string()).or_insert(0) += 1;
    }
    m
}

/// Checks that the counts are in the proportion 1 : 3 : 12 (a round open
/// at the start or the end of the recording may be cut, per thread).
pub fn assert_in_proportion(c: &std::collections::HashMap<String, u64>) {
    let get = |n: &str| *c.get(n).unwrap_or(&0) as i64;
    let (t, p, k) = (get("tick"), get("parse"), get("checksum"));
    assert!(t > 20, "too few ticks recorded: {c:?}");
    assert!((p - 3 * t).abs() <= 6 * 2, "parse is not 3 x tick: {c:?}");
    assert!(
        (k - 4 * p).abs() <= 4 * 2 * 2,
        "checksum is not 4 x parse: {c:?}"
    );
}

/// Once the endpoint listens: forks a child that calls `exit` at once (and
/// so runs the `atexit` handlers it inherited).
fn fork_a_child_that_exits() {
    let dir = Path::new(&std::env::var_os("XDG_RUNTIME_DIR").unwrap()).join("fgtrace");
    let socket = dir.join(format!("{}.sock", std::process::id()));
    while !socket.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: the child only calls exit.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            libc::exit(0);
        }
        assert!(pid > 0);
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
    }
    println!("target: forked");
}
