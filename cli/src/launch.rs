//! `fgtrace record -- COMMAND`: runs COMMAND with `FGTRACE_RECORD` set
//! (`fgtrace::launch`), so that every process of its tree that links
//! fgtrace writes its own trace from its start to its exit; then says what
//! each file holds and exits with COMMAND's status.

use fgtrace::control::Settings;
use fgtrace_trace::file::TraceReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// What to run and where its traces go.
pub struct Launch<'a> {
    pub command: &'a [String],
    pub settings: Settings,
    pub off_cpu: bool,
    /// One file per process in this directory.
    pub dir: Option<&'a Path>,
    /// The trace (the first process's, with several: the others beside it).
    pub output: Option<&'a Path>,
    /// `--max-size`: the most each recording writes (default: see
    /// [`budget_line`]).
    pub max_size: Option<&'a str>,
    /// `--on-full`: `stop` or `ring` at the budget.
    pub on_full: Option<&'a str>,
}

/// The size budget of the recordings in `dir` (`FGTRACE_MAX_SIZE`'s value)
/// and the line `record` starts with to say it.
pub(crate) fn budget_line(max_size: Option<&str>, dir: &Path) -> Result<(String, String), String> {
    use fgtrace::config::{default_max_size, parse_size, DEFAULT_MAX_SIZE_CAP};
    use fgtrace_trace::size_text;
    let (value, said) = match max_size {
        Some(s) => match parse_size(s).map_err(|e| format!("--max-size: {e}"))? {
            u64::MAX => (
                "unlimited".to_string(),
                "no size limit (--max-size unlimited)".into(),
            ),
            n => (
                n.to_string(),
                format!("at most {} in all (--max-size)", size_text(n)),
            ),
        },
        None => {
            let (n, why) = match default_max_size(dir) {
                Some((n, free)) => (
                    n,
                    format!(
                        "a quarter of the {} free there, at most {}",
                        size_text(free),
                        size_text(DEFAULT_MAX_SIZE_CAP)
                    ),
                ),
                None => (
                    DEFAULT_MAX_SIZE_CAP,
                    "the free space there is unknown".into(),
                ),
            };
            (
                n.to_string(),
                format!(
                    "at most {} in all ({why}; --max-size to change)",
                    size_text(n)
                ),
            )
        }
    };
    Ok((value, said))
}

/// The child, for the signal handler to pass SIGTERM and SIGHUP on.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn pass_on(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    // SIGINT from a terminal reaches the whole foreground process group,
    // the child included: it is not sent twice.
    if pid > 0 && sig != libc::SIGINT {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// This process outlives COMMAND to write the summary: it ignores Ctrl-C
/// (COMMAND gets it from the terminal) and passes SIGTERM and SIGHUP on.
/// Handlers, unlike ignored signals, are reset by `exec`: COMMAND starts
/// with the default actions.
fn outlive_child() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that only calls kill.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = pass_on as *const () as usize;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
}

/// The `FGTRACE_*` variables that carry `s` (checked already).
fn env_of(s: &Settings, off_cpu: bool) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    let mut put = |k, v: Option<String>| {
        if let Some(v) = v {
            env.push((k, v));
        }
    };
    let list = |v: &[String]| (!v.is_empty()).then(|| v.join(","));
    put(
        "FGTRACE_MODE",
        Some(s.mode.clone().unwrap_or("stream".into())),
    );
    put("FGTRACE_SAMPLE", s.sample.clone());
    put("FGTRACE_FILTER", list(&s.filter));
    put("FGTRACE_EXCLUDE", list(&s.exclude));
    put("FGTRACE_GRAPH_FUNCTION", list(&s.graph_function));
    put("FGTRACE_NOTRACE", list(&s.notrace));
    put("FGTRACE_DEPTH", s.depth.map(|d| d.to_string()));
    put("FGTRACE_THRESHOLD", s.threshold.clone());
    put("FGTRACE_AUTO_EXCLUDE", s.auto_exclude.clone());
    put(
        "FGTRACE_OFFCPU",
        Some(if off_cpu { "1" } else { "0" }.into()),
    );
    env
}

/// One trace a process wrote, and what it holds.
struct Written {
    path: PathBuf,
    start_unix_ns: u64,
    summary: String,
}

fn summarize(path: &Path) -> Written {
    match TraceReader::open(path) {
        Ok(r) => {
            let m = r.meta();
            let mut summary = format!(
                "{} (pid {}): {} calls of {} functions in {} threads, {} lost",
                Path::new(&m.program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                m.pid,
                m.total_calls(),
                m.sites.len(),
                m.threads.len(),
                m.total_lost()
            );
            if m.total_samples() > 0 {
                summary += &format!(", {} samples", m.total_samples());
            }
            if let Some(c) = &m.cut_short {
                summary += &format!("; cut short {}", c.describe());
            }
            if let Some(r) = fgtrace_trace::ring_text(m) {
                summary += &format!("; ring: {r}");
            }
            for w in &m.warnings {
                summary += &format!("; {w}");
            }
            Written {
                path: path.to_path_buf(),
                start_unix_ns: m.clock.start_unix_ns,
                summary,
            }
        }
        Err(e) => Written {
            path: path.to_path_buf(),
            start_unix_ns: u64::MAX,
            summary: format!("unreadable: {e}"),
        },
    }
}

/// The traces in `dir`, oldest session first.
fn traces_in(dir: &Path) -> Vec<Written> {
    let mut found: Vec<Written> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "fgt"))
        .map(|p| summarize(&p))
        .collect();
    found.sort_by(|a, b| (a.start_unix_ns, &a.path).cmp(&(b.start_unix_ns, &b.path)));
    found
}

/// Runs the command and returns its exit status as this process's
/// (128 + N when a signal N ended it, as shells do).
pub fn run(l: &Launch) -> Result<i32, Option<String>> {
    let (program, args) = l
        .command
        .split_first()
        .ok_or_else(|| Some("name the command to record after `--`".to_string()))?;
    // The settings are checked here, before anything runs.
    l.settings
        .config("stream")
        .map_err(|e| Some(format!("bad settings: {e}")))?;
    let (dir, temporary) = match (l.dir, l.output) {
        (Some(_), Some(_)) => return Err(Some("--dir and --output conflict".into())),
        (Some(d), None) => (d.to_path_buf(), false),
        (None, out) => {
            let out = out.unwrap_or(Path::new("fgtrace.fgt"));
            let parent = match out.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let d = parent.join(format!(".fgtrace-record-{}", std::process::id()));
            (d, true)
        }
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| Some(format!("cannot create {}: {e}", dir.display())))?;
    // The command may change directory (cargo runs tests in the package's).
    let dir = std::fs::canonicalize(&dir)
        .map_err(|e| Some(format!("cannot resolve {}: {e}", dir.display())))?;
    let before: Vec<PathBuf> = traces_in(&dir).into_iter().map(|w| w.path).collect();
    // The processes' shared budget is this run's: a fresh one, removed at
    // the end.
    let pool = dir.join(fgtrace::collector::POOL_FILE);
    let _ = std::fs::remove_file(&pool);
    let (max_size, said) = budget_line(l.max_size, &dir).map_err(|e| {
        if temporary {
            let _ = std::fs::remove_dir(&dir);
        }
        Some(e)
    })?;
    let ring = l.on_full == Some("ring");
    if ring {
        eprintln!(
            "fgtrace: recording `{program}`: {said}; each file keeps the run's end (--on-full ring), older calls are counted as overwritten"
        );
    } else {
        eprintln!("fgtrace: recording `{program}`: {said}; calls past it are counted as lost");
    }

    outlive_child();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env(fgtrace::launch::ENV, &dir)
        .env("FGTRACE_MAX_SIZE", max_size)
        .env("FGTRACE_ON_FULL", if ring { "ring" } else { "stop" });
    for (k, v) in env_of(&l.settings, l.off_cpu) {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| {
        if temporary {
            let _ = std::fs::remove_dir(&dir);
        }
        Some(format!("cannot run `{program}`: {e}"))
    })?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Some(format!("waiting for `{program}`: {e}"))),
        }
    };
    CHILD.store(0, Ordering::SeqCst);
    let _ = std::fs::remove_file(&pool);
    let code = {
        use std::os::unix::process::ExitStatusExt;
        status
            .code()
            .or_else(|| status.signal().map(|s| 128 + s))
            .unwrap_or(1)
    };

    let mut written: Vec<Written> = traces_in(&dir)
        .into_iter()
        .filter(|w| !before.contains(&w.path))
        .collect();
    if temporary {
        let out = l.output.unwrap_or(Path::new("fgtrace.fgt"));
        for (i, w) in written.iter_mut().enumerate() {
            // The first session's trace is the output; any others beside
            // it, named by their program and pid.
            let to = if i == 0 {
                out.to_path_buf()
            } else {
                let stem = out.file_stem().unwrap_or_default().to_string_lossy();
                let name = w.path.file_name().unwrap_or_default().to_string_lossy();
                out.with_file_name(format!("{stem}-{name}"))
            };
            if let Err(e) = std::fs::rename(&w.path, &to) {
                eprintln!(
                    "fgtrace: cannot move {} to {}: {e}",
                    w.path.display(),
                    to.display()
                );
            } else {
                // A ring's segment before goes with it.
                let beside = |p: &Path| {
                    let mut s = p.as_os_str().to_owned();
                    s.push(".prev");
                    PathBuf::from(s)
                };
                let prev = beside(&w.path);
                if prev.exists() {
                    if let Err(e) = std::fs::rename(&prev, beside(&to)) {
                        eprintln!("fgtrace: cannot move {}: {e}", prev.display());
                    }
                }
                w.path = to;
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
    let how = match status.code() {
        Some(c) => format!("exited with status {c}"),
        None => format!("was killed by signal {}", code - 128),
    };
    if written.is_empty() {
        eprintln!(
            "fgtrace: `{program}` {how} and wrote no trace: no process it ran links fgtrace \
             (a program is recorded when it depends on the `fgtrace` crate, with `#[traced]` \
             on what to see)"
        );
    } else {
        eprintln!("fgtrace: `{program}` {how}; {} trace(s):", written.len());
        for w in &written {
            eprintln!("  {}  {}", w.path.display(), w.summary);
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_become_the_variables_a_session_reads() {
        let s = Settings {
            mode: Some("flight:100".into()),
            sample: Some("timer:999".into()),
            filter: vec!["a*".into(), "b".into()],
            depth: Some(3),
            ..Settings::default()
        };
        let env = env_of(&s, true);
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("FGTRACE_MODE"), Some("flight:100"));
        assert_eq!(get("FGTRACE_SAMPLE"), Some("timer:999"));
        assert_eq!(get("FGTRACE_FILTER"), Some("a*,b"));
        assert_eq!(get("FGTRACE_DEPTH"), Some("3"));
        assert_eq!(get("FGTRACE_OFFCPU"), Some("1"));
        assert_eq!(get("FGTRACE_EXCLUDE"), None);
        // What the variables say is what the session is configured with.
        let mut c = fgtrace::Config::builtin();
        c.apply_env(|k| get(k).map(String::from));
        let shown = format!("{c:?}");
        assert!(shown.contains(r#"filter: ["a*", "b"]"#), "{shown}");
        assert!(shown.contains("max_depth: Some(3)"), "{shown}");
    }
}
