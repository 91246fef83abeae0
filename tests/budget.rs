//! The size budget of a recording to a file (`Config::max_size`,
//! `FGTRACE_MAX_SIZE`) and a full file system: the file stops at the limit,
//! complete with its footer, and every call after it is counted as lost,
//! shown with the reason.

use fgtrace::trace::file::{read_meta, MetaFrom};
use fgtrace::trace::{CutReason, Event, Trace};
use fgtrace::{traced, Config, Session};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

#[path = "support/tools.rs"]
mod tools;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[traced]
#[inline(never)]
fn leaf(x: u64) -> u64 {
    std::hint::black_box(x) + 1
}

#[traced]
#[inline(never)]
fn branch(n: u64) -> u64 {
    (0..n).map(leaf).sum()
}

#[traced]
#[inline(never)]
fn root(rounds: u64) -> u64 {
    (0..rounds).map(|_| branch(7)).sum()
}

/// Two threads of `rounds` rounds each; returns the calls they make.
fn workload(rounds: u64) -> u64 {
    std::thread::scope(|s| {
        s.spawn(|| root(rounds));
        s.spawn(|| root(rounds));
    });
    2 * (1 + 8 * rounds)
}

/// A session recording to `path` within `limit` bytes, waiting for the
/// collector rather than dropping calls (so every call is kept or counted
/// at the cut).
fn recording(path: &Path, limit: u64) -> Session {
    Session::start(
        Config::builtin()
            .block_when_full(true)
            .output(path)
            .max_size(limit),
    )
    .unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fgtrace-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// What a cut-short file must be: complete (its footer found), no larger
/// than `limit`, its kept and lost calls adding up to `made`, the losses
/// marked in the events, and the reason shown in the views' loss lines.
fn check_cut(path: &Path, limit: Option<u64>, made: u64, why: CutReason) -> Trace {
    let len = std::fs::metadata(path).unwrap().len();
    if let Some(l) = limit {
        assert!(len <= l, "{len} bytes past the budget of {l}");
    }
    let (meta, from) = read_meta(path).unwrap();
    assert_eq!(
        from,
        MetaFrom::Footer,
        "the file is completed with its footer"
    );
    let cut = meta
        .cut_short
        .clone()
        .expect("the trace says it was cut short");
    assert_eq!(cut.reason, why);
    assert!(cut.calls_after > 0, "{cut:?}");
    assert!(
        meta.total_calls() > 0,
        "calls before the cut are kept: {:?} {cut:?}",
        meta.threads
    );
    assert_eq!(
        meta.total_calls() + cut.calls_after,
        made,
        "every call is kept or counted"
    );
    assert_eq!(meta.total_lost(), cut.calls_after);
    let t = Trace::load(path).unwrap();
    assert!(t.meta().warnings.is_empty(), "{:?}", t.meta().warnings);
    let calls = t.events().filter(|e| matches!(e, Event::Call(_))).count() as u64;
    assert_eq!(calls, meta.total_calls());
    let marked: u64 = t
        .events()
        .filter_map(|e| match e {
            Event::Lost(l) => Some(l.count),
            _ => None,
        })
        .sum();
    assert_eq!(marked, cut.calls_after, "the gap is marked in the events");
    let lines = fgtrace::view::human::loss_lines(t.meta(), &[], &[]);
    assert!(
        lines[0].starts_with("recording cut short at ") && lines[0].contains("later calls LOST"),
        "{lines:?}"
    );
    t
}

#[test]
fn a_recording_stops_at_its_budget_complete_and_counts_the_calls_after() {
    let _g = serial();
    let path = tmp("stop.fgt");
    let limit = 300_000;
    let session = recording(&path, limit);
    let made = workload(200_000);
    let t = session
        .stop()
        .expect("a recording at its budget ends cleanly");
    let cut = t.meta().cut_short.clone().unwrap();
    assert_eq!(cut.limit, Some(limit));
    let loaded = check_cut(&path, Some(limit), made, CutReason::Budget);
    assert_eq!(loaded.meta().cut_short, Some(cut));
    // Without a budget the same run is several times larger.
    let whole = tmp("whole.fgt");
    let session = Session::start(Config::builtin().output(&whole).max_size(u64::MAX)).unwrap();
    workload(200_000);
    let t = session.stop().unwrap();
    assert!(t.meta().cut_short.is_none());
    assert!(std::fs::metadata(&whole).unwrap().len() > 3 * limit);
    let _ = std::fs::remove_file(&whole);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn threads_begun_after_the_cut_never_take_the_file_past_its_budget() {
    // A test harness starts a thread per test: after the budget is
    // reached, hundreds more threads record, each one more entry in the
    // file's completion (its announcement, its loss marker, its line in
    // the final metadata).
    let _g = serial();
    let path = tmp("late-threads.fgt");
    let limit = 120_000;
    let session = recording(&path, limit);
    let mut made = workload(100_000);
    for batch in 0..20 {
        std::thread::scope(|s| {
            for n in 0..25 {
                std::thread::Builder::new()
                    .name(format!(
                        "tests::a_long_test_module_path::a_test_begun_after_the_cut_{batch}_{n}"
                    ))
                    .spawn_scoped(s, || root(3))
                    .unwrap();
            }
        });
        made += 25 * (1 + 8 * 3);
    }
    let t = session.stop().expect("the recording ends cleanly");
    let loaded = check_cut(&path, Some(limit), made, CutReason::Budget);
    assert_eq!(loaded.meta().cut_short, t.meta().cut_short);
    // Those with no room to be listed are one entry, carrying their losses.
    let threads = &loaded.meta().threads;
    let last = threads.last().unwrap();
    assert!(threads.len() < 500, "{} threads listed", threads.len());
    assert!(
        last.name
            .ends_with("threads not listed (no room in the size budget)")
            && last.lost > 0,
        "{last:?}"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_budget_comes_from_fgtrace_max_size_and_bad_values_are_named() {
    let mut c = Config::builtin();
    c.apply_env(|k| (k == "FGTRACE_MAX_SIZE").then(|| "200MB".to_string()));
    assert_eq!(c.max_size_for(Path::new(".")), Some(200_000_000));
    let mut c = Config::builtin();
    c.apply_env(|k| (k == "FGTRACE_MAX_SIZE").then(|| "unlimited".to_string()));
    assert_eq!(c.max_size_for(Path::new(".")), None);
    // Without one: a quarter of the free space, capped.
    let (default, _) = fgtrace::config::default_max_size(&std::env::temp_dir()).unwrap();
    assert_eq!(
        Config::builtin().max_size_for(&std::env::temp_dir()),
        Some(default)
    );
    assert!(default <= fgtrace::config::DEFAULT_MAX_SIZE_CAP);
    let mut c = Config::builtin().output(tmp("bad.fgt")).max_size(1 << 20);
    c.apply_env(|k| (k == "FGTRACE_MAX_SIZE").then(|| "12 parsecs".to_string()));
    let e = Session::start(c)
        .err()
        .expect("a bad size is an error")
        .to_string();
    assert!(
        e.contains("FGTRACE_MAX_SIZE") && e.contains("parsecs"),
        "{e}"
    );
}

/// A tmpfs of `size` mounted at `dir` for this test (root only), unmounted
/// on drop.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(dir: &Path, size: &str, test: &str) -> Option<Mount> {
        std::fs::create_dir_all(dir).unwrap();
        let why = match Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
        {
            Ok(o) if o.status.success() => return Some(Mount(dir.to_path_buf())),
            Ok(o) => format!(
                "mounting a {size} tmpfs failed (it needs root): {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("`mount` cannot run: {e}"),
        };
        tools::missing(test, &why)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Writes `path` until the file system is full.
fn fill(path: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    loop {
        match f.write_all(&block) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
}

#[test]
fn a_full_file_system_ends_the_file_complete_and_the_program_goes_on() {
    let _g = serial();
    let test = "a_full_file_system_ends_the_file_complete_and_the_program_goes_on";
    let dir = tmp("small-fs");
    let Some(_mount) = Mount::tmpfs(&dir, "1m", test) else {
        return;
    };
    let path = dir.join("full.fgt");
    // No budget: only the file system stops it.
    let session = recording(&path, u64::MAX);
    let made = workload(300_000);
    let t = session
        .stop()
        .expect("a full file system ends the recording cleanly");
    assert_eq!(t.meta().cut_short.as_ref().unwrap().limit, None);
    check_cut(&path, None, made, CutReason::DiskFull);
    // The space of the first file is free again only once nothing holds it.
    drop(t);
    std::fs::remove_file(&path).unwrap();

    // Another program fills the file system while the recording runs.
    let session = recording(&path, u64::MAX);
    let mut made = workload(1000);
    fill(&dir.join("filler"));
    made += workload(300_000);
    let t = session
        .stop()
        .expect("a file system filled meanwhile ends the recording cleanly");
    assert!(t.meta().cut_short.is_some());
    check_cut(&path, None, made, CutReason::DiskFull);
    // The program goes on, and so does recording elsewhere.
    let elsewhere = tmp("after.fgt");
    let session = Session::start(Config::builtin().output(&elsewhere)).unwrap();
    let made = workload(10);
    let t = session.stop().unwrap();
    assert_eq!(t.meta().total_calls(), made);
    let _ = std::fs::remove_file(&elsewhere);
}
