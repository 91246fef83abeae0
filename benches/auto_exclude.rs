//! Automatic exclusion of tiny functions on a whole crate's worth of traced
//! functions: a small regex-like engine (a Thompson NFA run by a Pike VM
//! over sparse sets) whose getters (`StateId::as_usize`, `SparseSet::len`,
//! `Nfa::state`, ...) make most of the calls, inside a few bigger functions
//! (`search`, `step`, `add_closure`). The same code is built twice by one
//! macro: `plain` without instrumentation (the untraced program, inlined as
//! the compiler likes) and `traced` with `#[fgtrace::traced]` on every fn
//! and impl block, as a tool that instruments a whole crate does.
//!
//! Runs, each the best of a few:
//!
//! * `untraced`: `plain`, no fgtrace at all,
//! * `no session`: `traced`, compiled in but not recording,
//! * `traced`: `traced`, every call recorded (stream mode, waiting for the
//!   collector rather than dropping, so every call is kept),
//! * `auto-exclude 50ns`: the same with `Config::auto_exclude(50 ns)`.
//!
//! It prints the times and the ratios to `untraced`, and checks that the
//! auto-exclude run's report has the exact call count of every function
//! (the same as the fully recorded run's, which lost nothing).
//!
//! Run: `cargo bench --bench auto_exclude` (`-- --quick` for a short run;
//! `-- --only auto [NS]` runs only the auto-exclude session, `--only
//! untraced`, `--only traced`, `--only off` the others: for profilers).

use fgtrace::view::{ReportOptions, TraceViews};
use fgtrace::{Config, Session};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The engine, built once per attribute list.
macro_rules! engine {
    ($m:ident $(, #[$attr:meta])?) => {
        pub mod $m {
            use std::hint::black_box;

            #[derive(Clone, Copy, PartialEq, Eq, Debug)]
            pub struct StateId(u32);

            $(#[$attr])?
            impl StateId {
                pub fn new(i: usize) -> StateId {
                    StateId(i as u32)
                }
                pub fn as_usize(self) -> usize {
                    self.0 as usize
                }
            }

            #[derive(Clone, Copy)]
            pub enum State {
                /// Bytes `lo..=hi` go to `next`.
                Range { lo: u8, hi: u8, next: StateId },
                /// Both ways, without a byte.
                Split { a: StateId, b: StateId },
                Match,
            }

            pub struct Nfa {
                states: Vec<State>,
                start: StateId,
            }

            $(#[$attr])?
            impl Nfa {
                /// `(x0|x1|...)*` followed by a literal: `alts` byte
                /// ranges in a loop, then the literal's bytes, then a match.
                pub fn build(alts: &[(u8, u8)], lit: &[u8]) -> Nfa {
                    let mut states = Vec::new();
                    // 0: the loop's split (into the alternatives, or on to the literal).
                    states.push(State::Match);
                    let first_alt = 1;
                    // Each alternative: a split chain entry, then its range back to 0.
                    for (i, &(lo, hi)) in alts.iter().enumerate() {
                        let me = states.len();
                        let range = me + 1;
                        let next_split = me + 2;
                        let rest = if i + 1 == alts.len() { range } else { next_split };
                        states.push(State::Split {
                            a: StateId::new(range),
                            b: StateId::new(rest),
                        });
                        states.push(State::Range {
                            lo,
                            hi,
                            next: StateId::new(0),
                        });
                    }
                    let lit_start = states.len();
                    states[0] = State::Split {
                        a: StateId::new(first_alt),
                        b: StateId::new(lit_start),
                    };
                    for (i, &b) in lit.iter().enumerate() {
                        states.push(State::Range {
                            lo: b,
                            hi: b,
                            next: StateId::new(lit_start + i + 1),
                        });
                    }
                    states.push(State::Match);
                    Nfa {
                        states,
                        start: StateId::new(0),
                    }
                }
                pub fn state_count(&self) -> usize {
                    self.states.len()
                }
                pub fn start(&self) -> StateId {
                    self.start
                }
                pub fn state(&self, id: StateId) -> &State {
                    &self.states[id.as_usize()]
                }
            }

            /// A set of state ids with O(1) insert, membership and clear,
            /// and the capture slots of each state in it (the Pike VM's
            /// per-thread captures: where each group started and ended).
            pub struct SparseSet {
                dense: Vec<StateId>,
                sparse: Vec<u32>,
                len: usize,
                slots: Vec<[u32; super::SLOTS]>,
            }

            $(#[$attr])?
            impl SparseSet {
                pub fn new(capacity: usize) -> SparseSet {
                    SparseSet {
                        dense: vec![StateId::new(0); capacity],
                        sparse: vec![0; capacity],
                        len: 0,
                        slots: vec![[0; super::SLOTS]; capacity],
                    }
                }
                pub fn slots(&self, id: StateId) -> &[u32; super::SLOTS] {
                    &self.slots[id.as_usize()]
                }
                pub fn len(&self) -> usize {
                    self.len
                }
                pub fn is_empty(&self) -> bool {
                    self.len() == 0
                }
                pub fn get(&self, i: usize) -> StateId {
                    self.dense[i]
                }
                pub fn contains(&self, id: StateId) -> bool {
                    let i = self.sparse[id.as_usize()] as usize;
                    i < self.len() && self.dense[i] == id
                }
                /// Inserts `id` with its capture slots (copied in).
                pub fn insert(&mut self, id: StateId, slots: &[u32; super::SLOTS]) -> bool {
                    if self.contains(id) {
                        return false;
                    }
                    let i = self.len();
                    self.dense[i] = id;
                    self.sparse[id.as_usize()] = i as u32;
                    self.slots[id.as_usize()] = *slots;
                    self.len += 1;
                    true
                }
                pub fn clear(&mut self) {
                    self.len = 0;
                }
            }

            /// Adds `id` and every state reachable from it without a byte,
            /// each with the capture slots of the path that reached it (a
            /// split records `at` in the group of its state).
            $(#[$attr])?
            pub fn add_closure(
                nfa: &Nfa,
                set: &mut SparseSet,
                stack: &mut Vec<(StateId, [u32; super::SLOTS])>,
                id: StateId,
                slots: &[u32; super::SLOTS],
                at: u32,
            ) {
                stack.push((id, *slots));
                while let Some((id, mut slots)) = stack.pop() {
                    if !set.insert(id, &slots) {
                        continue;
                    }
                    if let State::Split { a, b } = *nfa.state(id) {
                        slots[id.as_usize() % super::SLOTS] = at;
                        stack.push((b, slots));
                        stack.push((a, slots));
                    }
                }
            }

            /// One byte: every state of `curr` that takes it, into `next`.
            /// Whether a match state was in `curr`.
            $(#[$attr])?
            pub fn step(
                nfa: &Nfa,
                curr: &SparseSet,
                next: &mut SparseSet,
                stack: &mut Vec<(StateId, [u32; super::SLOTS])>,
                byte: u8,
                at: u32,
            ) -> bool {
                let mut matched = false;
                let mut i = 0;
                while i < curr.len() {
                    let id = curr.get(i);
                    match *nfa.state(id) {
                        State::Range { lo, hi, next: to } if lo <= byte && byte <= hi => {
                            add_closure(nfa, next, stack, to, curr.slots(id), at + 1)
                        }
                        State::Match => matched = true,
                        _ => {}
                    }
                    i += 1;
                }
                matched
            }

            /// Matches ending in `hay` (an unanchored search, restarted at
            /// every byte).
            $(#[$attr])?
            pub fn search(nfa: &Nfa, hay: &[u8]) -> usize {
                let mut curr = SparseSet::new(nfa.state_count());
                let mut next = SparseSet::new(nfa.state_count());
                let mut stack = Vec::new();
                let mut matches = 0;
                let fresh = [u32::MAX; super::SLOTS];
                for (at, &b) in hay.iter().enumerate() {
                    let at = at as u32;
                    add_closure(nfa, &mut curr, &mut stack, nfa.start(), &fresh, at);
                    if step(nfa, &curr, &mut next, &mut stack, b, at) {
                        matches += 1;
                    }
                    std::mem::swap(&mut curr, &mut next);
                    next.clear();
                }
                if !curr.is_empty() {
                    let mut empty = SparseSet::new(nfa.state_count());
                    if step(nfa, &curr, &mut empty, &mut stack, 0, hay.len() as u32) {
                        matches += 1;
                    }
                }
                matches
            }

            /// The whole workload: one search per line of `text`.
            $(#[$attr])?
            pub fn run(nfa: &Nfa, text: &[u8]) -> usize {
                text.split(|&b| b == b'\n')
                    .map(|line| search(nfa, black_box(line)))
                    .sum()
            }
        }
    };
}

/// Capture slots per state (two per group), as the Pike VM keeps them.
const SLOTS: usize = 8;

engine!(plain);
engine!(traced, #[fgtrace::traced]);

/// `[a-z]`-ish alternatives in a loop, then `ing`.
const ALTS: &[(u8, u8)] = &[
    (b'a', b'f'),
    (b'g', b'm'),
    (b'n', b's'),
    (b't', b'z'),
    (b' ', b' '),
];

/// Lines of pseudo-random words.
fn text(bytes: usize) -> Vec<u8> {
    let words = [
        "the", "running", "string", "of", "matching", "engines", "is", "thing", "sing", "a",
        "regex", "crate", "walking", "through", "states",
    ];
    let mut out = Vec::with_capacity(bytes + 16);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut col = 0;
    while out.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let w = words[(x % words.len() as u64) as usize];
        out.extend_from_slice(w.as_bytes());
        col += w.len() + 1;
        if col > 60 {
            out.push(b'\n');
            col = 0;
        } else {
            out.push(b' ');
        }
    }
    out
}

/// The best of `n` timings of `f`, with its last result.
fn best<R>(n: usize, mut f: impl FnMut() -> (Duration, R)) -> (Duration, R) {
    let (mut t, mut r) = f();
    for _ in 1..n {
        let (t2, r2) = f();
        t = t.min(t2);
        r = r2;
    }
    (t, r)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let (bytes, runs) = if quick { (60_000, 2) } else { (400_000, 3) };
    let text = text(bytes);
    let nfa_plain = plain::Nfa::build(ALTS, b"ing");
    let nfa_traced = traced::Nfa::build(ALTS, b"ing");
    if let Some(i) = args.iter().position(|a| a == "--only") {
        let which = args.get(i + 1).map(String::as_str).unwrap_or("");
        return only(which, &nfa_plain, &nfa_traced, &text);
    }

    let (untraced, want) = best(runs, || {
        let t = Instant::now();
        let m = plain::run(&nfa_plain, black_box(&text));
        (t.elapsed(), m)
    });
    let (compiled_in, got) = best(runs, || {
        let t = Instant::now();
        let m = traced::run(&nfa_traced, black_box(&text));
        (t.elapsed(), m)
    });
    assert_eq!(got, want, "both builds find the same matches");

    // A recorded run: the time of the workload (the session started, not
    // yet stopped), and the trace.
    let recorded = |config: Config| {
        best(runs, || {
            let s = Session::start(config.clone().block_when_full(true)).expect("session");
            let t = Instant::now();
            let m = traced::run(&nfa_traced, black_box(&text));
            let took = t.elapsed();
            assert_eq!(m, want);
            (took, s.stop().expect("trace"))
        })
    };
    let (full, full_trace) = recorded(Config::builtin());
    let (auto, auto_trace) = recorded(Config::builtin().auto_exclude(Duration::from_nanos(50)));

    // Exact counts: every function's calls in the auto-exclude run's report
    // are those of the run that recorded every call.
    assert_eq!(
        full_trace.meta().total_lost(),
        0,
        "the full run kept every call"
    );
    assert_eq!(auto_trace.meta().total_lost(), 0);
    let counts = |t: &fgtrace::Trace| {
        let mut v: Vec<(String, u64)> = t
            .report(&ReportOptions::default())
            .functions
            .iter()
            .map(|f| (f.name.clone(), f.calls))
            .collect();
        v.sort();
        v
    };
    let (full_counts, auto_counts) = (counts(&full_trace), counts(&auto_trace));
    assert_eq!(auto_counts, full_counts, "exact call counts");
    let calls: u64 = full_counts.iter().map(|c| c.1).sum();
    let m = auto_trace.meta();
    let mut switched: Vec<&str> = m.count_only.iter().map(|c| m.site_name(c.site)).collect();
    switched.sort_unstable();
    switched.dedup();

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = |d: Duration| d.as_secs_f64() / untraced.as_secs_f64();
    println!(
        "auto_exclude: {} bytes searched, {calls} traced calls in {} functions (best of {runs})",
        text.len(),
        full_counts.len()
    );
    println!(
        "  {:<22} {:>10.1} ms  {:>6.2}x",
        "untraced",
        ms(untraced),
        1.0
    );
    for (name, d) in [
        ("no session", compiled_in),
        ("traced", full),
        ("auto-exclude 50ns", auto),
    ] {
        println!("  {name:<22} {:>10.1} ms  {:>6.2}x", ms(d), ratio(d));
    }
    println!(
        "  auto-exclude: {} calls recorded, {} counted only; {} functions switched: {}",
        m.total_calls(),
        m.total_count_only(),
        switched.len(),
        switched.join(", ")
    );
    println!("  call counts of every function: identical to the fully recorded run");
}

/// One variant alone, for profilers: the workload runs once as a warm-up
/// (in a session: the collector switches the tiny functions meanwhile),
/// then once more inside [`measured`] (`valgrind --tool=callgrind
/// --toggle-collect='*measured*'` counts only that run).
fn only(which: &str, nfa_plain: &plain::Nfa, nfa_traced: &traced::Nfa, text: &[u8]) {
    let session = match which {
        "untraced" => {
            measured(|| plain::run(nfa_plain, black_box(text)));
            return;
        }
        "off" => None,
        "traced" => Some(Config::builtin()),
        // Under valgrind every call is far slower: `--only auto NS` sets the limit.
        "auto" => {
            let ns = std::env::args().skip_while(|a| a != "auto").nth(1);
            let ns = ns.and_then(|n| n.parse().ok()).unwrap_or(50);
            Some(Config::builtin().auto_exclude(Duration::from_nanos(ns)))
        }
        _ => {
            eprintln!("--only untraced, off, traced or auto");
            std::process::exit(2)
        }
    }
    .map(|c| Session::start(c.block_when_full(true)).expect("session"));
    black_box(traced::run(nfa_traced, black_box(text)));
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    measured(|| traced::run(nfa_traced, black_box(text)));
    println!("{which}: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    if let Some(s) = session {
        drop(s.stop().expect("trace"));
    }
}

#[inline(never)]
fn measured(f: impl FnOnce() -> usize) {
    black_box(f());
}
