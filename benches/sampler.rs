//! Sampler overhead and delivered samples, side by side with pprof-rs and
//! `perf record`, on one fixed 2-thread workload.
//!
//! Every mode runs in its own child process (this binary re-executed with
//! `--child <mode>`), modes interleaved, `--runs N` rounds (default 5), and
//! the table shows medians:
//!
//! * `none`: the workload alone,
//! * `fgtrace@1k`, `fgtrace@10k`: `Sampling::timer(hz)` (a `cpu-clock`
//!   perf ring with kernel call chains where the kernel allows it),
//! * `fgsignal@1k`, `fgsignal@10k`: `Sampling::timer(hz)` on the signal path
//!   (`Backend::Signal`: the handler walks the frame pointers),
//! * `pprof@1k`, `pprof@10k`: pprof-rs `ProfilerGuardBuilder::frequency(hz)`,
//! * `perf@1k`, `perf@10k`: `perf record -e cpu-clock:u -F <hz> -g --call-graph fp`
//!   around `--child none` (only where `perf` is installed and works).
//!
//! The workload: 2 threads, each a fixed amount of work in rounds of
//! pseudo-random length (fixed-length rounds phase-lock with the timer), split
//! 3 : 1 between `work_three` and `work_one`.
//!
//! Columns (medians over the runs; CPU figures are taken against `none`'s
//! run of the same round, seconds apart, as the host's speed drifts):
//! * `delivered` = samples / (rate × thread CPU seconds), per worker thread;
//! * `lost` = samples the tool itself counted as lost (fgtrace: full buffers);
//! * `thread CPU` = the two workers' CPU time (`CLOCK_THREAD_CPUTIME_ID`)
//!   over `none`'s; `proc CPU` = the child process's CPU time from just
//!   before sampling starts to the workers' end (so with fgtrace's own
//!   threads, without stop and report building); `whole` = the child's CPU
//!   from `getrusage(RUSAGE_CHILDREN)` (with stop, report building, and for
//!   perf the perf tool itself);
//! * `thread cycles` = the workers' CPU cycles (user + kernel where allowed)
//!   over `none`'s: cycles of this ALU-bound loop barely move with other
//!   load or the clock frequency, but miss what the hypervisor spends on the
//!   guest's behalf (timer and IPI exits), which CPU time includes;
//! * `µs per sample`, `cycles per sample` = the workers' extra CPU time and
//!   cycles over `none`'s, per sample taken;
//! * `split` = work_three : work_one samples per thread (true: 3.00).
//!
//! Diagnostic modes, only with `--only`: `session` (an fgtrace session, no
//! sampling), `fgflight@1k`, `fgflight@10k` (sampling in flight-recorder
//! mode: no collector thread), `fgring@1k`, `fgring@10k` (fgtrace's
//! perf_event ring backend, `Sampling::perf(PerfEvent::CpuClock, hz)`: the
//! kernel walks the stack, no signal).
//!
//! CPU-time figures suffer when other processes share the cores: before each
//! child the bench waits (at most `--max-wait` s, default 10) for the machine
//! to be nearly idle, and logs the CPU the rest of the machine used meanwhile.
//!
//! Linux only (perf_event, /proc). Run:
//! `cargo bench --bench sampler [-- --runs N] [--only mode,mode] [--max-wait S]`.

fn main() {
    #[cfg(target_os = "linux")]
    bench::main();
    #[cfg(not(target_os = "linux"))]
    eprintln!("the sampler bench runs on Linux only");
}

#[cfg(target_os = "linux")]
mod bench {
    use std::collections::HashMap;
    use std::hint::black_box;
    use std::io::Read;
    use std::process::{Command, Stdio};

    const THREADS: u64 = 2;
    /// Work units per thread (about 1.25 s of CPU on the reference VM).
    const UNITS_PER_THREAD: u64 = 500_000;

    const MODES: [&str; 9] = [
        "none",
        "fgtrace@1k",
        "fgtrace@10k",
        "fgsignal@1k",
        "fgsignal@10k",
        "pprof@1k",
        "pprof@10k",
        "perf@1k",
        "perf@10k",
    ];

    // ---------------------------------------------------------------- workload

    /// Inlined into both work functions, so the interrupted PC is in them.
    #[inline(always)]
    fn spin(units: u64) -> u64 {
        let mut x = 0u64;
        for i in 0..units * 2000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
        x
    }

    #[inline(never)]
    fn work_three(units: u64) -> u64 {
        spin(3 * units)
    }

    #[inline(never)]
    fn work_one(units: u64) -> u64 {
        spin(units)
    }

    /// A fixed amount of work: the same pseudo-random rounds in every mode.
    fn busy(seed: u64) -> u64 {
        let mut r = seed | 1;
        let mut acc = 0;
        let mut done = 0;
        while done < UNITS_PER_THREAD {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let units = 1 + r % 40;
            acc ^= work_three(units);
            acc ^= work_one(units);
            done += 4 * units;
        }
        acc
    }

    fn thread_cpu() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: plain clock read into a local.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }

    fn rusage_secs(ru: &libc::rusage) -> f64 {
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }

    fn process_cpu() -> f64 {
        // SAFETY: getrusage into a zeroed local.
        unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_SELF, &mut ru);
            rusage_secs(&ru)
        }
    }

    struct Worker {
        tid: u32,
        name: String,
        cpu: f64,
        cycles: u64,
    }

    /// A counter of this thread's CPU cycles, user + kernel where allowed (the
    /// interrupt and signal paths run in the kernel), else user only; `None`
    /// without a PMU. Unlike CPU time, cycles of this ALU-bound loop hardly
    /// change when other processes load the machine or the clock frequency moves.
    fn cycles_counter() -> Option<i32> {
        use perf_event_open_sys as sys;
        for exclude_kernel in [0, 1] {
            let mut a = sys::bindings::perf_event_attr {
                type_: sys::bindings::PERF_TYPE_HARDWARE,
                size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
                config: sys::bindings::PERF_COUNT_HW_CPU_CYCLES as u64,
                ..Default::default()
            };
            a.set_exclude_hv(1);
            a.set_exclude_kernel(exclude_kernel);
            // SAFETY: a valid attr; this thread, any CPU, no group.
            let fd = unsafe {
                sys::perf_event_open(
                    &mut a,
                    0,
                    -1,
                    -1,
                    sys::bindings::PERF_FLAG_FD_CLOEXEC as u64,
                )
            };
            if fd >= 0 {
                KERNEL_CYCLES.store(exclude_kernel == 0, std::sync::atomic::Ordering::Relaxed);
                return Some(fd);
            }
        }
        None
    }

    static KERNEL_CYCLES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    fn read_counter(fd: Option<i32>) -> u64 {
        let Some(fd) = fd else { return 0 };
        let mut v = 0u64;
        // SAFETY: reading 8 bytes from our counter, then closing it.
        unsafe {
            libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8);
            libc::close(fd);
        }
        v
    }

    /// Runs the two workers; returns them with their CPU time.
    fn run_workers() -> Vec<Worker> {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("busy-{i}"))
                    .spawn(move || {
                        // SAFETY: gettid has no preconditions.
                        let tid = unsafe { libc::syscall(libc::SYS_gettid) as u32 };
                        let counter = cycles_counter();
                        black_box(busy(0x9e3779b97f4a7c15 ^ (i * 0x2545f4914f6cdd1d)));
                        Worker {
                            tid,
                            name: format!("busy-{i}"),
                            cpu: thread_cpu(),
                            cycles: read_counter(counter),
                        }
                    })
                    .unwrap()
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    // ------------------------------------------------- function address ranges

    /// `[lo, hi)` of `work_three` and `work_one` in this process, from the ELF
    /// symbol table of /proc/self/exe (no symbolizer dependency).
    fn work_ranges() -> [(u64, u64); 2] {
        let exe = std::fs::read("/proc/self/exe").expect("read /proc/self/exe");
        let u16_at = |o: usize| u16::from_le_bytes(exe[o..o + 2].try_into().unwrap()) as usize;
        let u32_at = |o: usize| u32::from_le_bytes(exe[o..o + 4].try_into().unwrap()) as usize;
        let u64_at = |o: usize| u64::from_le_bytes(exe[o..o + 8].try_into().unwrap());
        assert!(
            exe.len() > 64 && &exe[..4] == b"\x7fELF" && exe[4] == 2 && exe[5] == 1,
            "a 64-bit little-endian ELF"
        );
        let (shoff, shentsize, shnum) = (u64_at(0x28) as usize, u16_at(0x3a), u16_at(0x3c));
        let section = |i: usize| shoff + i * shentsize;
        let wanted = [
            ("10work_three", work_three as *const () as u64),
            ("8work_one", work_one as *const () as u64),
        ];
        let mut out = [(0u64, 0u64); 2];
        for i in 0..shnum {
            let sh = section(i);
            if u32_at(sh + 4) != 2 {
                continue; // SHT_SYMTAB only
            }
            let (off, size, entsize) = (
                u64_at(sh + 0x18) as usize,
                u64_at(sh + 0x20) as usize,
                u64_at(sh + 0x38) as usize,
            );
            let strtab = u64_at(section(u32_at(sh + 0x28)) + 0x18) as usize;
            for s in (off..off + size).step_by(entsize.max(24)) {
                let name_at = strtab + u32_at(s);
                let end = exe[name_at..].iter().position(|&b| b == 0).unwrap_or(0);
                let name = &exe[name_at..name_at + end];
                for (k, (needle, addr)) in wanted.iter().enumerate() {
                    if name.starts_with(b"_ZN7sampler")
                        && name.windows(needle.len()).any(|w| w == needle.as_bytes())
                    {
                        let (value, size) = (u64_at(s + 8), u64_at(s + 16));
                        let bias = addr.wrapping_sub(value);
                        out[k] = (value.wrapping_add(bias), value.wrapping_add(bias) + size);
                    }
                }
            }
        }
        assert!(
            out.iter().all(|r| r.1 > r.0),
            "symbols of work_three/work_one not found: {out:x?}"
        );
        out
    }

    fn classify(frames: impl IntoIterator<Item = u64>, r: &[(u64, u64); 2], counts: &mut [u64; 2]) {
        let mut seen = [false; 2];
        for a in frames {
            for (k, (lo, hi)) in r.iter().enumerate() {
                seen[k] |= a >= *lo && a < *hi;
            }
        }
        for (n, seen) in counts.iter_mut().zip(seen) {
            *n += seen as u64;
        }
    }

    // ------------------------------------------------------------------ child

    fn hz_of(mode: &str) -> u64 {
        let rate = mode.split('@').nth(1).unwrap_or("0");
        match rate.strip_suffix('k') {
            Some(k) => k.parse::<u64>().unwrap() * 1000,
            None => rate.parse().unwrap(),
        }
    }

    /// Per worker: samples, lost, work_three and work_one samples.
    type Counts = HashMap<String, (u64, u64, [u64; 2])>;

    fn child(mode: &str) {
        let r = work_ranges();
        let cpu0 = process_cpu();
        let tool = mode.split('@').next().unwrap();
        let (workers, window, counts): (Vec<Worker>, f64, Option<Counts>) = match tool {
            "none" => {
                let w = run_workers();
                (w, process_cpu() - cpu0, None)
            }
            "session" => {
                // Diagnostic: an fgtrace session that records calls, no sampling.
                let session = fgtrace::Session::start(fgtrace::Config::builtin()).expect("session");
                let w = run_workers();
                let window = process_cpu() - cpu0;
                drop(session.stop());
                (w, window, None)
            }
            "fgtrace" | "fgsignal" | "fgflight" | "fgring" => {
                let config = match tool {
                    // Diagnostic: flight-recorder mode has no collector thread.
                    "fgflight" => fgtrace::Config::builtin().flight_recorder(65536),
                    _ => fgtrace::Config::builtin(),
                };
                let sampling = match tool {
                    // Diagnostic: the perf_event ring backend (kernel-walked
                    // call chains, no signal), on the same cpu-clock.
                    "fgring" => fgtrace::sampler::Sampling::perf(
                        fgtrace::sampler::PerfEvent::CpuClock,
                        hz_of(mode),
                    ),
                    // The signal path: `timer` takes it where the kernel
                    // refuses the ring.
                    "fgsignal" => fgtrace::sampler::Sampling::timer(hz_of(mode))
                        .backend(fgtrace::sampler::Backend::Signal),
                    _ => fgtrace::sampler::Sampling::timer(hz_of(mode)),
                };
                let session = fgtrace::Session::start(config.sampling(sampling))
                    .expect("fgtrace sampling starts");
                let w = run_workers();
                let window = process_cpu() - cpu0;
                let trace = session.stop().expect("fgtrace stops");
                let m = trace.meta();
                eprintln!(
                    "{mode}: sampled by {}",
                    m.sampler.as_deref().unwrap_or("(not said)")
                );
                let mut by_index: HashMap<u32, String> = HashMap::new();
                let mut counts = Counts::new();
                for wk in &w {
                    if let Some(i) = m.threads.iter().position(|t| t.tid == wk.tid) {
                        by_index.insert(i as u32, wk.name.clone());
                        let t = &m.threads[i];
                        counts.insert(wk.name.clone(), (t.samples, t.samples_lost, [0; 2]));
                    }
                }
                for e in trace.events() {
                    if let fgtrace::Event::Sample(s) = e {
                        if let Some(name) = by_index.get(&s.thread) {
                            classify(
                                s.frames.iter().copied(),
                                &r,
                                &mut counts.get_mut(name).unwrap().2,
                            );
                        }
                    }
                }
                (w, window, Some(counts))
            }
            "pprof" => {
                let guard = pprof::ProfilerGuardBuilder::default()
                    .frequency(hz_of(mode) as i32)
                    .build()
                    .expect("pprof starts");
                let w = run_workers();
                let window = process_cpu() - cpu0;
                let report = guard.report().build().expect("pprof report");
                drop(guard);
                let mut counts = Counts::new();
                for (frames, &n) in &report.data {
                    let e = counts
                        .entry(frames.thread_name.clone())
                        .or_insert((0, 0, [0; 2]));
                    e.0 += n as u64;
                    let names: Vec<String> =
                        frames.frames.iter().flatten().map(|s| s.name()).collect();
                    for (k, f) in ["work_three", "work_one"].iter().enumerate() {
                        if names.iter().any(|n| n.contains(f)) {
                            e.2[k] += n as u64;
                        }
                    }
                }
                (w, window, Some(counts))
            }
            other => panic!("unknown child mode `{other}`"),
        };
        println!("window {window:.6}");
        println!(
            "kernel_cycles {}",
            KERNEL_CYCLES.load(std::sync::atomic::Ordering::Relaxed) as u8
        );
        println!("range {:x} {:x} {:x} {:x}", r[0].0, r[0].1, r[1].0, r[1].1);
        for w in &workers {
            print!("thread {} {} {:.6} {}", w.tid, w.name, w.cpu, w.cycles);
            if let Some((n, lost, k)) = counts.as_ref().and_then(|c| c.get(&w.name)) {
                print!(" {n} {lost} {} {}", k[0], k[1]);
            }
            println!();
        }
    }

    // ----------------------------------------------------------------- parent

    #[derive(Clone, Debug, Default)]
    struct ThreadResult {
        name: String,
        cpu: f64,
        cycles: u64,
        samples: u64,
        lost: u64,
        split: [u64; 2],
    }

    #[derive(Clone, Debug, Default)]
    struct RunResult {
        kernel_cycles: bool,
        window: f64,
        whole: f64,
        threads: Vec<ThreadResult>,
    }

    fn children_cpu() -> f64 {
        // SAFETY: getrusage into a zeroed local.
        unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
            rusage_secs(&ru)
        }
    }

    /// Runs `cmd`, returns its stdout and its CPU time (user + sys, with the
    /// children it waited for, such as perf's workload): the growth of
    /// `getrusage(RUSAGE_CHILDREN)` over its run (this process reaps no other
    /// child meanwhile).
    fn run_measured(mut cmd: Command) -> (String, f64) {
        let before = children_cpu();
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn child");
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let status = child.wait().expect("wait for the child");
        assert!(status.success(), "child failed ({status}): {cmd:?}");
        (out, children_cpu() - before)
    }

    fn parse_child(out: &str, whole: f64) -> (RunResult, [(u64, u64); 2]) {
        let mut res = RunResult {
            whole,
            ..Default::default()
        };
        let mut ranges = [(0, 0); 2];
        for line in out.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.first().copied() {
                Some("window") => res.window = f[1].parse().unwrap(),
                Some("kernel_cycles") => res.kernel_cycles = f[1] == "1",
                Some("range") => {
                    let h = |s: &str| u64::from_str_radix(s, 16).unwrap();
                    ranges = [(h(f[1]), h(f[2])), (h(f[3]), h(f[4]))];
                }
                Some("thread") => {
                    let n = |i: usize| f.get(i).map_or(0, |s| s.parse().unwrap());
                    res.threads.push(ThreadResult {
                        name: format!("{}:{}", f[2], f[1]),
                        cpu: f[3].parse().unwrap(),
                        cycles: n(4),
                        samples: n(5),
                        lost: n(6),
                        split: [n(7), n(8)],
                    });
                }
                _ => {}
            }
        }
        res.threads.sort_by(|a, b| a.name.cmp(&b.name));
        (res, ranges)
    }

    fn perf_works() -> bool {
        Command::new("perf")
            .args(["stat", "-e", "cpu-clock", "-x,", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn run_child(exe: &str, mode: &str, tag: &str) -> RunResult {
        if let Some(rate) = mode.strip_prefix("perf@") {
            let hz = hz_of(mode);
            let data = format!(
                "/tmp/fgtrace-bench-sampler-{}-{tag}-{rate}.data",
                std::process::id()
            );
            let mut cmd = Command::new("perf");
            cmd.args([
                "record",
                "-q",
                "-e",
                "cpu-clock:u",
                "-F",
                &hz.to_string(),
                "-g",
                "--call-graph",
                "fp",
                "-o",
                &data,
            ])
            .args(["--", exe, "--child", "none"]);
            let (out, whole) = run_measured(cmd);
            let (mut res, _) = parse_child(&out, whole);
            let script = Command::new("perf")
                .args(["script", "-i", &data, "-F", "tid,ip,sym"])
                .stderr(Stdio::null())
                .output()
                .expect("perf script");
            let _ = std::fs::remove_file(&data);
            let text = String::from_utf8_lossy(&script.stdout);
            // One line with the tid (right-aligned: maybe leading spaces) per
            // sample, then one tab-indented `addr symbol` line per frame
            // (addresses are file-relative for PIE, so match names).
            let mut per_tid: HashMap<u32, (u64, [u64; 2])> = HashMap::new();
            let mut cur: Option<(u32, [bool; 2])> = None;
            let mut flush = |cur: &mut Option<(u32, [bool; 2])>| {
                if let Some((tid, seen)) = cur.take() {
                    let e = per_tid.entry(tid).or_default();
                    e.0 += 1;
                    for (n, seen) in e.1.iter_mut().zip(seen) {
                        *n += seen as u64;
                    }
                }
            };
            for line in text.lines() {
                let t = line.trim();
                if t.is_empty() {
                    continue;
                }
                if !line.starts_with('\t') {
                    if let Ok(tid) = t.split_whitespace().next().unwrap_or("").parse::<u32>() {
                        flush(&mut cur);
                        cur = Some((tid, [false; 2]));
                    }
                    continue;
                }
                if let Some((_, seen)) = cur.as_mut() {
                    seen[0] |= t.contains("::work_three");
                    seen[1] |= t.contains("::work_one");
                }
            }
            flush(&mut cur);
            for t in &mut res.threads {
                let tid: u32 = t.name.rsplit(':').next().unwrap().parse().unwrap();
                if let Some((n, split)) = per_tid.get(&tid) {
                    t.samples = *n;
                    t.split = *split;
                }
            }
            res
        } else {
            let mut cmd = Command::new(exe);
            cmd.args(["--child", mode]);
            let (out, whole) = run_measured(cmd);
            parse_child(&out, whole).0
        }
    }

    /// (busy, total) CPU seconds of the whole machine so far, from /proc/stat.
    fn machine_cpu() -> (f64, f64) {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<f64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let total: f64 = f.iter().take(8).sum();
        let idle = f.get(3).copied().unwrap_or(0.0) + f.get(4).copied().unwrap_or(0.0);
        ((total - idle) / hz, total / hz)
    }

    /// Waits (up to `max_s`) until the rest of the machine is nearly idle, so
    /// that other processes disturb the CPU-time figures as little as possible.
    /// Returns the busy fraction last seen.
    fn wait_for_quiet(max_s: f64) -> f64 {
        let t0 = std::time::Instant::now();
        loop {
            let (b0, t0c) = machine_cpu();
            std::thread::sleep(std::time::Duration::from_millis(300));
            let (b1, t1c) = machine_cpu();
            let busy = (b1 - b0) / (t1c - t0c).max(1e-9);
            if busy < 0.1 || t0.elapsed().as_secs_f64() >= max_s {
                return busy;
            }
            std::thread::sleep(std::time::Duration::from_millis(700));
        }
    }

    fn median(mut v: Vec<f64>) -> f64 {
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        if let Some(i) = args.iter().position(|a| a == "--child") {
            child(&args[i + 1]);
            return;
        }
        let opt = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        let runs: usize = opt("--runs").map_or(5, |s| s.parse().expect("--runs N"));
        let max_wait: f64 =
            opt("--max-wait").map_or(10.0, |s| s.parse().expect("--max-wait SECONDS"));
        let only: Option<Vec<String>> =
            opt("--only").map(|s| s.split(',').map(str::to_string).collect());
        let exe = std::env::current_exe()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let have_perf = perf_works();
        let mut modes: Vec<&str> = MODES
            .iter()
            .copied()
            .filter(|m| m == &"none" || only.as_ref().is_none_or(|o| o.iter().any(|x| x == m)))
            .collect();
        // Diagnostic modes, only when asked for (see the top of the file).
        for extra in only.iter().flatten() {
            if extra == "session" || extra.starts_with("fgflight@") || extra.starts_with("fgring@")
            {
                modes.push(Box::leak(extra.clone().into_boxed_str()));
            }
        }
        if !have_perf {
            eprintln!("perf is not installed or does not work here: skipping perf@1k and perf@10k");
            modes.retain(|m| !m.starts_with("perf"));
        }
        println!(
        "sampler bench: {THREADS} threads × {UNITS_PER_THREAD} work units, true split 3.00, {runs} interleaved runs, modes: {}",
        modes.join(" ")
    );
        let mut results: HashMap<&str, Vec<RunResult>> = HashMap::new();
        for run in 0..runs {
            // Rotate the order each round so no mode always follows the same one.
            for k in 0..modes.len() {
                let mode = modes[(k + run) % modes.len()];
                let quiet = wait_for_quiet(max_wait);
                let (b0, _) = machine_cpu();
                let r = run_child(&exe, mode, &run.to_string());
                // CPU the rest of the machine used meanwhile (scheduler-tick precision).
                let others = (machine_cpu().0 - b0 - r.whole).max(0.0);
                let threads: Vec<String> = r
                    .threads
                    .iter()
                    .map(|t| {
                        format!(
                            "{} {:.3}s {:.3}Gc {}+{}lost {}:{}",
                            t.name,
                            t.cpu,
                            t.cycles as f64 / 1e9,
                            t.samples,
                            t.lost,
                            t.split[0],
                            t.split[1]
                        )
                    })
                    .collect();
                eprintln!(
                "run {run} {mode:<12} window {:.3}s whole {:.3}s others {others:.2}s (busy {:.0}% before) | {}",
                r.window,
                r.whole,
                quiet * 100.0,
                threads.join(" | ")
            );
                results.entry(mode).or_default().push(r);
            }
        }
        let none = &results["none"];
        let tcpu = |r: &RunResult| r.threads.iter().map(|t| t.cpu).sum::<f64>();
        let tcycles = |r: &RunResult| r.threads.iter().map(|t| t.cycles as f64).sum::<f64>();
        let samples = |r: &RunResult| r.threads.iter().map(|t| t.samples as f64).sum::<f64>();
        let have_cycles = none.iter().all(|r| tcycles(r) > 0.0);
        println!();
        println!(
        "| tool | rate | delivered busy-0 | delivered busy-1 | lost | thread CPU vs none | proc CPU vs none | whole vs none | thread cycles vs none | µs per sample | cycles per sample | split busy-0 | split busy-1 |"
    );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for mode in &modes {
            let rs = &results[mode];
            let (tool, hz) = (mode.split('@').next().unwrap(), hz_of(mode));
            // Each run against `none`'s run of the same round (seconds apart),
            // then the median: the host's speed drifts over minutes, which CPU
            // time shows and cycles do not.
            let ratio = |f: &dyn Fn(&RunResult) -> f64| {
                median(rs.iter().zip(none).map(|(a, b)| f(a) / f(b)).collect())
            };
            // Extra thread CPU (µs) and cycles per sample taken, over `none`.
            let per_sample = |f: &dyn Fn(&RunResult) -> f64, unit: f64| {
                median(
                    rs.iter()
                        .zip(none)
                        .map(|(a, b)| (f(a) - f(b)) * unit / samples(a).max(1.0))
                        .collect(),
                )
            };
            let per_thread = |i: usize, f: &dyn Fn(&ThreadResult) -> f64| {
                median(rs.iter().filter_map(|r| r.threads.get(i)).map(f).collect())
            };
            let delivered = |i| per_thread(i, &|t| t.samples as f64 / (hz as f64 * t.cpu));
            let split = |i| per_thread(i, &|t| t.split[0] as f64 / t.split[1].max(1) as f64);
            let lost = median(
                rs.iter()
                    .map(|r| r.threads.iter().map(|t| t.lost as f64).sum())
                    .collect(),
            );
            let (d0, d1, s0, s1) = if hz == 0 {
                ("-".into(), "-".into(), "-".into(), "-".into())
            } else {
                (
                    format!("{:.3}", delivered(0)),
                    format!("{:.3}", delivered(1)),
                    format!("{:.2}", split(0)),
                    format!("{:.2}", split(1)),
                )
            };
            let (cyc, us_per, cyc_per) = match (hz, have_cycles) {
                (0, _) => ("1.000".to_string(), "-".to_string(), "-".to_string()),
                (_, false) => (
                    "-".into(),
                    format!("{:.2}", per_sample(&tcpu, 1e6)),
                    "-".into(),
                ),
                (_, true) => (
                    format!("{:.3}", ratio(&tcycles)),
                    format!("{:.2}", per_sample(&tcpu, 1e6)),
                    format!("{:.0}", per_sample(&tcycles, 1.0)),
                ),
            };
            println!(
            "| {tool} | {} | {d0} | {d1} | {lost:.0} | {:.3} | {:.3} | {:.3} | {cyc} | {us_per} | {cyc_per} | {s0} | {s1} |",
            if hz == 0 {
                "-".to_string()
            } else {
                format!("{} Hz", hz)
            },
            ratio(&tcpu),
            ratio(&|r| r.window),
            ratio(&|r| r.whole),
        );
        }
        println!();
        println!(
        "none: median worker CPU {:.3} s per thread, process {:.3} s (window), {:.3} s (whole); cycles counted {}",
        median(none.iter().map(|r| tcpu(r) / THREADS as f64).collect()),
        median(none.iter().map(|r| r.window).collect()),
        median(none.iter().map(|r| r.whole).collect()),
        if !have_cycles {
            "nowhere (no PMU)"
        } else if none.iter().any(|r| r.kernel_cycles) {
            "in user and kernel mode"
        } else {
            "in user mode only"
        },
    );
    }
}
