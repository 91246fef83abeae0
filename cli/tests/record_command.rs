//! `fgtrace record -- COMMAND`: the command is recorded from its start to
//! its exit however it exits, every process of its tree that links fgtrace
//! gets its own trace, the command's status is fgtrace's, and the traces
//! read in the views, one by one or merged. The command is this test
//! binary run again in a role (`zz_record_target`), which links fgtrace.

use fgtrace_trace::file::TraceReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "FGTRACE_TEST_RECORD_ROLE";

#[fgtrace::traced]
fn leaf(i: u64) -> u64 {
    std::hint::black_box(i.wrapping_mul(31))
}

#[fgtrace::traced]
fn round(i: u64) -> u64 {
    leaf(i) ^ leaf(i + 1) ^ leaf(i + 2)
}

/// The recorded program: `n` rounds (one `round`, three `leaf` each), then
/// it ends the way `how` says.
#[test]
#[ignore = "not a test: the program the other tests record"]
fn zz_record_target() {
    let Ok(how) = std::env::var(ROLE) else {
        return;
    };
    let n: u64 = std::env::var("ROUNDS").unwrap().parse().unwrap();
    let mut x = 0;
    for i in 0..n {
        x ^= round(i);
    }
    println!("checksum {x}");
    match how.as_str() {
        "return" => {}
        "exit" => std::process::exit(3),
        "panic" => panic!("the target panics on purpose"),
        "session" => {
            // A session of the program's own in the middle, then more rounds.
            let session = fgtrace::Session::start(fgtrace::Config::builtin()).unwrap();
            for i in 0..n {
                x ^= round(i);
            }
            let t = session.stop().unwrap();
            assert_eq!(t.meta.total_calls(), 4 * n);
            for i in 0..n {
                x ^= round(i);
            }
            println!("checksum {x}");
        }
        "hang" => {
            // Until a signal ends it; still calling traced code.
            eprintln!("ready");
            loop {
                std::hint::black_box(round(1));
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// This binary, running only the target role.
fn target() -> Vec<String> {
    vec![
        std::env::current_exe().unwrap().display().to_string(),
        "--ignored".into(),
        "--exact".into(),
        "zz_record_target".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fgtrace-record-cmd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn record(cwd: &Path, args: &[&str], cmd: &[String], how: &str, rounds: u64) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .arg("record")
        .args(args)
        .arg("--")
        .args(cmd)
        .env(ROLE, how)
        .env("ROUNDS", rounds.to_string())
        .current_dir(cwd)
        .output()
        .expect("run fgtrace")
}

/// Calls per function name in a trace file.
fn counts(path: &Path) -> (u64, u64, u64) {
    let r = TraceReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let meta = r.meta().clone();
    let (mut rounds, mut leaves) = (0, 0);
    for e in r.events() {
        if let fgtrace_trace::Event::Call(c) = e.unwrap() {
            match meta.sites[c.site as usize].name.as_str() {
                "round" => rounds += 1,
                "leaf" => leaves += 1,
                _ => {}
            }
        }
    }
    (rounds, leaves, meta.total_lost())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_program_is_recorded_from_start_to_exit_however_it_exits() {
    let d = dir("exits");
    for (how, status) in [("return", 0), ("exit", 3), ("panic", 101)] {
        let out = format!("{how}.fgt");
        let o = record(&d, &["-o", &out], &target(), how, 500);
        assert_eq!(o.status.code(), Some(status), "{how}: {}", stderr(&o));
        // The program's own output is untouched.
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("checksum"),
            "{how}"
        );
        let (rounds, leaves, lost) = counts(&d.join(&out));
        assert_eq!(
            (rounds, leaves, lost),
            (500, 1500, 0),
            "{how}: {}",
            stderr(&o)
        );
        let e = stderr(&o);
        assert!(
            e.contains(&format!("{out}  ")) && e.contains("2000 calls"),
            "{how}: {e}"
        );
        // No file is left in a temporary directory.
        assert!(std::fs::read_dir(&d).unwrap().flatten().all(|e| !e
            .file_name()
            .to_string_lossy()
            .starts_with(".fgtrace-record")));
    }
}

#[test]
fn sigterm_leaves_a_complete_trace_and_the_signal_is_the_status() {
    let d = dir("sigterm");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["record", "-o", "t.fgt", "--"])
        .args(target())
        .env(ROLE, "hang")
        .env("ROUNDS", "100")
        .current_dir(&d)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until the target runs its loop (it says so on stderr, passed through).
    let mut err = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&seen).contains("ready") {
        assert!(Instant::now() < deadline, "the target never got ready");
        let mut b = [0u8; 256];
        let n = std::io::Read::read(&mut err, &mut b).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&b[..n]);
    }
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: sends SIGTERM to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{rest}");
    assert!(rest.contains("killed by signal 15"), "{rest}");
    let (rounds, leaves, _) = counts(&d.join("t.fgt"));
    // The 100 rounds, and the loop's calls until the signal. The session
    // stops on the runtime's signal thread while the loop runs on: the one
    // round in flight then may keep only the leaves that ran before the
    // stop, or its leaves may be kept without it (a CI run once kept 1718
    // rounds and 5152 leaves), so three leaves a round give or take two.
    assert!(
        rounds > 100 && leaves.abs_diff(3 * rounds) <= 2,
        "{rounds} {leaves}"
    );
    // A complete file: no warning that it was cut short.
    let r = TraceReader::open(d.join("t.fgt")).unwrap();
    assert!(r.meta().warnings.is_empty(), "{:?}", r.meta().warnings);

    // `info` reads its summary from the footer, without the events; with
    // --check it reads them all; a file cut short has no footer and is
    // read through, with the cut shown.
    let info = |args: &[&str], f: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
            .arg("info")
            .args(args)
            .arg(f)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o))
    };
    let calls = format!("calls:     {} (0 lost", rounds * 4);
    let (quick, _) = info(&[], &d.join("t.fgt"));
    assert!(
        quick.contains(&calls) && quick.contains("events:    not read"),
        "{quick}"
    );
    let (checked, _) = info(&["--check"], &d.join("t.fgt"));
    assert!(
        checked.contains(&calls) && checked.contains("(all chunks intact)"),
        "{checked}"
    );
    let bytes = std::fs::read(d.join("t.fgt")).unwrap();
    std::fs::write(d.join("cut.fgt"), &bytes[..bytes.len() - 40]).unwrap();
    let (cut, warned) = info(&[], &d.join("cut.fgt"));
    assert!(cut.contains("every section read"), "{cut}");
    assert!(warned.contains("did not finish"), "{warned}");
}

#[test]
fn each_process_gets_its_own_trace_and_report_merges_them() {
    let d = dir("tree");
    // Two processes of the command's tree link fgtrace: sh runs the target twice.
    let t = target().join(" ");
    let script = format!("ROUNDS=200 {t} && ROUNDS=300 {t}");
    let cmd = ["sh".to_string(), "-c".into(), script];
    let o = record(&d, &["--dir", "traces"], &cmd, "return", 0);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut files: Vec<PathBuf> = std::fs::read_dir(d.join("traces"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}: {}", stderr(&o));
    let mut per_file: Vec<u64> = files.iter().map(|f| counts(f).0).collect();
    per_file.sort();
    assert_eq!(per_file, [200, 300]);
    assert!(stderr(&o).contains("2 trace(s)"), "{}", stderr(&o));
    // One report for both, per function.
    let report = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .arg("report")
        .args(&files)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", stderr(&report));
    let text = String::from_utf8_lossy(&report.stdout);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().last() == Some(name))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    assert_eq!(row("round"), Some(500), "{text}");
    assert_eq!(row("leaf"), Some(1500), "{text}");
    // Its title names both processes, each with its pid, and no pid of its own.
    let title = text.lines().next().unwrap_or("");
    assert!(title.starts_with("# fgtrace report: 2 traces: "), "{title}");
    assert!(!title.contains("(pid"), "{title}");
    // And one flamegraph.
    let flame = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["flame", "--folded"])
        .args(&files)
        .output()
        .unwrap();
    assert!(flame.status.success(), "{}", stderr(&flame));
    assert!(String::from_utf8_lossy(&flame.stdout).contains("round;"));
}

#[test]
fn a_command_that_never_links_fgtrace_gets_one_clear_line_and_its_status() {
    let d = dir("plain");
    let cmd = ["sh".to_string(), "-c".into(), "exit 7".into()];
    let o = record(&d, &[], &cmd, "return", 0);
    assert_eq!(o.status.code(), Some(7));
    let e = stderr(&o);
    assert!(
        e.contains("wrote no trace: no process it ran links fgtrace"),
        "{e}"
    );
    // The line that says the size budget, then the one that says why
    // there is no trace.
    assert_eq!(e.lines().count(), 2, "{e}");
    assert!(e.lines().next().unwrap().contains("in all"), "{e}");
    let missing = record(&d, &[], &["/no/such/program".to_string()], "return", 0);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("cannot run `/no/such/program`"));
    let bad = record(&d, &["--sample", "sometimes"], &cmd, "return", 0);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("bad settings"), "{}", stderr(&bad));
}

#[test]
fn the_variable_alone_records_without_the_command() {
    let d = dir("env");
    let [exe, rest @ ..] = &target()[..] else {
        unreachable!()
    };
    let o = Command::new(exe)
        .args(rest)
        .env("FGTRACE_RECORD", d.join("t"))
        .env(ROLE, "return")
        .env("ROUNDS", "50")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // The trace, and the budget the processes recording there share.
    let files: Vec<PathBuf> = std::fs::read_dir(d.join("t"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.ends_with(fgtrace::collector::POOL_FILE))
        .collect();
    assert_eq!(files.len(), 1);
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.ends_with(".fgt") && name.contains('-'), "{name}");
    assert_eq!(counts(&files[0]).0, 50);
}

#[test]
fn a_session_of_the_programs_own_takes_over_and_nothing_is_missed() {
    let d = dir("own");
    let o = record(&d, &["--dir", "t"], &target(), "session", 100);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut files: Vec<PathBuf> = std::fs::read_dir(d.join("t"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    // Before, during (the program's own session's trace) and after.
    assert_eq!(files.len(), 3, "{files:?}: {}", stderr(&o));
    let rounds: Vec<u64> = files.iter().map(|f| counts(f).0).collect();
    assert_eq!(rounds.iter().sum::<u64>(), 300, "{rounds:?}");
    assert!(rounds.iter().all(|&r| r == 100), "{rounds:?}");
}

/// What a cut-short file holds: (calls kept, calls counted after the cut,
/// all the calls lost) after checking it ends complete within `limit`.
fn cut_short(path: &Path, limit: u64) -> (u64, u64, u64) {
    let len = std::fs::metadata(path).unwrap().len();
    assert!(
        len <= limit,
        "{}: {len} bytes, budget {limit}",
        path.display()
    );
    let (meta, from) = fgtrace_trace::file::read_meta(path).unwrap();
    assert_eq!(
        from,
        fgtrace_trace::file::MetaFrom::Footer,
        "completed with its footer"
    );
    let cut = meta.cut_short.clone().expect("cut short");
    assert_eq!(cut.reason, fgtrace_trace::CutReason::Budget);
    (meta.total_calls(), cut.calls_after, meta.total_lost())
}

#[test]
fn a_budget_ends_the_file_at_its_limit_and_every_view_says_so() {
    let d = dir("budget");
    let rounds = 200_000;
    let o = record(
        &d,
        &["--max-size", "100kB", "-o", "b.fgt"],
        &target(),
        "exit",
        rounds,
    );
    let e = stderr(&o);
    // The program's status is kept.
    assert_eq!(o.status.code(), Some(3), "{e}");
    assert!(
        e.lines()
            .next()
            .is_some_and(|l| l.contains("at most 100.0 kB in all (--max-size)")),
        "the first line says the budget: {e}"
    );
    assert!(e.contains("cut short at "), "the summary says it: {e}");
    let file = d.join("b.fgt");
    let (kept, after, lost) = cut_short(&file, 100_000);
    assert!(kept > 0 && after > 0, "{kept} {after}");
    assert_eq!(kept + lost, 4 * rounds, "every call is kept or counted");

    let info = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["info"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(
        text.contains("cut short: at ")
            && text.contains("its size budget of 100.0 kB was reached")
            && text.contains(&format!("{after} later calls LOST")),
        "{text}"
    );
    let report = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["report"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("recording cut short at ") && text.contains(&format!("LOST {lost} records")),
        "{text}"
    );

    // The variables alone: FGTRACE_RECORD with FGTRACE_MAX_SIZE.
    let rec = d.join("env");
    let o = Command::new(target()[0].clone())
        .args(&target()[1..])
        .env("FGTRACE_RECORD", &rec)
        .env("FGTRACE_MAX_SIZE", "80kB")
        .env(ROLE, "return")
        .env("ROUNDS", rounds.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Beside the trace, the budget it shares with any other process
    // recording there.
    let files: Vec<_> = std::fs::read_dir(&rec)
        .unwrap()
        .flatten()
        .filter(|f| f.path().extension().is_some_and(|x| x == "fgt"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(rec.join(fgtrace::collector::POOL_FILE).exists());
    let (kept, _, lost) = cut_short(&files[0].path(), 80_000);
    assert_eq!(kept + lost, 4 * rounds);
}

#[test]
fn a_bad_max_size_is_an_error_before_anything_runs() {
    let d = dir("bad-budget");
    let o = record(&d, &["--max-size", "lots"], &target(), "return", 10);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("--max-size") && e.contains("`lots` is not a size"),
        "{e}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("checksum"));
}

#[test]
fn processes_recording_into_one_directory_share_its_budget() {
    let d = dir("shared");
    let rounds = 200_000;
    // Three processes, each recording several times what the budget holds.
    let t = target().join(" ");
    let script = format!("{t} && {t} && {t}");
    let cmd = ["sh".to_string(), "-c".into(), script];
    let o = record(
        &d,
        &["--dir", "traces", "--max-size", "2MB"],
        &cmd,
        "return",
        rounds,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let files: Vec<PathBuf> = std::fs::read_dir(d.join("traces"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 3, "only the traces are left: {files:?}");
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(total <= 2_000_000, "{total} bytes in all, budget 2 MB");
    assert!(total > 1_000_000, "the budget is used: {total} bytes");
    let (mut kept, mut lost) = (0, 0);
    for f in &files {
        let (k, _, l) = cut_short(f, 2_000_000);
        kept += k;
        lost += l;
    }
    assert!(kept > 0);
    assert_eq!(kept + lost, 3 * 4 * rounds, "every call is kept or counted");
}

/// Bytes of the files in `dir`, with the segments kept beside them.
fn bytes_in(dir: &Path) -> (Vec<PathBuf>, u64) {
    let all: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let total = all
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    (all, total)
}

#[test]
fn a_ring_keeps_the_run_s_end_within_its_budget_and_every_view_says_so() {
    let d = dir("ring");
    let rounds = 200_000;
    let o = record(
        &d,
        &["--max-size", "400kB", "--on-full", "ring", "-o", "r.fgt"],
        &target(),
        "return",
        rounds,
    );
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(
        e.lines()
            .next()
            .is_some_and(|l| l.contains("400.0 kB") && l.contains("--on-full ring")),
        "the first line says the budget and the ring: {e}"
    );
    let (files, total) = bytes_in(&d);
    assert!(total <= 400_000, "{total} bytes in {files:?}");
    assert!(d.join("r.fgt.prev").exists(), "{files:?}");
    // A lone process has the budget to itself: a segment takes about half
    // of it, so the two files hold at least one full segment.
    let segment = std::fs::metadata(d.join("r.fgt.prev")).unwrap().len();
    assert!(
        segment > 160_000 && total > 170_000,
        "a segment of {segment} bytes, {total} in all, of a budget of 400 kB: {files:?}"
    );
    let file = d.join("r.fgt");
    let (meta, from) = fgtrace_trace::file::read_meta(&file).unwrap();
    assert_eq!(from, fgtrace_trace::file::MetaFrom::Footer);
    assert!(meta.cut_short.is_none());
    let (kept, lost) = (meta.total_calls(), meta.total_lost());
    assert!(kept > 0 && lost > kept, "{kept} {lost}");
    assert_eq!(kept + lost, 4 * rounds, "every call is kept or counted");
    // FILE is read with FILE.prev: its calls are kept, not overwritten.
    let alone = {
        let f = std::fs::File::open(&file).unwrap();
        let again = f.try_clone().unwrap();
        TraceReader::with_file(std::io::BufReader::new(f), again)
            .unwrap()
            .meta()
            .total_calls()
    };
    let (before, _) = fgtrace_trace::file::read_meta(d.join("r.fgt.prev")).unwrap();
    let before = before.total_calls();
    assert!(before > 0 && alone > 0, "{before} {alone}");
    assert_eq!(kept, alone + before, "FILE.prev's calls are FILE's");
    assert_eq!(meta.ring_before, Some(before));
    // The calls kept are the run's last: the earliest starts well after
    // the run's start (tests/ring.rs checks the run's last call is kept).
    let t = fgtrace_trace::Trace::load(&file).unwrap();
    let first = t.calls().map(|c| c.start_ns).min().unwrap();
    let run = t.meta().duration_ns;
    assert!(
        first > run / 4,
        "the first kept call at {first} of {run} ns"
    );

    let info = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["info"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&info.stdout);
    let said = format!("the file keeps the run's last calls within a size budget of 400.0 kB (read with FILE.prev beside it: {before} calls of the segment before); older calls LOST (overwritten)");
    assert!(
        text.contains(&format!("ring:      {said}")) && text.contains(&format!("({lost} lost")),
        "{text}"
    );
    let report = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["report"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains(&format!("ring recording: {said}"))
            && text.contains(&format!("LOST {lost} records")),
        "{text}"
    );
    // Every view reads both: the Chrome export has FILE.prev's rounds.
    let chrome = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["chrome"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&chrome.stdout);
    let (rounds_kept, _, _) = counts(&file);
    assert!(rounds_kept > 0);
    assert_eq!(
        text.matches("\"name\":\"round\"").count() as u64,
        rounds_kept,
        "{}",
        &text[..text.len().min(2000)]
    );
    // Given both, as `traces/*` gives them, FILE.prev is read once.
    let both = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["report"])
        .arg(d.join("r.fgt.prev"))
        .arg(&file)
        .output()
        .unwrap();
    let e = stderr(&both);
    assert!(both.status.success(), "{e}");
    assert!(
        e.contains("r.fgt.prev is read with the ring's file beside it"),
        "{e}"
    );
    assert!(
        String::from_utf8_lossy(&both.stdout).contains(&format!("LOST {lost} records")),
        "{}",
        String::from_utf8_lossy(&both.stdout)
    );
}

#[test]
fn ring_recordings_into_one_directory_share_its_budget() {
    let d = dir("shared-ring");
    let rounds = 100_000;
    let t = target().join(" ");
    let script = format!("{t} && {t} && {t}");
    let cmd = ["sh".to_string(), "-c".into(), script];
    let o = record(
        &d,
        &[
            "--dir",
            "traces",
            "--max-size",
            "600kB",
            "--on-full",
            "ring",
        ],
        &cmd,
        "return",
        rounds,
    );
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    // The first process had the budget to itself; the later ones took the
    // older segments of the finished ones, and said so.
    assert!(
        e.contains("the older segment of a finished ring recording) to make room"),
        "{e}"
    );
    let (files, total) = bytes_in(&d.join("traces"));
    assert!(
        total <= 600_000,
        "{total} bytes in {files:?}, budget 600 kB"
    );
    let traces: Vec<_> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|x| x == "fgt"))
        .collect();
    assert_eq!(traces.len(), 3, "{files:?}");
    let mut rang = 0;
    for f in traces {
        let (meta, _) = fgtrace_trace::file::read_meta(f).unwrap();
        assert_eq!(meta.total_calls() + meta.total_lost(), 4 * rounds);
        // Each process finds room, and keeps its end.
        assert_eq!(meta.ring, Some(600_000), "{}", f.display());
        assert!(meta.cut_short.is_none(), "{}", f.display());
        rang += 1;
    }
    assert_eq!(rang, 3);
}
