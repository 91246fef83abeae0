//! `fgtrace zephyr`: byte-identity with Zephyr's `stackcollapse.py` on the
//! shared fixtures, recovery from console pastes, ELF checks, and the extras
//! (aggregate, inline, SVG), through the library and the CLI glue.

#[allow(dead_code)]
#[path = "../src/zephyr.rs"]
mod cli;
#[path = "../../tests/support/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

use fgtrace_import::bridge::zephyr::{
    collapse, stackcollapse, CollapseOptions, Dump, Warning, WarningKind, ZephyrError,
};
use fgtrace_symbols::elf::{ElfError, FuncSymbols, Inliner};

const ARCHES: [&str; 4] = ["x86_64", "i686", "riscv64", "aarch64"];
const MERGE: CollapseOptions = CollapseOptions {
    merge: true,
    aggregate: false,
};
const NO_MERGE: CollapseOptions = CollapseOptions {
    merge: false,
    aggregate: false,
};

fn fixtures() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("tests/fixtures/zephyr")
}

fn read(path: impl AsRef<Path>) -> Vec<u8> {
    let path = path.as_ref();
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn arch_file(arch: &str, name: &str) -> Vec<u8> {
    read(fixtures().join(arch).join(name))
}

fn tmp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fgtrace-zephyr-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn kinds(warnings: &[Warning]) -> Vec<(usize, WarningKind)> {
    warnings.iter().map(|w| (w.line, w.kind.clone())).collect()
}

#[test]
fn fixtures_match_stackcollapse_py_byte_for_byte() {
    for arch in ARCHES {
        let dump = arch_file(arch, "perf_data.txt");
        let elf = arch_file(arch, "prog.elf");
        for (opts, expected) in [
            (MERGE, "expected_merge.folded"),
            (NO_MERGE, "expected_nomerge.folded"),
        ] {
            let folded = stackcollapse(&dump, &elf, opts).unwrap();
            let want = String::from_utf8(arch_file(arch, expected)).unwrap();
            assert!(folded.to_text() == want, "{arch}/{expected} differs");
            assert!(folded.warnings.is_empty(), "{arch}: {:?}", folded.warnings);
        }
    }
}

#[test]
fn merge_and_nomerge_really_differ_on_fixtures() {
    // Guards the test above against passing with merging ignored.
    let dump = arch_file("aarch64", "perf_data.txt");
    let elf = arch_file("aarch64", "prog.elf");
    let merged = stackcollapse(&dump, &elf, MERGE).unwrap().to_text();
    let plain = stackcollapse(&dump, &elf, NO_MERGE).unwrap().to_text();
    assert_ne!(merged, plain);
    assert!(plain.contains("fib;fib"));
    assert!(!merged.contains("fib;fib"));
}

#[test]
fn first_symbol_in_table_order_wins_and_only_stt_func_counts() {
    for arch in ARCHES {
        let text = stackcollapse(
            &arch_file(arch, "perf_data.txt"),
            &arch_file(arch, "prog.elf"),
            MERGE,
        )
        .unwrap()
        .to_text();
        // `hash_bytes` is an alias of `fnv1a` listed first in .symtab.
        assert!(text.contains("hash_bytes"), "{arch}");
        assert!(!text.contains("fnv1a"), "{arch}");
        // AArch64 mapping symbols `$x`/`$d` are STT_NOTYPE.
        assert!(!text.contains('$'), "{arch}");
    }
}

#[test]
fn cli_output_file_is_byte_identical() {
    let dir = tmp_dir("cli");
    for arch in ARCHES {
        for (no_merge, expected) in [
            (false, "expected_merge.folded"),
            (true, "expected_nomerge.folded"),
        ] {
            let out = dir.join(format!("{arch}-{no_merge}.folded"));
            let args = cli::ZephyrArgs {
                dump: fixtures().join(arch).join("perf_data.txt"),
                elf: fixtures().join(arch).join("prog.elf"),
                no_merge,
                aggregate: false,
                inline: false,
                svg: None,
                output: Some(out.clone()),
            };
            cli::run(&args).unwrap();
            assert!(read(&out) == arch_file(arch, expected), "{arch} {expected}");
        }
    }
}

/// Every console paste in messy/ gives what verdicts.tsv names as the target:
/// the clean riscv64 output, the complete samples before a cut, or nothing.
#[test]
fn messy_pastes_recover_per_verdicts() {
    let messy = fixtures().join("messy");
    let verdicts = String::from_utf8(read(messy.join("verdicts.tsv"))).unwrap();
    let elf = arch_file("riscv64", "prog.elf");
    let clean = arch_file("riscv64", "expected_merge.folded");
    let cut = read(messy.join("truncated_header_fixed.stdout"));
    let mut seen = 0;
    for row in verdicts.lines().skip(1) {
        let file = row.split('\t').next().unwrap();
        let folded = stackcollapse(&read(messy.join(file)), &elf, MERGE)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let (want, warns): (&[u8], bool) = match file {
            "empty.txt" => (b"", false),
            "truncated.txt" | "truncated_header_fixed.txt" => (&cut, true),
            _ => (&clean, false),
        };
        assert!(folded.to_text().as_bytes() == want, "{file}: wrong output");
        assert_eq!(
            !folded.warnings.is_empty(),
            warns,
            "{file}: {:?}",
            folded.warnings
        );
        seen += 1;
    }
    assert_eq!(seen, 10, "verdicts.tsv rows");
}

#[test]
fn truncation_warnings_name_the_lines() {
    let messy = fixtures().join("messy");
    let dump = Dump::parse(&read(messy.join("truncated.txt"))).unwrap();
    assert_eq!(dump.len(), 215);
    assert_eq!(
        kinds(dump.warnings()),
        vec![
            (
                2466,
                WarningKind::MalformedWord {
                    text: "0000000".into()
                }
            ),
            (
                2466,
                WarningKind::Truncated {
                    announced: 4091,
                    found: 2464
                }
            ),
            (
                2463,
                WarningKind::IncompleteSample {
                    frames: 10,
                    present: 2
                }
            ),
        ]
    );
    let dump = Dump::parse(&read(messy.join("truncated_header_fixed.txt"))).unwrap();
    assert_eq!(dump.len(), 215);
    assert_eq!(
        kinds(dump.warnings()),
        vec![(
            2463,
            WarningKind::IncompleteSample {
                frames: 10,
                present: 2
            }
        )]
    );
    assert_eq!(
        dump.warnings()[0].to_string(),
        "line 2463: last sample is incomplete (2 of 10 addresses): dropped"
    );
}

#[test]
fn interleaved_log_lines_are_skipped_and_reported() {
    let text = String::from_utf8(arch_file("riscv64", "perf_data.txt")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(
        100,
        "\x1b[1;33m[00:00:00.120,000] <wrn> net: rx overrun\x1b[0m",
    );
    lines.insert(2000, "");
    let noisy = lines.join("\r\n");
    let elf = arch_file("riscv64", "prog.elf");
    let folded = stackcollapse(noisy.as_bytes(), &elf, MERGE).unwrap();
    assert!(folded.to_text().as_bytes() == arch_file("riscv64", "expected_merge.folded"));
    assert_eq!(
        kinds(&folded.warnings),
        vec![(101, WarningKind::SkippedLine)]
    );
}

#[test]
fn aggregate_sums_identical_stacks() {
    for (arch, distinct, samples) in [
        ("x86_64", 31, 400),
        ("i686", 30, 400),
        ("riscv64", 32, 358),
        ("aarch64", 27, 392),
    ] {
        let opts = CollapseOptions {
            merge: true,
            aggregate: true,
        };
        let folded = stackcollapse(
            &arch_file(arch, "perf_data.txt"),
            &arch_file(arch, "prog.elf"),
            opts,
        )
        .unwrap();
        assert_eq!(folded.stacks.len(), distinct, "{arch}");
        assert_eq!(folded.total(), samples, "{arch}");
        let expected = String::from_utf8(arch_file(arch, "expected_merge.folded")).unwrap();
        for s in &folded.stacks {
            let per_sample = format!("{} 1", s.stack);
            assert_eq!(
                expected.lines().filter(|l| *l == per_sample).count() as u64,
                s.count,
                "{arch}: {}",
                s.stack
            );
        }
        assert!(
            folded.stacks.windows(2).all(|w| w[0].stack < w[1].stack),
            "{arch}: sorted"
        );
    }
}

#[test]
fn elf_of_another_arch_or_build_is_rejected() {
    for dump_arch in ARCHES {
        let dump = Dump::parse(&arch_file(dump_arch, "perf_data.txt")).unwrap();
        for elf_arch in ARCHES.iter().filter(|&&a| a != dump_arch) {
            let syms = FuncSymbols::from_elf(&arch_file(elf_arch, "prog.elf")).unwrap();
            match collapse(&dump, &syms, None, MERGE) {
                Err(ZephyrError::ElfMismatch { reason }) => assert!(!reason.contains('\n')),
                other => panic!("{dump_arch} dump with {elf_arch} ELF: {other:?}"),
            }
        }
    }
    // Same text range: caught by alignment (x86 dump, AArch64 ELF) and by
    // return addresses that follow no call (AArch64 dump, x86-64 ELF).
    let dump = Dump::parse(&arch_file("aarch64", "perf_data.txt")).unwrap();
    let syms = FuncSymbols::from_elf(&arch_file("x86_64", "prog.elf")).unwrap();
    let err = collapse(&dump, &syms, None, MERGE).unwrap_err().to_string();
    assert!(err.contains("follow a call"), "{err}");
}

#[test]
fn invalid_inputs_are_one_line_errors() {
    let dump = arch_file("x86_64", "perf_data.txt");
    let elf = arch_file("x86_64", "prog.elf");
    let cases: Vec<(&str, Result<_, ZephyrError>)> = vec![
        (
            "garbage elf",
            stackcollapse(&dump, b"not an elf at all", MERGE),
        ),
        ("cut elf", stackcollapse(&dump, &elf[..3000], MERGE)),
        ("elf as dump", stackcollapse(&elf, &elf, MERGE)),
        (
            "no header",
            stackcollapse(b"uart:~$ perf printbuf\r\n", &elf, MERGE),
        ),
        (
            "mangled",
            stackcollapse(
                b"Perf buf length 2\n0000000000401a2c\n0000000000401a2c\n",
                &elf,
                MERGE,
            ),
        ),
    ];
    for (what, result) in cases {
        let err = result.expect_err(what).to_string();
        assert!(!err.is_empty() && !err.contains('\n'), "{what}: {err:?}");
    }
    assert!(matches!(
        FuncSymbols::from_elf(&elf[..3000]),
        Err(ElfError::Malformed { .. })
    ));

    let missing = cli::ZephyrArgs {
        dump: fixtures().join("x86_64/no-such-dump.txt"),
        elf: fixtures().join("x86_64/prog.elf"),
        no_merge: false,
        aggregate: false,
        inline: false,
        svg: None,
        output: None,
    };
    let err = cli::run(&missing).unwrap_err();
    assert!(
        err.contains("no-such-dump.txt") && !err.contains('\n'),
        "{err}"
    );
}

// --- synthetic ELFs: 32/64-bit, little/big endian --------------------------

struct ElfSym {
    name: &'static str,
    value: u64,
    size: u64,
    kind: u8, // STT_*
}

/// A minimal relocatable-free ELF: `.text` at 0x10000 (0x100 bytes), `.symtab`,
/// `.strtab`, `.shstrtab`. Enough for the symbol table and the text range.
fn synth_elf(is64: bool, big: bool, symtab: bool, syms: &[ElfSym]) -> Vec<u8> {
    let put = |out: &mut Vec<u8>, v: u64, n: usize| {
        let bytes = v.to_le_bytes();
        if big {
            out.extend(bytes[..n].iter().rev());
        } else {
            out.extend(&bytes[..n]);
        }
    };
    let word = if is64 { 8 } else { 4 };
    let mut strtab = vec![0u8];
    let mut sym_bytes = vec![0u8; if is64 { 24 } else { 16 }];
    for s in syms {
        let name = strtab.len() as u64;
        strtab.extend(s.name.as_bytes());
        strtab.push(0);
        let info = (1 << 4) | s.kind as u64; // STB_GLOBAL
        if is64 {
            put(&mut sym_bytes, name, 4);
            put(&mut sym_bytes, info, 1);
            put(&mut sym_bytes, 0, 1);
            put(&mut sym_bytes, 1, 2);
            put(&mut sym_bytes, s.value, 8);
            put(&mut sym_bytes, s.size, 8);
        } else {
            put(&mut sym_bytes, name, 4);
            put(&mut sym_bytes, s.value, 4);
            put(&mut sym_bytes, s.size, 4);
            put(&mut sym_bytes, info, 1);
            put(&mut sym_bytes, 0, 1);
            put(&mut sym_bytes, 1, 2);
        }
    }
    let shstrtab = b"\0.text\0.symtab\0.strtab\0.shstrtab\0".to_vec();
    let ehsize = if is64 { 64 } else { 52 };
    let text_off = ehsize;
    let sym_off = text_off + 0x100;
    let str_off = sym_off + sym_bytes.len();
    let shstr_off = str_off + strtab.len();
    let sh_off = (shstr_off + shstrtab.len() + 7) & !7;
    // (name, type, flags, addr, offset, size, link, info, entsize)
    let mut sections = vec![
        (0, 0, 0, 0, 0, 0, 0, 0, 0),
        (1, 1, 6, 0x10000, text_off, 0x100, 0, 0, 0),
    ];
    if symtab {
        let entsize = if is64 { 24 } else { 16 };
        sections.push((7, 2, 0, 0, sym_off, sym_bytes.len(), 3, 1, entsize));
    } else {
        sections.push((7, 1, 0, 0, sym_off, sym_bytes.len(), 0, 0, 0));
    }
    sections.push((15, 3, 0, 0, str_off, strtab.len(), 0, 0, 0));
    sections.push((23, 3, 0, 0, shstr_off, shstrtab.len(), 0, 0, 0));

    let mut out = vec![
        0x7f,
        b'E',
        b'L',
        b'F',
        if is64 { 2 } else { 1 },
        if big { 2 } else { 1 },
        1,
    ];
    out.resize(16, 0);
    put(&mut out, 2, 2); // ET_EXEC
    put(&mut out, if is64 { 21 } else { 20 }, 2); // EM_PPC64 / EM_PPC
    put(&mut out, 1, 4);
    put(&mut out, 0x10000, word); // entry
    put(&mut out, 0, word); // phoff
    put(&mut out, sh_off as u64, word);
    put(&mut out, 0, 4); // flags
    put(&mut out, ehsize as u64, 2);
    put(&mut out, 0, 2);
    put(&mut out, 0, 2);
    put(&mut out, if is64 { 64 } else { 40 }, 2);
    put(&mut out, sections.len() as u64, 2);
    put(&mut out, sections.len() as u64 - 1, 2);
    assert_eq!(out.len(), ehsize);
    out.resize(sym_off, 0);
    out.extend(&sym_bytes);
    out.extend(&strtab);
    out.extend(&shstrtab);
    out.resize(sh_off, 0);
    for (name, kind, flags, addr, offset, size, link, info, entsize) in sections {
        put(&mut out, name, 4);
        put(&mut out, kind, 4);
        put(&mut out, flags, word);
        put(&mut out, addr, word);
        put(&mut out, offset as u64, word);
        put(&mut out, size as u64, word);
        put(&mut out, link, 4);
        put(&mut out, info, 4);
        put(&mut out, 1, word);
        put(&mut out, entsize, word);
    }
    out
}

const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
const STT_NOTYPE: u8 = 0;

fn synth_syms() -> Vec<ElfSym> {
    let sym = |name, value, size, kind| ElfSym {
        name,
        value,
        size,
        kind,
    };
    vec![
        sym("memset", 0, 0, STT_FUNC),
        sym("outer", 0x10000, 0x40, STT_FUNC),
        sym("inner", 0x10010, 0x10, STT_FUNC),
        sym("$x", 0x10040, 0x10, STT_NOTYPE),
        sym("second", 0x10040, 0x20, STT_FUNC),
        sym("alias", 0x10040, 0x20, STT_FUNC),
        sym("table", 0x10080, 0x10, STT_OBJECT),
        sym("root", 0x100a0, 0x10, STT_FUNC),
    ]
}

#[test]
fn elf32_elf64_little_and_big_endian_resolve_alike() {
    // Leaf to root: outer's range hiding inner, the alias pair, an object, 0, root.
    let dump = "Perf buf length 6\n0000000000000005\n0000000000010018\n0000000000010044\n\
                0000000000010085\n0000000000000000\n00000000000100a2\n";
    for is64 in [false, true] {
        for big in [false, true] {
            let elf = synth_elf(is64, big, true, &synth_syms());
            let syms =
                FuncSymbols::from_elf(&elf).unwrap_or_else(|e| panic!("64={is64} be={big}: {e}"));
            let info = syms.info().unwrap();
            assert_eq!((info.bits == 64, info.big_endian), (is64, big));
            assert_eq!(
                syms.text_ranges().collect::<Vec<_>>(),
                vec![0x10000..0x10100]
            );
            let folded =
                collapse(&Dump::parse(dump.as_bytes()).unwrap(), &syms, None, MERGE).unwrap();
            assert_eq!(
                folded.to_text(),
                "root;nullptr;[unknown];second;outer 1\n",
                "64={is64} be={big}"
            );
        }
    }
}

#[test]
fn stripped_elf_is_rejected_clearly() {
    let elf = synth_elf(true, false, false, &synth_syms());
    let err = FuncSymbols::from_elf(&elf).unwrap_err();
    assert_eq!(err, ElfError::NoSymtab);
    assert!(err.to_string().contains("stripped"));
}

// --- inline expansion --------------------------------------------------------

const INLINE_C: &str = r#"
static inline __attribute__((always_inline)) int leaf_inl(int x) {
    __asm__ volatile("inl_marker: nop");
    return x * 3;
}
static inline __attribute__((always_inline)) int mid_inl(int x) { return leaf_inl(x + 1) + 2; }
__attribute__((noinline)) int outer(int x) { return mid_inl(x) ^ 5; }
int main(int argc, char **argv) { (void)argv; return outer(argc); }
"#;

/// Builds a small C program with nested always-inline functions; `None` (a
/// visible SKIPPED line, or a failure in CI) when no C compiler is installed.
fn build_inline_elf() -> Option<PathBuf> {
    tools::tool(
        "cc",
        &["--version"],
        "gcc",
        "zephyr::inline_expands_dwarf_inlined_frames",
    )?;
    let dir = tmp_dir("inline");
    let src = dir.join("inl.c");
    let elf = dir.join("inl.elf");
    std::fs::write(&src, INLINE_C).unwrap();
    let status = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&elf)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed on {}", src.display());
    Some(elf)
}

#[test]
fn inline_expands_dwarf_inlined_frames() {
    let Some(elf_path) = build_inline_elf() else {
        return;
    };
    use object::{Object, ObjectSymbol};
    let bytes = read(&elf_path);
    let file = object::File::parse(&*bytes).unwrap();
    let addr_of = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap()
            .address()
    };
    let (marker, main) = (addr_of("inl_marker"), addr_of("main"));
    let dump = format!(
        "Perf buf length 3\n{:016x}\n{marker:016x}\n{:016x}\n",
        2,
        main + 4
    );
    let dump = Dump::parse(dump.as_bytes()).unwrap();
    let syms = FuncSymbols::from_elf(&bytes).unwrap();

    let plain = collapse(&dump, &syms, None, MERGE).unwrap();
    assert_eq!(plain.to_text(), "main;outer 1\n");
    let inliner = Inliner::open(&elf_path).unwrap();
    let expanded = collapse(&dump, &syms, Some(&inliner), MERGE).unwrap();
    assert_eq!(expanded.to_text(), "main;outer;mid_inl;leaf_inl 1\n");
}

// --- SVG ---------------------------------------------------------------------

#[test]
fn svg_flamegraph_of_a_fixture() {
    let dir = tmp_dir("svg");
    let svg = dir.join("x86_64.svg");
    let folded = dir.join("x86_64.folded");
    let args = cli::ZephyrArgs {
        dump: fixtures().join("x86_64/perf_data.txt"),
        elf: fixtures().join("x86_64/prog.elf"),
        no_merge: false,
        aggregate: true,
        inline: false,
        svg: Some(svg.clone()),
        output: Some(folded.clone()),
    };
    cli::run(&args).unwrap();
    let text = String::from_utf8(read(&svg)).unwrap();
    assert!(text.starts_with("<?xml") && text.trim_end().ends_with("</svg>"));
    assert!(text.contains("Zephyr perf: perf_data.txt"));
    assert!(text.contains("<title>all (400 samples, 100%)</title>"));
    assert!(text.contains("<title>thread_entry (400 samples, 100.00%)</title>"));
    assert!(text.contains("<title>hash_bytes ("));
    assert_eq!(
        String::from_utf8(read(&folded)).unwrap().lines().count(),
        31
    );
}

#[test]
fn svg_of_an_empty_dump_is_an_error() {
    let dir = tmp_dir("svg-empty");
    let args = cli::ZephyrArgs {
        dump: fixtures().join("messy/empty.txt"),
        elf: fixtures().join("riscv64/prog.elf"),
        no_merge: false,
        aggregate: false,
        inline: false,
        svg: Some(dir.join("empty.svg")),
        output: Some(dir.join("empty.folded")),
    };
    let err = cli::run(&args).unwrap_err();
    assert!(err.contains("nothing to draw"), "{err}");
    assert!(read(dir.join("empty.folded")).is_empty());
}
