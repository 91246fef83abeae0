//! The symbolizer against real binaries: a sampled session of this test
//! (demangled names, file:line in this file, the 3 : 1 proportions the
//! workload has), a stripped binary, a missing and a rebuilt one, and
//! inlined frames in a small C program built with gcc -O2 -g.
#![cfg(all(target_os = "linux", feature = "symbolize"))]

#[path = "support/tools.rs"]
mod tools;

use fgtrace::sampler::Sampling;
use fgtrace::symbolize::{ResolvedFrame, Symbolizer};
use fgtrace::trace::{Mapping, TraceReader};
use fgtrace::view::sampled::{SampledBuilder, SampledOptions, SampledSort};
use fgtrace::{Config, Event, Session};
use object::{Object, ObjectSegment, ObjectSymbol};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Sessions are process-wide: the tests here take turns recording.
static SERIAL: Mutex<()> = Mutex::new(());

// Lines of the work functions' bodies, to check file:line answers.
const WORK_THREE_LINES: (u32, u32) = (line!() + 2, line!() + 13);
#[inline(never)]
fn work_three(units: u64) -> u64 {
    // No calls in the loop, not even `Range::next` in a debug build: the
    // samples land in this function's own code.
    let (mut x, mut i, n) = (units | 1, 0u64, 3 * units * 4000);
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}
const WORK_ONE_LINES: (u32, u32) = (line!() + 2, line!() + 11);
#[inline(never)]
fn work_one(units: u64) -> u64 {
    let (mut x, mut i, n) = (units | 1, 0u64, units * 4000);
    while i < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        i += 1;
    }
    x
}

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Rounds of varying length, so the work cannot phase-lock with the timer,
/// for `ms` of this thread's CPU time (the timer samples CPU time: on a
/// loaded machine wall time would give fewer samples).
#[inline(never)]
fn busy(ms: u64) -> u64 {
    let t0 = thread_cpu_ns();
    let (mut r, mut acc) = (0x9e37_79b9_7f4a_7c15u64, 0);
    while thread_cpu_ns() - t0 < ms * 1_000_000 {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        let units = 1 + r % 40;
        acc ^= work_three(black_box(units));
        acc ^= work_one(black_box(units));
    }
    acc
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fgtrace-symbolize-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Records 1.2 s of the workload on a busy thread at 1 kHz, saves it, and
/// reads it back: symbolizing is what `fgtrace` does with a saved file.
fn recorded() -> (PathBuf, u32) {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let session =
        Session::start(Config::builtin().sampling(Sampling::timer(1000))).expect("sampling starts");
    let tid = std::thread::Builder::new()
        .name("busy".into())
        .spawn(|| {
            black_box(busy(1200));
            unsafe { libc::syscall(libc::SYS_gettid) as u32 }
        })
        .unwrap()
        .join()
        .unwrap();
    let trace = session.stop().unwrap();
    let path = tempdir("rec").join("run.fgt");
    trace.save(&path).unwrap();
    (path, tid)
}

fn in_this_file(f: &ResolvedFrame, lines: (u32, u32)) -> bool {
    f.file
        .as_deref()
        .is_some_and(|p| p.ends_with("tests/symbolize.rs"))
        && f.line.is_some_and(|l| (lines.0..=lines.1).contains(&l))
}

#[test]
fn a_sampled_session_resolves_to_the_work_functions_with_lines() {
    let (path, tid) = recorded();
    let r = TraceReader::open(&path).unwrap();
    let meta = r.meta().clone();
    let busy_thread = meta
        .threads
        .iter()
        .position(|t| t.tid == tid)
        .expect("busy thread sampled") as u32;

    // The runtime's hand-parsed build id of this executable is object's.
    let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
    let own = meta
        .mappings
        .iter()
        .find(|m| Path::new(&m.path) == exe)
        .expect("own mapping recorded");
    let data = std::fs::read(&exe).unwrap();
    let want = object::File::parse(&*data)
        .unwrap()
        .build_id()
        .unwrap()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>());
    assert!(want.is_some(), "the test binary has a GNU build id");
    assert_eq!(own.build_id, want);

    let mut sym = Symbolizer::new(&meta.mappings);
    let mut sym2 = Symbolizer::new(&meta.mappings);
    let opts = SampledOptions {
        threads: vec![tid.to_string().parse().unwrap()],
        sort: SampledSort::SelfSamples,
        limit: 0,
    };
    let mut counted = SampledBuilder::new(&meta, &opts, &mut sym2);
    let (mut samples, mut placed, mut shown) = (0, 0, 0);
    for ev in r.events() {
        let Event::Sample(s) = ev.unwrap() else {
            continue;
        };
        counted.sample(&s);
        if s.thread != busy_thread {
            continue;
        }
        samples += 1;
        let stack = sym.stack(&s.frames);
        // The interrupted code is one of the work functions (or `busy`
        // between calls): the innermost frame says which, with its line.
        let top = &stack[0];
        if top.name.ends_with("::work_three") || top.name.ends_with("::work_one") {
            let lines = if top.name.ends_with("work_three") {
                WORK_THREE_LINES
            } else {
                WORK_ONE_LINES
            };
            assert!(in_this_file(top, lines), "{top:?}");
            assert!(
                top.name.starts_with("symbolize::"),
                "demangled, no hash: {top:?}"
            );
            assert!(!top.inlined);
            // ... called from `busy` in this file (the frame-pointer walk
            // may miss a caller when the signal lands in a prologue).
            let caller = stack.get(1);
            if caller.is_some_and(|c| {
                c.name.ends_with("::busy")
                    && c.file
                        .as_deref()
                        .is_some_and(|f| f.ends_with("tests/symbolize.rs"))
            }) {
                placed += 1;
            }
        }
        if shown < 1 && top.name.ends_with("::work_three") {
            shown += 1;
            println!("sample {:x?}:", s.frames);
            for f in &stack {
                println!(
                    "  {} at {}:{}",
                    f.name,
                    f.file.as_deref().unwrap_or("?"),
                    f.line.unwrap_or(0)
                );
            }
        }
    }
    assert!(samples > 500, "1.2 s at 1 kHz gave only {samples} samples");
    assert!(
        placed as f64 > 0.9 * samples as f64,
        "only {placed} of {samples} samples in the work functions called from busy"
    );
    assert!(sym.warnings().is_empty(), "{:?}", sym.warnings());

    // Self and total per function: 3 : 1, and `busy` is in every stack.
    let report = counted.finish();
    let row = |suffix: &str| {
        report
            .rows
            .iter()
            .find(|r| r.name.ends_with(suffix))
            .cloned()
            .unwrap()
    };
    let (three, one, busy) = (row("::work_three"), row("::work_one"), row("::busy"));
    println!("{report:#?}");
    let ratio = three.self_samples as f64 / one.self_samples.max(1) as f64;
    assert!(
        (2.2..4.0).contains(&ratio),
        "work_three:work_one = {ratio:.2}"
    );
    assert_eq!(
        report.rows[0].name, three.name,
        "the hottest function is first"
    );
    assert_eq!(
        three.self_samples, three.total_samples,
        "work_three calls nothing"
    );
    assert!(busy.total_samples as f64 >= 0.98 * report.samples as f64);
}

/// Builds `src` (C) with gcc into `dir/name`.
fn gcc(dir: &Path, name: &str, src: &str, args: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(args)
        .arg(&c)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("gcc is needed for this test (apt-get install gcc)");
    assert!(st.success(), "gcc failed on {name}.c");
    out
}

const BASE: u64 = 0x7f12_3400_0000;

/// The whole file mapped at `BASE` (offset 0), as if loaded there.
fn whole_file(path: &Path, build_id: Option<&str>) -> Mapping {
    let len = std::fs::metadata(path).unwrap().len();
    Mapping {
        start: BASE,
        end: BASE + len,
        offset: 0,
        path: path.to_str().unwrap().into(),
        build_id: build_id.map(str::to_owned),
    }
}

/// The process address of link-time address `vaddr` under [`whole_file`].
fn addr_of(path: &Path, vaddr: u64) -> u64 {
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let seg = obj
        .segments()
        .find(|s| (s.address()..s.address() + s.file_range().1).contains(&vaddr))
        .expect("address in a PT_LOAD");
    BASE + vaddr - seg.address() + seg.file_range().0
}

/// `(vaddr, size)` of a symbol in `.symtab`.
fn symbol(path: &Path, name: &str) -> (u64, u64) {
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let s = obj
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    (s.address(), s.size())
}

fn build_id(path: &Path) -> Option<String> {
    let data = std::fs::read(path).unwrap();
    let id = object::File::parse(&*data).unwrap().build_id().unwrap()?;
    Some(id.iter().map(|x| format!("{x:02x}")).collect())
}

const LIB_C: &str = r#"
int exported_fn(int x) { int s = 0; for (int i = 0; i < x; i++) s += i * i; return s; }
static __attribute__((noinline)) int hidden_fn(int x) { return x * 7 + exported_fn(x); }
int entry(int x) { return hidden_fn(x) + 1; }
"#;

#[test]
fn stripped_missing_and_rebuilt_binaries_give_unknown_frames_never_a_panic() {
    let test = "symbolize::stripped_missing_and_rebuilt_binaries";
    if tools::tool("gcc", &["--version"], "gcc", test).is_none()
        || tools::tool("strip", &["--version"], "binutils", test).is_none()
    {
        return;
    }
    let dir = tempdir("strip");
    let lib = gcc(
        &dir,
        "libdemo.so",
        LIB_C,
        &["-shared", "-fPIC", "-O1", "-g"],
    );
    let (exported, _) = symbol(&lib, "exported_fn");
    let (hidden, _) = symbol(&lib, "hidden_fn");
    let stripped = dir.join("libdemo-stripped.so");
    let st = Command::new("strip")
        .arg("--strip-all")
        .arg(&lib)
        .arg("-o")
        .arg(&stripped)
        .status();
    assert!(st
        .expect("strip (binutils) is needed for this test")
        .success());
    let id = build_id(&lib);
    assert!(id.is_some(), "gcc links with --build-id here");
    assert_eq!(build_id(&stripped), id, "strip keeps the build id");

    // Unstripped: DWARF names and lines.
    let mut s = Symbolizer::new(&[whole_file(&lib, id.as_deref())]);
    let f = s.frames(addr_of(&lib, hidden) + 2, false).to_vec();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].name, "hidden_fn");
    assert!(
        f[0].file
            .as_deref()
            .is_some_and(|p| p.ends_with("libdemo.so.c"))
            && f[0].line == Some(3),
        "{f:?}"
    );

    // Stripped: .dynsym still names the exported function, not the static one.
    let mut s = Symbolizer::new(&[whole_file(&stripped, id.as_deref())]);
    assert_eq!(
        s.frames(addr_of(&lib, exported) + 1, false)[0].name,
        "exported_fn"
    );
    assert_eq!(s.frames(addr_of(&lib, exported) + 1, false)[0].file, None);
    assert_eq!(
        s.frames(addr_of(&lib, hidden) + 1, false)[0].name,
        "[unknown]"
    );
    assert!(
        s.warnings().is_empty(),
        "a stripped file is not an error: {:?}",
        s.warnings()
    );

    // Missing: one warning naming the file, however many addresses.
    let gone = dir.join("gone.so");
    let mut s = Symbolizer::new(&[Mapping {
        path: gone.to_str().unwrap().into(),
        ..whole_file(&lib, None)
    }]);
    for a in 0..10 {
        assert_eq!(s.frames(BASE + 0x1000 + a, a > 0)[0].name, "[unknown]");
    }
    assert_eq!(s.warnings().len(), 1, "{:?}", s.warnings());
    assert!(s.warnings()[0].contains("gone.so"), "{:?}", s.warnings());

    // Rebuilt: the build id differs from the recorded one: no wrong names.
    let mut s = Symbolizer::new(&[whole_file(&lib, Some("0123456789abcdef"))]);
    assert_eq!(
        s.frames(addr_of(&lib, exported) + 1, false)[0].name,
        "[unknown]"
    );
    assert_eq!(s.warnings().len(), 1);
    assert!(
        s.warnings()[0].contains("libdemo.so") && s.warnings()[0].contains("build id"),
        "{:?}",
        s.warnings()
    );

    // Verbose: where the unknown address was.
    let mut s = Symbolizer::new(&[whole_file(&stripped, id.as_deref())]).verbose(true);
    let off = addr_of(&lib, hidden) + 1 - BASE;
    assert_eq!(
        s.frames(BASE + off, false)[0].name,
        format!("[unknown] {}+{off:#x}", stripped.display())
    );

    // Not an ELF file at all.
    let junk = dir.join("junk.so");
    std::fs::write(&junk, b"not an elf file").unwrap();
    let mut s = Symbolizer::new(&[whole_file(&junk, None)]);
    assert_eq!(s.frames(BASE + 3, false)[0].name, "[unknown]");
    assert_eq!(s.warnings().len(), 1);
}

const INLINE_C: &str = r#"#include <stdio.h>
static inline __attribute__((always_inline)) unsigned inner(unsigned x) {
    return (x ^ (x >> 3)) * 2654435761u;
}
static inline __attribute__((always_inline)) unsigned middle(unsigned x) {
    return inner(x + 7) ^ inner(x * 5);
}
__attribute__((noinline)) unsigned outer(unsigned n) {
    unsigned acc = 0;
    for (unsigned i = 0; i < n; i++) acc += middle(i);
    return acc;
}
int main(int argc, char **argv) { printf("%u\n", outer(argc * 1000)); return 0; }
"#;

#[test]
fn inlined_frames_come_innermost_first_with_call_site_lines() {
    let test = "symbolize::inlined_frames_come_innermost_first";
    if tools::tool("gcc", &["--version"], "gcc", test).is_none() {
        return;
    }
    let dir = tempdir("inline");
    let exe = gcc(&dir, "inl", INLINE_C, &["-O2", "-g"]);
    let (start, size) = symbol(&exe, "outer");
    let mut s = Symbolizer::new(&[whole_file(&exe, build_id(&exe).as_deref())]);
    let base = addr_of(&exe, start);
    let mut found = None;
    for a in base..base + size {
        let f = s.frames(a, false);
        if f.len() == 3 {
            found = Some(f.to_vec());
            break;
        }
    }
    let f =
        found.expect("some address of outer() has inner() inlined into middle() inlined into it");
    let names: Vec<_> = f.iter().map(|f| (f.name.as_str(), f.inlined)).collect();
    assert_eq!(names, [("inner", true), ("middle", true), ("outer", false)]);
    // The innermost frame's line is the code's; the others' are the call sites.
    let lines: Vec<_> = f.iter().map(|f| f.line).collect();
    assert_eq!(lines, [Some(3), Some(6), Some(10)], "{f:#?}");
    assert!(f
        .iter()
        .all(|f| f.file.as_deref().is_some_and(|p| p.ends_with("inl.c"))));
    // As a return address the lookup moves to the call instruction: never a panic at the edges.
    let _ = s.frames(base, true);
    let _ = s.frames(0, true);
}

const RUST_SRC: &str = r#"
#[inline(never)]
fn busy(n: u64) -> u64 { let (mut x, mut i) = (n | 1, 0); while i < n { x ^= x << 13; x ^= x >> 7; i += 1; } x }
fn main() { println!("{}", busy(std::hint::black_box(std::env::args().count() as u64 * 1000))); }
"#;

#[test]
fn release_style_line_tables_only_rust_keeps_full_names() {
    // Line tables name the subprogram `busy`; the symbol table has `demo::busy`.
    let dir = tempdir("rust");
    let src = dir.join("demo.rs");
    std::fs::write(&src, RUST_SRC).unwrap();
    let exe = dir.join("demo");
    let st = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args([
            "-O",
            "-C",
            "debuginfo=line-tables-only",
            "--crate-name",
            "demo",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("rustc");
    assert!(st.success());
    let data = std::fs::read(&exe).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let busy = obj
        .symbols()
        .find(|s| {
            s.name()
                .is_ok_and(|n| fgtrace::symbolize::demangle(n) == "demo::busy")
        })
        .expect("demo::busy in .symtab");
    let mut s = Symbolizer::new(&[whole_file(&exe, build_id(&exe).as_deref())]);
    let f = s.frames(addr_of(&exe, busy.address()) + 4, false).to_vec();
    assert_eq!(f.last().unwrap().name, "demo::busy", "{f:?}");
    let f = f.last().unwrap();
    assert!(
        f.file.as_deref().is_some_and(|p| p.ends_with("demo.rs")) && f.line == Some(3),
        "{f:?}"
    );
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/elf")
        .join(name)
}

/// Compressed DWARF is read; a compressed section that claims an impossible
/// uncompressed size (20 GB from 225 bytes, as the fuzzer found) is refused
/// with a warning naming it, before anything is allocated for it, and the
/// symbol table still names the functions.
#[test]
fn compressed_dwarf_is_read_and_an_impossible_claimed_size_is_refused() {
    use fgtrace::bridge::elf::{ElfError, Inliner};
    let good = fixture("inline-zlib.elf");
    let (marker, _) = symbol(&good, "inl_marker");
    let inl = Inliner::open(&good).expect("zlib-compressed DWARF is read");
    assert_eq!(inl.inlined_at(marker), ["mid_inl", "leaf_inl"]);

    let bad = fixture("inline-zlib-oversized.elf");
    match Inliner::open(&bad) {
        Err(ElfError::Dwarf { reason }) => assert!(
            reason.contains(".debug_info")
                && reason.contains("20000000000")
                && reason.contains("from 201 bytes"),
            "{reason}"
        ),
        other => panic!("the oversized claim was not refused: {other:?}"),
    }

    for (path, dwarf_ok) in [(good, true), (bad, false)] {
        let (outer, _) = symbol(&path, "outer");
        let mut s = Symbolizer::new(&[whole_file(&path, build_id(&path).as_deref())]);
        let f = s.frames(addr_of(&path, outer), false).to_vec();
        assert_eq!(f.last().map(|f| f.name.as_str()), Some("outer"), "{f:?}");
        // Lines come from DWARF: present only where it was read.
        assert_eq!(f.last().unwrap().line.is_some(), dwarf_ok, "{f:?}");
        if dwarf_ok {
            assert!(s.warnings().is_empty(), "{:?}", s.warnings());
        } else {
            assert_eq!(s.warnings().len(), 1, "{:?}", s.warnings());
            let w = &s.warnings()[0];
            assert!(
                w.contains("inline-zlib-oversized.elf")
                    && w.contains(".debug_info")
                    && w.contains("20000000000"),
                "{w}"
            );
        }
    }
}
