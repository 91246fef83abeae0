//! The unwinders against stacks gcc really built.
//!
//! Each test compiles `tests/unwind/frames.c` for one architecture (static,
//! `-O1 -fno-omit-frame-pointer`), runs it natively or under qemu-user, and
//! walks the stack it dumped. The program's call chain is
//! `main -> fgt_a -> fgt_b -> fgt_c -> fgt_d_{leaf,nonleaf}`; the innermost
//! function captures its registers and copies the live stack. Every unwound
//! return address must be exactly the instruction after the expected call
//! (found by disassembling the caller), in order, and the frame order must
//! be Zephyr's: PC, then `ra`/`lr` on RISC-V and AArch64, then the chain.
//!
//! A missing cross compiler or qemu fails the test with the apt package to
//! install; it never skips. Run with `--nocapture` to see the unwound stacks.

#[path = "support/tools.rs"]
mod tools;

use fgtrace::sampler::unwind::{walk_detailed, Arch, Regs, SliceMemory, StackBounds, Stop};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One architecture: how to build, run and inspect the program for it.
struct Target {
    arch: Arch,
    /// Debian's multiarch triple (`gcc-<triple>`, `<triple>-nm`).
    triple: &'static str,
    /// Debian's package suffix for the cross libc (`libc6-dev-<x>-cross`).
    libc_arch: &'static str,
    qemu: &'static str,
    /// gcc has `-mno-omit-leaf-frame-pointer` for it (not RISC-V in gcc 12).
    leaf_fp_flag: bool,
}

const X86_64: Target = Target {
    arch: Arch::X86_64,
    triple: "x86_64-linux-gnu",
    libc_arch: "amd64",
    qemu: "qemu-x86_64",
    leaf_fp_flag: true,
};
const I686: Target = Target {
    arch: Arch::X86,
    triple: "i686-linux-gnu",
    libc_arch: "i386",
    qemu: "qemu-i386",
    leaf_fp_flag: true,
};
const RISCV64: Target = Target {
    arch: Arch::Riscv64,
    triple: "riscv64-linux-gnu",
    libc_arch: "riscv64",
    qemu: "qemu-riscv64",
    leaf_fp_flag: false,
};
const AARCH64: Target = Target {
    arch: Arch::Aarch64,
    triple: "aarch64-linux-gnu",
    libc_arch: "arm64",
    qemu: "qemu-aarch64",
    leaf_fp_flag: true,
};

impl Target {
    fn native(&self) -> bool {
        Arch::host() == Some(self.arch)
    }

    /// (command, apt package that provides it)
    fn gcc(&self) -> (String, String) {
        if self.native() {
            ("gcc".into(), "gcc libc6-dev".into())
        } else {
            let pkg = format!(
                "gcc-{} libc6-dev-{}-cross",
                self.triple.replace('_', "-"),
                self.libc_arch
            );
            (format!("{}-gcc", self.triple), pkg)
        }
    }

    fn binutil(&self, tool: &str) -> (String, String) {
        if self.native() {
            (tool.into(), "binutils".into())
        } else {
            (
                format!("{}-{tool}", self.triple),
                format!("binutils-{}", self.triple.replace('_', "-")),
            )
        }
    }
}

/// Runs `cmd`; a missing executable fails the test naming the package.
fn run(cmd: &mut Command, package: &str) -> Output {
    match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => panic!(
            "`{}` is not installed: run `apt-get install -y {package}` \
             (CI installs it; this test does not skip)",
            cmd.get_program().to_string_lossy()
        ),
        Err(e) => panic!("running {cmd:?}: {e}"),
    }
}

fn ok_stdout(cmd: &mut Command, package: &str) -> String {
    let out = run(cmd, package);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn build(t: &Target) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/unwind/frames.c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("unwind")
        .join(t.triple);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("frames");
    let (gcc, pkg) = t.gcc();
    let mut cmd = Command::new(&gcc);
    cmd.args([
        "-O1",
        "-fno-omit-frame-pointer",
        "-fno-inline",
        "-fno-optimize-sibling-calls",
        "-fno-stack-protector",
        "-static",
    ]);
    if t.leaf_fp_flag {
        cmd.arg("-mno-omit-leaf-frame-pointer");
    }
    cmd.arg("-o").arg(&exe).arg(&src);
    let out = run(&mut cmd, &pkg);
    assert!(
        out.status.success(),
        "{gcc} failed (a missing static libc means `apt-get install -y {pkg}`):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// What frames.c printed.
#[derive(Debug)]
struct Dump {
    word: usize,
    regs: Regs,
    stack: StackBounds,
    text: Range<u64>,
    funcs: HashMap<String, u64>,
    mem_base: u64,
    mem: Vec<u8>,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap_or_else(|e| panic!("bad hex {s:?}: {e}"))
}

fn parse_dump(text: &str) -> Dump {
    let mut d = Dump {
        word: 0,
        regs: Regs::default(),
        stack: StackBounds { lo: 0, hi: 0 },
        text: 0..0,
        funcs: HashMap::new(),
        mem_base: 0,
        mem: Vec::new(),
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            ["word", w] => d.word = w.parse().unwrap(),
            ["pc", v] => d.regs.pc = hex(v),
            ["fp", v] => d.regs.fp = hex(v),
            ["sp", v] => d.regs.sp = hex(v),
            ["lr", "none"] => d.regs.lr = None,
            ["lr", v] => d.regs.lr = Some(hex(v)),
            ["stack", lo, hi] => {
                d.stack = StackBounds {
                    lo: hex(lo),
                    hi: hex(hi),
                }
            }
            ["text", lo, hi] => d.text = hex(lo)..hex(hi),
            ["func", name, addr] => {
                d.funcs.insert(name.to_string(), hex(addr));
            }
            ["mem", addr, bytes] => {
                if d.mem.is_empty() {
                    d.mem_base = hex(addr);
                }
                assert_eq!(hex(addr), d.mem_base + d.mem.len() as u64, "mem gap");
                for i in (0..bytes.len()).step_by(2) {
                    d.mem
                        .push(u8::from_str_radix(&bytes[i..i + 2], 16).unwrap());
                }
            }
            _ => {}
        }
    }
    assert!(d.word != 0 && !d.mem.is_empty(), "incomplete dump:\n{text}");
    assert_eq!(d.mem_base, d.regs.sp, "the dump starts at sp");
    assert_eq!(
        d.mem_base + d.mem.len() as u64,
        d.stack.hi,
        "and ends at the stack top"
    );
    d
}

/// The program's symbol table from `nm -S`: address range by name.
fn symbols(t: &Target, exe: &Path) -> HashMap<String, Range<u64>> {
    let (nm, pkg) = t.binutil("nm");
    let listing = ok_stdout(Command::new(nm).arg("-S").arg(exe), &pkg);
    let mut syms = HashMap::new();
    for line in listing.lines() {
        if let [addr, size, kind, name] = line.split_whitespace().collect::<Vec<_>>()[..] {
            if matches!(kind, "T" | "t" | "W" | "w") {
                let start = hex(addr);
                syms.insert(name.to_string(), start..start + hex(size));
            }
        }
    }
    syms
}

/// The return site of every call from `caller` to `callee`: the address of
/// the instruction after it, read from the disassembly.
fn return_sites(t: &Target, exe: &Path, func: &Range<u64>, callee: &str) -> Vec<u64> {
    let (objdump, pkg) = t.binutil("objdump");
    let listing = ok_stdout(
        Command::new(objdump)
            .args(["-d", "--no-show-raw-insn"])
            .arg(format!("--start-address={:#x}", func.start))
            .arg(format!("--stop-address={:#x}", func.end))
            .arg(exe),
        &pkg,
    );
    let insns: Vec<(u64, &str)> = listing
        .lines()
        .filter_map(|l| {
            let (addr, rest) = l.trim_start().split_once(":\t")?;
            Some((u64::from_str_radix(addr, 16).ok()?, rest.trim()))
        })
        .collect();
    let target = format!("<{callee}>");
    let mut sites = Vec::new();
    for (i, (_, insn)) in insns.iter().enumerate() {
        let mnemonic = insn.split_whitespace().next().unwrap_or("");
        let is_call = ["call", "bl", "jal"].contains(&mnemonic);
        if is_call && insn.ends_with(&target) {
            let next = insns.get(i + 1).map_or(func.end, |&(a, _)| a);
            sites.push(next);
        }
    }
    assert!(!sites.is_empty(), "no call to {callee} in:\n{listing}");
    sites
}

fn symbolize(syms: &HashMap<String, Range<u64>>, addr: u64) -> String {
    syms.iter()
        .find(|(_, r)| r.contains(&addr))
        .map_or(format!("{addr:#x} ?"), |(n, r)| {
            format!("{addr:#x} {n}+{:#x}", addr - r.start)
        })
}

/// What the disassembly says the walk must find.
struct Expect {
    syms: HashMap<String, Range<u64>>,
    /// Return sites in fgt_c of its call to each innermost function.
    into_c: HashMap<&'static str, Vec<u64>>,
    into_b: Vec<u64>,
    into_a: Vec<u64>,
    into_main: Vec<u64>,
}

/// The compiler, binutils and (for a foreign target) qemu-user are there,
/// or the test skips visibly (fails under `FGTRACE_REQUIRE_TOOLS`).
fn tools_present(t: &Target) -> bool {
    let test = format!("unwind_real_frames {}", t.triple);
    let (gcc, gcc_pkg) = t.gcc();
    let (nm, nm_pkg) = t.binutil("nm");
    let mut ok = tools::tool(&gcc, &["--version"], &gcc_pkg, &test).is_some()
        && tools::tool(&nm, &["--version"], &nm_pkg, &test).is_some();
    if ok && !t.native() {
        ok = tools::tool(t.qemu, &["--version"], "qemu-user", &test).is_some();
    }
    ok
}

/// Builds once, runs both scenarios and checks them.
fn check_target(t: &Target) {
    if !tools_present(t) {
        return;
    }
    let exe = build(t);
    let syms = symbols(t, &exe);
    let sites = |caller: &str, callee: &str| {
        let range = syms
            .get(caller)
            .unwrap_or_else(|| panic!("{caller} not in nm output"));
        return_sites(t, &exe, range, callee)
    };
    let expect = Expect {
        into_c: ["fgt_d_leaf", "fgt_d_nonleaf"]
            .into_iter()
            .map(|d| (d, sites("fgt_c", d)))
            .collect(),
        into_b: sites("fgt_b", "fgt_c"),
        into_a: sites("fgt_a", "fgt_b"),
        into_main: sites("main", "fgt_a"),
        syms,
    };
    for scenario in ["nonleaf", "leaf"] {
        let mut cmd = if t.native() {
            Command::new(&exe)
        } else {
            let mut c = Command::new(t.qemu);
            c.arg(&exe);
            c
        };
        let out = ok_stdout(cmd.arg(scenario), "qemu-user");
        check_scenario(t.arch, scenario, &parse_dump(&out), &expect);
    }
}

fn check_scenario(arch: Arch, scenario: &str, dump: &Dump, expect: &Expect) {
    let ctx = format!("{arch:?} {scenario}");
    assert_eq!(dump.word, arch.word_size(), "{ctx}");
    let syms = &expect.syms;
    for (name, &addr) in &dump.funcs {
        // Static and non-PIE: runtime addresses are the link-time ones.
        assert_eq!(syms[name].start, addr, "{ctx}: {name}");
    }
    let d = if scenario == "leaf" {
        "fgt_d_leaf"
    } else {
        "fgt_d_nonleaf"
    };

    let mem = SliceMemory::new(dump.mem_base, &dump.mem);
    let is_text = |a: u64| dump.text.contains(&a);
    let mut out = [0u64; 64];
    let w = walk_detailed(arch, &dump.regs, dump.stack, &mem, is_text, &mut out);
    let frames = &out[..w.len];
    println!("{ctx}: stop {:?}", w.stop);
    for (i, &a) in frames.iter().enumerate() {
        println!("  #{i} {}", symbolize(syms, a));
    }

    // Frame 0: the PC, inside the innermost function.
    assert!(frames.len() > 1, "{ctx}: {frames:x?}");
    assert_eq!(frames[0], dump.regs.pc, "{ctx}");
    assert!(syms[d].contains(&frames[0]), "{ctx}: pc not in {d}");

    // Frame 1 on RISC-V/AArch64: the lr register, the return into fgt_c.
    let c_sites = &expect.into_c[d];
    let mut chain = &frames[1..];
    if arch.has_link_register() {
        let lr = dump.regs.lr.expect("lr captured");
        assert_eq!(frames[1], lr, "{ctx}: frame 1 is lr");
        assert!(
            c_sites.contains(&lr),
            "{ctx}: lr {lr:#x} not after the call in fgt_c"
        );
        chain = &frames[2..];
    }

    // The chain: exact return sites, innermost first. On RISC-V the leaf
    // saved only s0, so the chain starts at fgt_c's record (its return into
    // fgt_b); everywhere else it starts with d's own saved return address,
    // which on RISC-V/AArch64 duplicates lr (Zephyr's known caveat).
    let mut expected: Vec<(&str, &[u64])> = vec![
        ("fgt_c", c_sites),
        ("fgt_b", &expect.into_b),
        ("fgt_a", &expect.into_a),
        ("main", &expect.into_main),
    ];
    let riscv_leaf = arch == Arch::Riscv64 && scenario == "leaf";
    if riscv_leaf {
        // Guard the premise: gcc stored the caller's s0 at fp[-1] (a stack
        // address above fp), not ra. If a newer gcc saves ra in leaves, this
        // scenario no longer exercises the leaf check.
        let off = (dump.regs.fp - 8 - dump.mem_base) as usize;
        let saved = u64::from_le_bytes(dump.mem[off..off + 8].try_into().unwrap());
        assert!(
            saved > dump.regs.fp && saved < dump.stack.hi,
            "{ctx}: fp[-1] = {saved:#x} is not a saved s0: the leaf layout changed"
        );
        expected.remove(0);
    }
    assert!(
        chain.len() >= expected.len(),
        "{ctx}: chain too short {chain:x?}"
    );
    for (i, (caller, sites)) in expected.iter().enumerate() {
        assert!(
            sites.contains(&chain[i]),
            "{ctx}: chain[{i}] = {} should return into {caller} at one of {sites:x?}",
            symbolize(syms, chain[i])
        );
    }
    if arch.has_link_register() && !riscv_leaf {
        assert_eq!(
            frames[1], frames[2],
            "{ctx}: lr duplicates fp's return address"
        );
    }

    // Past main the walk runs into libc's start code (built without frame
    // pointers) and must end there on its own, not on a full buffer.
    assert_ne!(w.stop, Stop::Full, "{ctx}");
    let ours = [
        "fgt_a",
        "fgt_b",
        "fgt_c",
        "fgt_d_leaf",
        "fgt_d_nonleaf",
        "main",
    ];
    for &a in &chain[expected.len()..] {
        assert!(
            !ours.iter().any(|n| syms[*n].contains(&a)),
            "{ctx}: extra frame {} past main",
            symbolize(syms, a)
        );
    }

    // Control: the innermost frame holds fgt_decoy's address as bait. A
    // stack scanner would report it; the frame-pointer walk must not.
    let decoy = &syms["fgt_decoy"];
    assert!(
        !frames.iter().any(|a| decoy.contains(a)),
        "{ctx}: bait unwound"
    );
    if scenario == "nonleaf" {
        let bait_present = dump
            .mem
            .chunks_exact(dump.word)
            .any(|c| c.iter().rev().fold(0u64, |v, &b| v << 8 | u64::from(b)) == decoy.start);
        assert!(bait_present, "{ctx}: bait missing from the stack image");
    }

    // Truncation keeps the innermost frames and says so.
    let cap = frames.len() - 1;
    let mut short = vec![0u64; cap];
    let ws = walk_detailed(arch, &dump.regs, dump.stack, &mem, is_text, &mut short);
    assert_eq!((ws.len, ws.stop), (cap, Stop::Full), "{ctx}");
    assert_eq!(short, frames[..cap], "{ctx}");
}

#[test]
fn x86_64_gcc_frames() {
    check_target(&X86_64);
}

#[test]
fn i686_gcc_frames() {
    check_target(&I686);
}

#[test]
fn riscv64_gcc_frames() {
    check_target(&RISCV64);
}

#[test]
fn aarch64_gcc_frames() {
    check_target(&AARCH64);
}
