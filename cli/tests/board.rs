//! fgtrace on bare metal: `boards/qemu-riscv/run.sh` (RISC-V, 32 and 64 bits),
//! `boards/qemu-x86_64/run.sh` and `boards/qemu-cortex-m/run.sh` (Cortex-M3
//! and M4F) build the example firmware (one workload,
//! `boards/common/workload.rs`), run it under qemu and decode its stream with
//! this `fgtrace`;
//! the trace must match the firmware's own ground truth exactly (calls per
//! function, nesting, an async fn's polls and futures), lose nothing, and
//! its samples must recover the known 3:1 split under the traced
//! `split_work`.

#[path = "../../tests/support/tools.rs"]
mod tools;

use fgtrace_symbols::symbolize::Symbolizer;
use fgtrace_trace::{Call, Event, Trace};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tools run.sh needs, or a visible skip.
fn tools_present(target: &str) -> bool {
    let test = format!("board::{target}");
    let (qemu, package) = match target {
        "x86_64" => ("qemu-system-x86_64", "qemu-system-x86"),
        "m3" | "m4f" => ("qemu-system-arm", "qemu-system-arm"),
        t if t.starts_with("riscv32") => ("qemu-system-riscv32", "qemu-system-misc"),
        _ => ("qemu-system-riscv64", "qemu-system-misc"),
    };
    tools::tool(qemu, &["--version"], package, &test).is_some()
        && tools::tool("ld.lld", &["--version"], "lld", &test).is_some()
        && tools::tool("/usr/bin/rustc", &["--version"], "rustc-web", &test).is_some()
        && tools::tool(
            "/usr/bin/cargo",
            &["--version"],
            "cargo-web rust-web-src",
            &test,
        )
        .is_some()
}

struct Run {
    path: PathBuf,
    trace: Trace,
    truth: BTreeMap<String, u64>,
    /// An async fn's futures and polls, by name (`future NAME FUTURES POLLS`).
    futures: BTreeMap<String, (u64, u64)>,
    console: String,
    /// What `fgtrace board` said (run.sh's stderr).
    stderr: String,
    /// The firmware's crate, its functions' path (`fgtrace_board_demo`;
    /// Cortex-M's `rtt` binary is a crate of its own).
    krate: &'static str,
    /// Its line in `boards/probe-cost.txt`: the example's plain build over
    /// the UART (other builds count more, or stream otherwise).
    cost_key: Option<String>,
}

fn run(target: &str) -> Option<Run> {
    run_with(target, false, "mcycle", false)
}

/// `instructions`: the firmware built with its per-call counters; `clock`:
/// the probe's clock on RISC-V (`mcycle` or `rdtime`); `losses`: the
/// firmware's `losses` build (three sessions that lose calls in known ways).
fn run_with(target: &str, instructions: bool, clock: &str, losses: bool) -> Option<Run> {
    run_full(target, instructions, clock, losses, false, false)
}

/// [`run_with`]; `single_hart`: the firmware built for one hart (the probe
/// asks no hart index); `harts2`: its `harts2` build on two harts (RISC-V).
fn run_full(
    target: &str,
    instructions: bool,
    clock: &str,
    losses: bool,
    single_hart: bool,
    harts2: bool,
) -> Option<Run> {
    run_over(
        target,
        instructions,
        clock,
        losses,
        single_hart,
        harts2,
        "uart",
    )
}

/// [`run_full`]; `transport`: `uart`, or `rtt` (Cortex-M: the stream on an
/// RTT up-channel, read through qemu's GDB server).
fn run_over(
    target: &str,
    instructions: bool,
    clock: &str,
    losses: bool,
    single_hart: bool,
    harts2: bool,
    transport: &str,
) -> Option<Run> {
    if !tools_present(target) {
        return None;
    }
    // Tests run at once: each run writes its own file.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("board-{target}-{clock}-{transport}-{k}"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("run.fgt");
    let mut cmd = if target == "x86_64" {
        Command::new(root().join("boards/qemu-x86_64/run.sh"))
    } else if is_cortex_m(target) {
        let mut c = Command::new(root().join("boards/qemu-cortex-m/run.sh"));
        c.arg(target);
        c
    } else {
        let mut c = Command::new(root().join("boards/qemu-riscv/run.sh"));
        c.arg(target);
        c
    };
    let r = cmd
        .arg(&out)
        .env("COUNT_INSTRUCTIONS", if instructions { "1" } else { "0" })
        .env("CLOCK", clock)
        .env("LOSSES", if losses { "1" } else { "0" })
        .env("SINGLE_HART", if single_hart { "1" } else { "0" })
        .env("HARTS", if harts2 { "2" } else { "1" })
        .env("TRANSPORT", transport)
        .env("FGTRACE_BIN", env!("CARGO_BIN_EXE_fgtrace"))
        .output()
        .expect("run.sh runs");
    let console = String::from_utf8_lossy(&r.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(
        r.status.success(),
        "run.sh {target} failed:\n{console}\n{stderr}"
    );
    let truth = console
        .lines()
        .filter_map(|l| l.strip_prefix("truth "))
        .map(|l| {
            let (name, n) = l.rsplit_once(' ').expect("truth NAME CALLS");
            (name.to_string(), n.parse().expect("a count"))
        })
        .collect();
    let futures = console
        .lines()
        .filter_map(|l| l.strip_prefix("future "))
        .map(|l| {
            let mut w = l.split(' ');
            let (name, futures, polls) = (w.next(), w.next(), w.next());
            let n = |x: Option<&str>| x.and_then(|x| x.parse().ok()).expect("a count");
            (name.expect("a name").to_string(), (n(futures), n(polls)))
        })
        .collect();
    let trace = Trace::load(&out).expect("run.sh wrote a readable trace");
    Some(Run {
        path: out,
        trace,
        truth,
        futures,
        console,
        stderr,
        krate: if transport == "rtt" {
            "rtt"
        } else {
            "fgtrace_board_demo"
        },
        cost_key: (!instructions && !losses && !harts2 && clock == "mcycle" && transport == "uart")
            .then(|| {
                if single_hart {
                    format!("{target}-single-hart")
                } else {
                    target.to_string()
                }
            }),
    })
}

/// The probe's cost the firmware printed (`probe-cost instructions per
/// call: recording R, recording and streaming S, off O, untraced U`), against
/// the committed figures in `boards/probe-cost.txt`: counted exactly under
/// `-icount shift=0`, so any growth of the probe fails (streaming, which
/// includes the serial output, with 1% of slack).
fn check_probe_cost(key: &str, console: &str) {
    let line = console
        .lines()
        .find_map(|l| l.strip_prefix("probe-cost instructions per call: "))
        .unwrap_or_else(|| panic!("{key}: no probe-cost line in:\n{console}"));
    let got: Vec<u64> = line
        .split(", ")
        .map(|f| {
            f.rsplit_once(' ')
                .expect("NAME N")
                .1
                .parse()
                .expect("a count")
        })
        .collect();
    let table = std::fs::read_to_string(root().join("boards/probe-cost.txt")).unwrap();
    let want: Vec<u64> = table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&key))
        .unwrap_or_else(|| panic!("{key}: no line in boards/probe-cost.txt"))[1..]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(got.len(), 4, "{key}: {line}");
    let names = ["recording", "recording and streaming", "off", "untraced"];
    for (i, name) in names.iter().enumerate() {
        let limit = if i == 1 {
            want[i] + want[i] / 100
        } else {
            want[i]
        };
        assert!(
            got[i] <= limit,
            "{key}: {name} costs {} instructions per call, above the committed {} \
             (boards/probe-cost.txt; after an intended change, update it and \
             docs/src/boards.md): {line}",
            got[i],
            want[i]
        );
    }
}

fn check(target: &str) {
    check_run(target, run(target))
}

/// The Cortex-M examples (`m3`, `m4f`).
fn is_cortex_m(target: &str) -> bool {
    matches!(target, "m3" | "m4f")
}

fn check_run(target: &str, run: Option<Run>) {
    let Some(run) = run else { return };
    let t = &run.trace;
    let meta = t.meta();
    assert!(
        run.truth.len() >= 10,
        "ground truth printed: {}",
        run.console
    );

    // Calls per function: exactly the firmware's own counts, nothing lost.
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for c in t.calls() {
        *calls.entry(meta.site_name(c.site).to_string()).or_default() += 1;
    }
    assert!(
        run.truth.get("irq_tick").is_some_and(|&n| n >= 100),
        "{target}: the timer interrupt ran traced code: {:?}",
        run.truth
    );
    assert_eq!(calls, run.truth, "{target}: calls per function");
    assert_eq!(meta.total_lost(), 0, "{target}: losses");
    if let Some(key) = &run.cost_key {
        check_probe_cost(key, &run.console);
    }
    if is_cortex_m(target) {
        check_cortex_m(target, &run);
    } else {
        check_cycle_clock(target, t);
    }
    check_nesting(target, t);

    // The async fn: every call of it is one poll (and only its calls are),
    // and each future, first poll to completion, is one future record
    // holding exactly its polls, none cancelled: as many futures and polls
    // as the executor counted.
    let (futures, polls) = run.futures["async_sum"];
    assert!(
        futures >= 20 && polls == 4 * futures,
        "{target}: {futures} futures, {polls} polls"
    );
    let is_async = |site: u32| meta.site_name(site) == "async_sum";
    if let Some(c) = t.calls().find(|c| c.is_poll() != is_async(c.site)) {
        panic!("{target}: poll flag on {}: {c:?}", meta.site_name(c.site));
    }
    let spans: Vec<_> = t
        .events()
        .filter_map(|e| match e {
            Event::Future(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(spans.len() as u64, futures, "{target}: futures");
    let poll_calls: Vec<Call> = t.calls().filter(|c| is_async(c.site)).collect();
    for f in &spans {
        assert!(
            is_async(f.site) && !f.cancelled && f.polls == 4,
            "{target}: {f:?}"
        );
        let inside = poll_calls
            .iter()
            .filter(|c| c.start_ns >= f.start_ns && c.end_ns() <= f.start_ns + f.dur_ns)
            .count();
        assert_eq!(inside, 4, "{target}: the polls inside {f:?}");
    }

    // Samples: symbolized against the firmware's ELF, the untraced 3:1 split
    // under `split_work` comes back within binomial noise, with the cut at
    // the traced frame.
    let mut sym = Symbolizer::new(&meta.mappings);
    let (mut heavy, mut light, mut cut_ok) = (0u64, 0u64, 0u64);
    for e in t.events() {
        let Event::Sample(s) = e else { continue };
        let mut names: Vec<String> = Vec::new();
        for (i, &a) in s.frames.iter().enumerate() {
            names.extend(sym.frames(a, i > 0).iter().map(|f| f.name.clone()));
        }
        let is = |n: &str| names.iter().any(|x| x.ends_with(n));
        if !is("::split_work") {
            continue;
        }
        if is("::heavy_three") {
            heavy += 1;
        } else if is("::light_one") {
            light += 1;
        }
        // The cut is at `split_work`'s own frame, and no frame below it (its
        // callees') is `split_work` itself.
        if let Some(cut) = s.cut {
            let at = sym.frames(s.frames[cut as usize], cut > 0).to_vec();
            let below = (s.frames[..cut as usize].iter().enumerate())
                .flat_map(|(i, &a)| sym.frames(a, i > 0).to_vec())
                .any(|f| f.name.ends_with("::split_work"));
            if at.iter().any(|f| f.name.ends_with("::split_work")) && !below {
                cut_ok += 1;
            }
        }
    }
    let n = heavy + light;
    assert!(n >= 100, "{target}: {n} samples in the split");
    let p = heavy as f64 / n as f64;
    let sd = (0.75 * 0.25 / n as f64).sqrt();
    assert!(
        (p - 0.75).abs() <= 3.0 * sd + 0.01,
        "{target}: heavy share {p:.3} of {n} samples, true 0.75 (3:1)"
    );
    assert!(
        cut_ok * 10 >= n * 9,
        "{target}: the cut finds split_work in {cut_ok} of {n} samples"
    );

    // The combined flamegraph hangs the sampled frames under the traced path.
    let folded = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args(["flame", "--combined", "--folded"])
        .arg(&run.path)
        .output()
        .unwrap();
    let folded = String::from_utf8_lossy(&folded.stdout);
    assert!(
        folded.lines().any(|l| l.contains(&format!(
            "run_round;{k}::split_work;{k}::heavy_three",
            k = run.krate
        ))),
        "{target}: combined flamegraph:\n{}",
        &folded[..folded.len().min(2000)]
    );
    // The sampled frames below `split_work` are its callees' only.
    assert!(
        !folded
            .lines()
            .any(|l| l.matches("::split_work;").count() > 1),
        "{target}: split_work among its own sampled frames:\n{}",
        &folded[..folded.len().min(2000)]
    );
}

/// The clock is `mcycle` (x86_64: the TSC), one tick per instruction.
fn check_cycle_clock(target: &str, t: &Trace) {
    let meta = t.meta();

    // The clock is `mcycle` (x86_64: the TSC), one tick per instruction
    // under `-icount shift=0` at 1 GHz: every call has a duration (the
    // shortest, a leaf of a few instructions, over 10 ns), and the
    // probe-cost leaf's calls all show the same one, the size of its body.
    let clock = if target == "x86_64" { "tsc" } else { "mcycle" };
    assert_eq!(meta.clock.source, clock, "{target}: the board's clock");
    assert_eq!(meta.clock.ticks_per_ns, 1.0, "{target}: {clock} at 1 GHz");
    if let Some(c) = t.calls().find(|c| c.dur_ns == 0) {
        panic!(
            "{target}: {} shows no duration: {c:?}",
            meta.site_name(c.site)
        );
    }
    let mut leaf: BTreeMap<u64, u64> = BTreeMap::new();
    for c in t.calls() {
        if meta.site_name(c.site) == "probe_cost_leaf" {
            *leaf.entry(c.dur_ns).or_default() += 1;
        }
    }
    let (&usual, &n) = leaf.iter().max_by_key(|(_, &n)| n).unwrap();
    let all: u64 = leaf.values().sum();
    assert!(
        (5..=40).contains(&usual) && n * 100 >= all * 99,
        "{target}: probe_cost_leaf durations (ns: calls) {leaf:?}"
    );
}

/// Nesting: every call's recorded parent is the function that calls it,
/// and (but for interrupts) lies inside its parent's time.
fn check_nesting(target: &str, t: &Trace) {
    let meta = t.meta();
    let parents: HashMap<&str, &[&str]> = HashMap::from([
        ("run_round", &[][..]),
        ("probe_cost_leaf", &[][..]),
        ("evaluate", &["run_round"][..]),
        ("parse_expr", &["evaluate", "parse_factor"][..]),
        ("parse_term", &["parse_expr"][..]),
        ("parse_factor", &["parse_term"][..]),
        ("crc32", &["run_round"][..]),
        ("crc32_byte", &["crc32"][..]),
        ("mat_mul", &["run_round"][..]),
        ("dot", &["mat_mul"][..]),
        ("fib", &["run_round", "fib"][..]),
        ("split_work", &["run_round"][..]),
        // The async fn's polls, each a call; the calls they make under them.
        ("async_sum", &["run_round"][..]),
        ("async_step", &["async_sum"][..]),
        // The timer interrupt's calls: under whatever call it interrupted.
        ("irq_tick", &["*"][..]),
        ("irq_leaf", &["irq_tick"][..]),
        // Cortex-M: the low-priority interrupt's call, which the
        // high-priority one (its `irq_tick`) preempts; the call longer than
        // 2^32 ticks.
        ("irq_low", &["*"][..]),
        ("long_call", &[][..]),
    ]);
    let mut open: Vec<Call> = Vec::new();
    for c in t.calls() {
        while open.last().is_some_and(|p| p.depth >= c.depth) {
            open.pop();
        }
        let name = meta.site_name(c.site);
        let parent = open.last().map(|p| meta.site_name(p.site));
        let want = parents[name];
        match parent {
            None => assert!(
                (want.is_empty() || want == ["*"]) && c.depth == 0,
                "{target}: {name} at the root"
            ),
            Some(p) => {
                assert!(
                    want.contains(&p) || want == ["*"],
                    "{target}: {name} under {p}"
                );
                // An interrupt may land in the interrupted call's probe,
                // before its entry's clock read or after its exit's: only
                // the calls made in order nest in time.
                let p = open.last().unwrap();
                assert!(
                    want == ["*"] || (c.start_ns >= p.start_ns && c.end_ns() <= p.end_ns()),
                    "{target}: {name} inside its parent's time: {c:?} in {p:?}"
                );
            }
        }
        open.push(c);
    }
}

/// What differs on Cortex-M: the clock is the 25 MHz timer (a tick every
/// 40 instructions under `-icount shift=0`, so short calls show no
/// duration), and the timer interrupt's calls come at two priorities: every
/// `irq_low` call (SysTick, low priority) holds exactly one `irq_tick` call
/// made by the interrupt it pends, which preempts it.
fn check_cortex_m(target: &str, run: &Run) {
    let t = &run.trace;
    let meta = t.meta();
    assert_eq!(meta.clock.source, "timer0", "{target}: the board's clock");
    assert_eq!(meta.clock.ticks_per_ns, 0.025, "{target}: timer0 at 25 MHz");
    let low = run.truth["irq_low"];
    assert!(low >= 20, "{target}: {low} irq_low calls");
    let mut open: Vec<Call> = Vec::new();
    let mut nested = 0u64;
    for c in t.calls() {
        while open.last().is_some_and(|p| p.depth >= c.depth) {
            open.pop();
        }
        let parent = open.last().map(|p| meta.site_name(p.site));
        if meta.site_name(c.site) == "irq_tick" && parent == Some("irq_low") {
            nested += 1;
        }
        open.push(c);
    }
    assert_eq!(nested, low, "{target}: irq_tick calls preempting irq_low");

    // The calls the firmware made longer than 2^32 ticks (each moved the
    // timer on by 5 x 2^30 ticks, 214.75 s, in a few hundred instructions;
    // the first through the general exit, the second through the plain
    // one): their 64-bit durations whole, and the calls after them (the
    // probe-cost loops, past 2^32 ticks) still inside the session, in order.
    let long: Vec<Call> = t
        .calls()
        .filter(|c| meta.site_name(c.site) == "long_call")
        .collect();
    assert_eq!(long.len(), 2, "{target}: {long:?}");
    let jump_ns = (5u64 << 30) * 40;
    for c in &long {
        assert!(
            (jump_ns..jump_ns + 1_000_000).contains(&c.dur_ns),
            "{target}: long_call lasted {} ns, the clock moved {jump_ns} ns",
            c.dur_ns
        );
    }
    let after: Vec<Call> = t
        .calls()
        .filter(|c| c.start_ns >= long[1].end_ns())
        .collect();
    assert!(
        after.len() as u64 >= run.truth["probe_cost_leaf"]
            && after.windows(2).all(|w| w[0].start_ns <= w[1].start_ns),
        "{target}: {} calls after long_call",
        after.len()
    );
}

#[test]
fn cortex_m3_firmware_matches_its_ground_truth() {
    check("m3");
}

#[test]
fn cortex_m4f_firmware_matches_its_ground_truth() {
    check("m4f");
}

/// Over RTT: the same firmware with its stream on an RTT up-channel and its
/// commands on the down-channel, read through qemu's GDB server (its UART
/// goes nowhere), decodes to exactly its ground truth too. It reuses the
/// firmware build of the UART test (the `rtt` binary is one more of its
/// binaries).
#[test]
fn cortex_m3_firmware_over_rtt_matches_its_ground_truth() {
    check_over_rtt("m3");
}

/// The UART checks on `target`'s firmware streamed over RTT, and that it
/// was read over RTT.
fn check_over_rtt(target: &str) {
    let run = run_over(target, false, "mcycle", false, false, false, "rtt");
    if let Some(r) = &run {
        assert!(
            r.stderr.contains("fgtrace board: RTT: ") && r.stderr.contains(" polls over "),
            "read over RTT: {}",
            r.stderr
        );
    }
    check_run(target, run);
}

/// The same over RTT on the Cortex-M4F (mps2-an386, hard-float ABI: its
/// exception frames may hold the FP state).
#[test]
fn cortex_m4f_firmware_over_rtt_matches_its_ground_truth() {
    check_over_rtt("m4f");
}

/// Over RTT with the channel in skip mode and a stream faster than the
/// polling drains (sampling at 500 kHz): the firmware drops whole frames
/// rather than wait, and the host shows what never arrived as lost.
#[test]
fn cortex_m3_over_rtt_in_skip_mode_shows_what_it_dropped() {
    if !tools_present("m3") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("board-m3-rtt-skip");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("run.fgt");
    let r = Command::new(root().join("boards/qemu-cortex-m/run.sh"))
        .arg("m3")
        .arg(&out)
        .arg("500000")
        .env("TRANSPORT", "rtt")
        .env("RTT_MODE", "skip")
        .env("FGTRACE_BIN", env!("CARGO_BIN_EXE_fgtrace"))
        .output()
        .expect("run.sh runs");
    let console = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{console}\n{stderr}");
    let truth: u64 = console
        .lines()
        .filter_map(|l| l.strip_prefix("truth "))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let trace = Trace::load(&out).expect("a trace");
    let meta = trace.meta();
    let (calls, lost) = (meta.total_calls(), meta.total_lost());
    assert!(
        calls < truth && lost > 0,
        "frames dropped and counted: {calls} calls, {lost} lost, {truth} made\n{stderr}"
    );
    // The session's last frames wait for the host even in skip mode, so
    // the session ends, and what arrived and what is counted lost add up to
    // exactly what the firmware made: the dropped frames' records that are
    // not calls (the async fn's futures and their extension records) are
    // not counted as lost calls.
    assert!(
        !stderr.contains("cut short"),
        "the last frames arrived: {stderr}"
    );
    assert_eq!(
        calls + lost,
        truth,
        "{calls} calls + {lost} lost, {truth} made\n{stderr}"
    );
}

/// `--gdb` to a firmware that never sets an RTT control block up (the `dwt`
/// binary exits at init): the host says so when the target ends, rather
/// than waiting or writing an empty trace.
#[test]
fn cortex_m_over_rtt_without_a_control_block_is_a_clear_error() {
    if !tools_present("m3") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("board-m3-rtt-none");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("run.fgt");
    let r = Command::new(root().join("boards/qemu-cortex-m/run.sh"))
        .arg("m3")
        .arg(&out)
        .env("CLOCK", "dwt")
        .env("TRANSPORT", "rtt")
        .env("FGTRACE_BIN", env!("CARGO_BIN_EXE_fgtrace"))
        .output()
        .expect("run.sh runs");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "the target ended (exited with status 4) before it set an RTT control block up"
        ),
        "{stderr}"
    );
    assert!(!out.exists(), "no trace written");
}

/// A firmware that names DWT CYCCNT, which qemu does not count, gets the
/// runtime's refusal on the stream, not a trace of zeros.
#[test]
fn cortex_m_with_a_dwt_that_does_not_count_is_refused() {
    if !tools_present("m3") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("board-m3-dwt");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("run.fgt");
    let r = Command::new(root().join("boards/qemu-cortex-m/run.sh"))
        .arg("m3")
        .arg(&out)
        .env("CLOCK", "dwt")
        .env("FGTRACE_BIN", env!("CARGO_BIN_EXE_fgtrace"))
        .output()
        .expect("run.sh runs");
    let console = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success(),
        "recorded with a stopped clock:\n{console}"
    );
    assert!(
        console.contains("the clock `cyccnt` does not advance")
            && console.contains("name a running timer with Clock::counter"),
        "the refusal:\n{console}\n{stderr}"
    );
    assert!(
        stderr.contains("no recording session in the stream"),
        "{stderr}"
    );
    assert!(!out.exists(), "no trace written");
}

#[test]
fn riscv64gc_firmware_matches_its_ground_truth() {
    check("riscv64gc");
}

/// The same firmware built for one hart (`single-hart`: no hart test on
/// the probe's path).
#[test]
fn riscv64gc_firmware_built_for_one_hart_matches_its_ground_truth() {
    check_run(
        "riscv64gc",
        run_full("riscv64gc", false, "mcycle", false, true, false),
    );
}

#[test]
fn riscv32imac_firmware_matches_its_ground_truth() {
    check("riscv32imac");
}

#[test]
fn x86_64_firmware_matches_its_ground_truth() {
    check("x86_64");
}

/// The firmware's `losses` build: in the host's session, calls recorded,
/// then a stop from inside three nested traced calls (`stop_inside`), which
/// end after the session: none recorded, 3 counted lost and named as still
/// open at stop, none left over for the next session; in a session the
/// firmware starts itself, calls recorded, then two tasks' calls
/// interleaved on the hart's shadow stack, as a task switch leaves them:
/// `task_a` returns first, popping `task_b`'s frame with its own, so
/// `task_b`'s exit finds its frame gone: recorded nowhere, 1 counted lost;
/// then a call (`across_sessions`) that stops that session and starts a
/// third before it returns: counted lost (open at stop) in the second
/// session, recorded in neither, the third recording only its own call.
/// Every count exact against the firmware's own, in the traces and in what
/// `fgtrace board` prints.
fn check_losses(target: &str) {
    let Some(run) = run_with(target, false, "mcycle", true) else {
        return;
    };
    let truth = |name: &str| -> u64 {
        *run.truth
            .get(name)
            .unwrap_or_else(|| panic!("{target}: no truth for {name}: {}", run.console))
    };
    let per_function = |t: &Trace| -> BTreeMap<String, u64> {
        let mut calls = BTreeMap::new();
        for c in t.calls() {
            *calls
                .entry(t.meta().site_name(c.site).to_string())
                .or_default() += 1;
        }
        calls
    };
    assert_eq!(
        (
            truth("stop_inside"),
            truth("task_a"),
            truth("task_b"),
            truth("across_sessions"),
            truth("in_third_session")
        ),
        (3, 1, 1, 1, 1),
        "{target}: {}",
        run.console
    );

    let first = &run.trace;
    assert_eq!(
        per_function(first),
        BTreeMap::from([("fib".to_string(), truth("fib"))]),
        "{target}: session 1 records fib, and no call open at its stop"
    );
    assert_eq!(first.meta().total_lost(), 3, "{target}: open at stop");
    assert_eq!(
        first.meta().warnings,
        [
            "hart 0: 3 calls still open at stop: not recorded (they ended after the session), \
          counted lost"
        ],
        "{target}"
    );

    let second = Trace::load(run.path.with_file_name("run-2.fgt"))
        .unwrap_or_else(|e| panic!("{target}: the second session's trace: {e}"));
    assert_eq!(
        per_function(&second),
        BTreeMap::from([
            ("crc32".to_string(), truth("crc32")),
            ("crc32_byte".to_string(), truth("crc32_byte")),
            ("task_a".to_string(), 1),
        ]),
        "{target}: session 2 records its own calls, none of session 1's"
    );
    // The sites' first calls in a session take the shadow stack (lean
    // calls or not): task B's frame is gone at its exit; `across_sessions`
    // is open at the stop.
    assert_eq!(
        second.meta().total_lost(),
        2,
        "{target}: task_b's guard, across_sessions"
    );
    assert_eq!(
        second.meta().warnings,
        [
            "hart 0: 1 call still open at stop: not recorded (they ended after the session), \
          counted lost"
        ],
        "{target}"
    );
    // `across_sessions` ends in the third session, which it did not begin
    // in: not recorded there, nor counted again.
    let third = Trace::load(run.path.with_file_name("run-3.fgt"))
        .unwrap_or_else(|e| panic!("{target}: the third session's trace: {e}"));
    assert_eq!(
        per_function(&third),
        BTreeMap::from([("in_third_session".to_string(), 1)]),
        "{target}: session 3 records its own call, none begun before it"
    );
    assert_eq!(third.meta().total_lost(), 0, "{target}");
    assert!(third.meta().warnings.is_empty(), "{target}");
    assert!(
        !run.path.with_file_name("run-4.fgt").exists(),
        "{target}: three sessions"
    );

    // `fgtrace board` says so.
    let fib = truth("fib");
    let crc = truth("crc32") + truth("crc32_byte");
    for line in [
        format!("session 1: {fib} calls (3 lost)"),
        "session 1: hart 0: 3 calls still open at stop".to_string(),
        format!("session 2: {} calls (2 lost)", crc + 1),
        "session 2: hart 0: 1 call still open at stop".to_string(),
        "session 3: 1 calls (0 lost)".to_string(),
    ] {
        assert!(
            run.stderr.contains(&line),
            "{target}: `{line}` in:\n{}",
            run.stderr
        );
    }
}

#[test]
fn riscv64gc_board_losses_are_counted_and_shown() {
    check_losses("riscv64gc");
}

/// The same on x86_64, whose plain exit tests the frame by the guard's slot
/// (riscv64gc's by the depth).
#[test]
fn x86_64_board_losses_are_counted_and_shown() {
    check_losses("x86_64");
}

/// The same on the Cortex-M3, whose probe keeps a shadow-stack frame for
/// every call (its clock repeats: no lean calls).
#[test]
fn cortex_m3_board_losses_are_counted_and_shown() {
    check_losses("m3");
}

/// The firmware's `harts2` build on two harts: hart 1 runs a traced
/// workload of its own beside hart 0's rounds, then parks inside three
/// traced calls (`hart1_park`) with five calls recorded since its last
/// flush; hart 0 stops the session. Hart 1's calls that arrived plus those
/// the host counts lost on it equal its ground truth exactly (its open
/// calls and its unsent records are counted, nothing is silently missing),
/// `fgtrace board` names both losses, and hart 0's calls are all there,
/// none lost.
#[test]
fn riscv64gc_a_stop_counts_the_calls_another_hart_still_holds() {
    let target = "riscv64gc";
    let Some(run) = run_full(target, false, "mcycle", false, false, true) else {
        return;
    };
    let t = &run.trace;
    let meta = t.meta();
    let hart1 = ["hart1_work", "hart1_leaf", "hart1_park"];
    let truth1: u64 = hart1.iter().map(|n| run.truth[*n]).sum();
    assert_eq!(run.truth["hart1_park"], 3, "{}", run.console);
    assert!(
        run.truth["hart1_leaf"] > 1000,
        "hart 1 ran a while: {:?}",
        run.truth
    );
    let mut calls: [BTreeMap<String, u64>; 2] = Default::default();
    for c in t.calls() {
        assert!(c.thread < 2, "hart {}", c.thread);
        *calls[c.thread as usize]
            .entry(meta.site_name(c.site).to_string())
            .or_default() += 1;
    }
    let lost = |hart: u32| {
        (meta.threads.iter())
            .find(|x| x.tid == hart)
            .map_or(0, |x| x.lost)
    };
    // Hart 0: every call, none lost.
    let truth0: BTreeMap<String, u64> = (run.truth.iter())
        .filter(|(n, _)| !hart1.contains(&n.as_str()))
        .map(|(n, c)| (n.clone(), *c))
        .collect();
    assert_eq!(calls[0], truth0, "hart 0's calls");
    assert_eq!(lost(0), 0, "hart 0's losses");
    // Hart 1: what arrived and what is counted lost, exactly its truth.
    for (name, n) in &calls[1] {
        assert!(
            hart1.contains(&name.as_str()) && *n <= run.truth[name],
            "hart 1: {n} calls of {name}: {:?}",
            run.truth
        );
    }
    let arrived: u64 = calls[1].values().sum();
    assert_eq!(
        arrived + lost(1),
        truth1,
        "hart 1: {arrived} calls arrived, {} counted lost, {truth1} made:\n{}",
        lost(1),
        run.stderr
    );
    // Its three open calls and its five unsent records, named.
    assert_eq!(lost(1), 3 + 5, "{}", run.stderr);
    for line in [
        "session 1: hart 1: 3 calls still open at stop",
        "session 1: hart 1: 5 calls written on the board never arrived",
    ] {
        assert!(run.stderr.contains(line), "`{line}` in:\n{}", run.stderr);
    }
}

/// `Board::count_instructions`: every call carries its `minstret` delta,
/// named in the stream; the trace has the counter per call, inclusive
/// figures cover the callees', and `report` shows instructions per function.
#[test]
fn riscv64gc_calls_record_their_instructions_when_the_board_counts_them() {
    let Some(run) = run_with("riscv64gc", true, "mcycle", false) else {
        return;
    };
    let t = &run.trace;
    let meta = t.meta();
    // minstret, and mhpmcounter3, which the firmware programs to count
    // instructions too (the clock is mcycle: no `cycles` counter).
    assert_eq!(meta.counters, ["instructions", "hpm3_instructions"]);
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    let mut last: Option<Call> = None;
    let (mut with, mut without) = (0u64, 0u64);
    let mut leaf: BTreeMap<u64, u64> = BTreeMap::new();
    let mut fib_ok = 0u64;
    for e in t.events() {
        match e {
            Event::Call(c) => {
                if last.take().is_some() {
                    without += 1;
                }
                *calls.entry(meta.site_name(c.site).to_string()).or_default() += 1;
                last = Some(c);
            }
            Event::Counters(k) => {
                let c = last.take().expect("counters follow their call");
                with += 1;
                let instr = k.values[0];
                // The two counters count the same thing, read a few
                // instructions apart (with interrupts masked: an interrupt's
                // work is in both or in neither).
                let hpm = k.values[1];
                assert!(
                    instr.abs_diff(hpm) <= 64 && hpm > 0,
                    "{}: instructions {instr}, hpm3 {hpm}",
                    meta.site_name(c.site)
                );
                match meta.site_name(c.site) {
                    "probe_cost_leaf" => *leaf.entry(instr).or_default() += 1,
                    // fib(n > 1) runs two traced callees: more than a leaf's.
                    "fib" if c.has_children() && instr > 2 * 20 => fib_ok += 1,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    without += last.is_some() as u64;
    assert_eq!(calls, run.truth, "calls per function, counted too");
    assert_eq!(meta.total_lost(), 0);
    assert_eq!(
        without, 0,
        "{with} calls with their counter, {without} without"
    );
    // The leaf's calls all retire the same instructions (its body and the
    // probe's own between the two counter reads).
    assert_eq!(leaf.len(), 1, "probe_cost_leaf instructions: {leaf:?}");
    assert!(fib_ok > 1000, "{fib_ok} fib calls count their callees");
    let report = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .arg("report")
        .arg(&run.path)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains("Instr") && report.contains("Self instr"),
        "{report}"
    );
    // The clock is `mcycle`: IPC per function, inclusive and self. Under
    // `-icount` every instruction is a cycle, so a function of many
    // instructions shows 1.00 (the counters are read next to the clock).
    assert_split_work_ipc(&report, &["IPC", "Self IPC", "hpm3_instructions"]);
}

/// The same with `rdtime` as the clock: each call records its `mcycle`
/// delta too, as `cycles`, and IPC comes from it.
#[test]
fn riscv64gc_with_the_rdtime_clock_records_cycles_per_call() {
    let Some(run) = run_with("riscv64gc", true, "rdtime", false) else {
        return;
    };
    let t = &run.trace;
    let meta = t.meta();
    assert_eq!(meta.clock.source, "rdtime");
    assert_eq!(meta.clock.ticks_per_ns, 0.01, "rdtime at 10 MHz");
    assert_eq!(
        meta.counters,
        ["instructions", "cycles", "hpm3_instructions"]
    );
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for c in t.calls() {
        *calls.entry(meta.site_name(c.site).to_string()).or_default() += 1;
    }
    assert_eq!(calls, run.truth);
    assert_eq!(meta.total_lost(), 0);
    // Under -icount, mcycle counts instructions: cycles and instructions of
    // every call are close (read a few instructions apart).
    let mut last: Option<Call> = None;
    let mut checked = 0;
    for e in t.events() {
        match e {
            Event::Call(c) => last = Some(c),
            Event::Counters(k) => {
                let c = last.take().expect("counters follow their call");
                let (instr, cycles) = (k.values[0], k.values[1]);
                assert!(
                    instr.abs_diff(cycles) <= 64,
                    "{}: instructions {instr}, cycles {cycles}",
                    meta.site_name(c.site)
                );
                checked += 1;
            }
            _ => {}
        }
    }
    assert_eq!(checked, t.calls().count());
    let report = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .arg("report")
        .arg(&run.path)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert_split_work_ipc(&report, &["IPC", "Self IPC", "cycles", "hpm3_instructions"]);
}

/// The report's last columns are `last_columns` then `Function` (its header
/// cells two spaces or more apart), and `split_work`'s IPC, the first of
/// them, is 1.00 within 5%: under `-icount` every instruction is a cycle.
fn assert_split_work_ipc(report: &str, last_columns: &[&str]) {
    let header: Vec<&str> = report
        .lines()
        .find(|l| l.trim_end().ends_with("Function") && l.contains("IPC"))
        .unwrap_or_else(|| panic!("no IPC column:\n{report}"))
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let mut want = last_columns.to_vec();
    want.push("Function");
    assert!(
        header.ends_with(&want),
        "{header:?} does not end with {want:?}"
    );
    let row = report
        .lines()
        .find(|l| l.ends_with(" split_work"))
        .expect(report);
    let cells: Vec<&str> = row.split_whitespace().collect();
    let ipc: f64 = cells[cells.len() - 1 - last_columns.len()].parse().unwrap();
    assert!(
        (0.95..=1.05).contains(&ipc),
        "split_work IPC {ipc}:\n{report}"
    );
}

/// A capture of a real stream with bytes flipped, dropped and inserted:
/// decodes with the damage counted, never a panic, and every call that
/// arrives intact is kept.
#[test]
fn a_damaged_board_stream_decodes_with_its_losses_counted() {
    let Some(run) = run("riscv64gc") else { return };
    drop(run);
    // Record the raw stream once more, as bytes, straight from qemu.
    let fw = root()
        .join("boards/qemu-riscv/target/riscv64gc-unknown-none-elf/release/fgtrace-board-demo");
    let mut qemu = Command::new("qemu-system-riscv64")
        .args([
            "-machine", "virt", "-bios", "none", "-display", "none", "-monitor", "none",
        ])
        .args(["-icount", "shift=0", "-serial", "stdio", "-kernel"])
        .arg(&fw)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    qemu.stdin
        .take()
        .unwrap()
        .write_all(b"record 0 2000\n")
        .unwrap();
    let raw = qemu.wait_with_output().unwrap().stdout;
    assert!(raw.len() > 10_000, "{} bytes", raw.len());
    let whole = decode(&raw);
    let (whole_calls, whole_lost) = (whole.meta().total_calls(), whole.meta().total_lost());
    assert_eq!(whole_lost, 0);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..20 {
        let mut b = raw.clone();
        for _ in 0..1 + rnd() % 8 {
            let at = rnd() as usize % b.len();
            match rnd() % 3 {
                0 => b[at] ^= 1 << (rnd() % 8),
                1 => {
                    b.remove(at);
                }
                _ => b.insert(at, rnd() as u8),
            }
        }
        let t = decode(&b);
        let (calls, lost) = (t.meta().total_calls(), t.meta().total_lost());
        assert!(
            calls + lost >= whole_calls,
            "round {round}: {calls} calls + {lost} lost < {whole_calls}: a silent loss"
        );
        assert!(calls <= whole_calls, "round {round}: calls invented");
    }
}

/// Flight-recorder mode, started by a host command: the board keeps the
/// last 256 calls in each of its rings (the first hart's lean calls, and
/// the others) and sends them when the session stops; the trace holds the
/// calls since the later ring's oldest, the rest counted as overwritten.
#[test]
fn a_flight_recorder_session_keeps_the_last_calls_and_counts_the_rest() {
    let Some(stream) = run("riscv64gc") else {
        return;
    };
    // `flight 0` samples nothing, so no timer interrupt runs its traced calls.
    // The async fn's futures are records too, but not calls: those the ring
    // overwrote are not lost calls.
    let total: u64 = stream
        .truth
        .iter()
        .filter(|(name, _)| !name.starts_with("irq_"))
        .map(|(_, n)| n)
        .sum::<u64>();
    let fw = root()
        .join("boards/qemu-riscv/target/riscv64gc-unknown-none-elf/release/fgtrace-board-demo");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("board-flight.fgt");
    let r = Command::new(env!("CARGO_BIN_EXE_fgtrace"))
        .args([
            "board",
            "-o",
            out.to_str().unwrap(),
            "--elf",
            fw.to_str().unwrap(),
        ])
        .args(["-c", "flight 0", "--", "qemu-system-riscv64"])
        .args([
            "-machine", "virt", "-bios", "none", "-display", "none", "-monitor", "none",
        ])
        .args(["-icount", "shift=0", "-serial", "stdio", "-kernel"])
        .arg(&fw)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let t = Trace::load(&out).unwrap();
    let meta = t.meta();
    assert_eq!(meta.mode, fgtrace_trace::RecordMode::FlightRecorder);
    let kept = meta.total_calls();
    assert!((256..=512).contains(&kept), "the rings' size: {kept}");
    assert_eq!(
        meta.total_calls() + meta.total_lost(),
        total,
        "the rest counted"
    );
    // The last calls: the probe-cost loop's leaf, which ran last.
    let last = t.calls().last().unwrap();
    assert_eq!(meta.site_name(last.site), "probe_cost_leaf");
}

fn decode(bytes: &[u8]) -> Trace {
    let mut d = fgtrace_import::board_stream::Decoder::new();
    for chunk in bytes.chunks(4093) {
        d.push(chunk);
    }
    let (sessions, _) = d.finish();
    assert!(!sessions.is_empty(), "a session survives");
    sessions
        .into_iter()
        .max_by_key(|s| s.stats().len())
        .unwrap()
        .into_trace(Vec::new())
}
