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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const ROLE: &str = "FGTRACE_TEST_ROLE";
/// The ignored test that runs a role (each including test file has one).
pub const ENTRY: &str = "zz_child_process";

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

fn work(name: &str, rounds: Option<u64>, stop: &AtomicBool) -> u32 {
    let mut sum = 0u32;
    let mut round = 0u64;
    while rounds.is_none_or(|n| round < n) && !stop.load(Ordering::Relaxed) {
        if name == "main" && PANIC.load(Ordering::Relaxed) {
            sum = sum.wrapping_add(explode(round));
        }
        sum = sum.wrapping_add(tick(round));
        round += 1;
        if rounds.is_some() && round % 500 == 0 {
            println!("target: {name} round {round} sum {sum:08x}");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    sum
}

/// The target: main and `worker` call `tick` until `FGTRACE_TEST_ROUNDS`
/// rounds are done, or (without it) until a line arrives on stdin.
pub fn run_target() {
    if std::env::var_os("FGTRACE_TEST_FORK").is_some() {
        fork_a_child_that_exits();
    }
    let rounds: Option<u64> = std::env::var("FGTRACE_TEST_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok());
    let stop = Arc::new(AtomicBool::new(false));
    if rounds.is_none() {
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
    let s = stop.clone();
    let worker = std::thread::Builder::new()
        .name("worker".into())
        .spawn(move || work("worker", rounds, &s))
        .unwrap();
    let a = work("main", rounds, &stop);
    let b = worker.join().unwrap();
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
}

impl Target {
    /// Starts the target with `FGTRACE_CONTROL=control` and the runtime dir
    /// `xdg`, and waits for its socket (unless `wait` is false).
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
        let mut child = cmd.spawn().expect("start the target");
        let stdin = child.stdin.take();
        let socket = xdg.join("fgtrace").join(format!("{}.sock", child.id()));
        let t = Target {
            child,
            stdin,
            socket,
        };
        if wait {
            let until = Instant::now() + Duration::from_secs(20);
            while !t.socket.exists() {
                assert!(
                    Instant::now() < until,
                    "no socket at {}",
                    t.socket.display()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        t
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
