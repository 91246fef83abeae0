//! `fgtrace zephyr` throughput on a 100k-sample `perf printbuf` dump.
//!
//! The dump repeats the x86_64 fixture's 400 real samples 250 times (806,750
//! word lines, 13.7 MB), so addresses, depths and symbol hits are real. The same
//! file for Zephyr's `stackcollapse.py` comes from
//! `python3 -c 'import sys; l=open(sys.argv[1]).read().split("\n")[1:-1]*250; print(f"Perf buf length {len(l)}"); print("\n".join(l))' perf_data.txt`.
//!
//! Run: `cargo bench --bench zephyr --all-features`.

use std::path::PathBuf;
use std::sync::LazyLock;

use divan::{black_box, Bencher};
use fgtrace::bridge::elf::FuncSymbols;
use fgtrace::bridge::zephyr::{collapse, CollapseOptions, Dump};

const REPEAT: usize = 250;

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/zephyr/x86_64")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fixture's word lines repeated `REPEAT` times under a fresh header.
static DUMP: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let text = String::from_utf8(fixture("perf_data.txt")).expect("fixture is text");
    let words: Vec<&str> = text.lines().skip(1).collect();
    let mut out = format!("Perf buf length {}\n", words.len() * REPEAT);
    for _ in 0..REPEAT {
        for w in &words {
            out.push_str(w);
            out.push('\n');
        }
    }
    out.into_bytes()
});
static ELF: LazyLock<Vec<u8>> = LazyLock::new(|| fixture("prog.elf"));
static PARSED: LazyLock<Dump> =
    LazyLock::new(|| Dump::parse(&DUMP).expect("generated dump parses"));
static SYMS: LazyLock<FuncSymbols> =
    LazyLock::new(|| FuncSymbols::from_elf(&ELF).expect("fixture ELF"));

fn main() {
    assert_eq!(PARSED.len(), 400 * REPEAT);
    divan::main();
}

/// What `fgtrace zephyr DUMP ELF > out` does: parse, read .symtab, symbolize,
/// write the folded text. The figure to compare with `stackcollapse.py`.
#[divan::bench(args = [false, true])]
fn end_to_end(bencher: Bencher, aggregate: bool) {
    let opts = CollapseOptions {
        merge: true,
        aggregate,
    };
    bencher.bench(|| {
        let dump = Dump::parse(black_box(&DUMP)).unwrap();
        let syms = FuncSymbols::from_elf(black_box(&ELF)).unwrap();
        let folded = collapse(&dump, &syms, None, opts).unwrap();
        let mut out = Vec::with_capacity(8 << 20);
        folded.write_to(&mut out).unwrap();
        out
    });
}

/// Console text to samples.
#[divan::bench]
fn parse() -> Dump {
    Dump::parse(black_box(&DUMP)).unwrap()
}

/// Samples to folded stacks (one binary search per address).
#[divan::bench]
fn symbolize() {
    let folded = collapse(&PARSED, &SYMS, None, CollapseOptions::default()).unwrap();
    black_box(folded);
}

/// Reading .symtab and building the lookup partition.
#[divan::bench]
fn symbol_table() -> FuncSymbols {
    FuncSymbols::from_elf(black_box(&ELF)).unwrap()
}

/// One lookup, over the fixture's real address mix.
#[divan::bench]
fn lookup(bencher: Bencher) {
    let addrs: Vec<u64> = PARSED
        .samples()
        .take(400)
        .flat_map(|s| s.addrs.iter().copied())
        .collect();
    bencher
        .counter(divan::counter::ItemsCount::new(addrs.len()))
        .bench(|| {
            for &a in &addrs {
                black_box(SYMS.lookup_id(black_box(a)));
            }
        });
}
