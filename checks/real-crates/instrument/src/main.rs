//! Puts `#[fgtrace::traced] ` in front of every free fn and every impl block
//! of a crate's sources, in place: `instrument CRATE_DIR [LABEL]`.
//!
//! Every `CRATE_DIR/src/**/*.rs` is parsed with syn; the items at module
//! level (the file's, and those of inline `mod m { .. }` blocks, at any
//! depth) are looked at, and the attribute text is inserted where the item
//! starts after its outer attributes (so doc comments and `#[cfg]` stay
//! first). Only text is inserted: formatting and comments survive, and the
//! crate's own lines keep their numbers.
//!
//! Left alone, and counted:
//! - a free `const fn`: it can run at compile time, where no probe can, and
//!   `#[traced]` on one is a compile error by design;
//! - an item already carrying `#[fgtrace::traced]` or `#[traced]`;
//! - fns declared in `extern { .. }` blocks (no body to probe);
//! - whatever an item-position macro call or `macro_rules!` holds (its tokens
//!   are not items until expansion; the macros are counted, not their fns).
//!
//! Left alone, not counted: fns nested in fn bodies or const initializers
//! (not at module level), and trait definitions' default methods.
//!
//! The methods of an instrumented impl block are counted too: the block's
//! attribute traces each method with a body except `const fn`s and
//! `#[notrace]` ones, which the macro leaves as they are.
//!
//! Prints one summary line, prefixed by LABEL (default: the directory name).
//! Exits non-zero if a file does not parse: the crate would be instrumented
//! only in part.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use proc_macro2::LineColumn;
use quote::ToTokens;
use syn::{Attribute, ImplItem, Item};

/// The text inserted in front of each instrumented item.
const ATTR: &str = "#[fgtrace::traced] ";

/// What one crate (or one file) had.
#[derive(Default, Debug, PartialEq, Eq)]
struct Counts {
    files: usize,
    /// Free fns given the attribute.
    fns: usize,
    /// Impl blocks given the attribute.
    impls: usize,
    /// Methods with a body in those blocks that the block's attribute traces.
    methods: usize,
    /// Methods of those blocks the macro leaves alone (`const fn`, `#[notrace]`).
    methods_left: usize,
    /// Free `const fn`s, not instrumented.
    const_fns: usize,
    /// Items that already had `#[fgtrace::traced]` / `#[traced]`.
    already: usize,
    /// Fns declared in `extern` blocks.
    foreign_fns: usize,
    /// `macro_rules!` definitions and item-position macro calls not looked into.
    macros: usize,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.files += o.files;
        self.fns += o.fns;
        self.impls += o.impls;
        self.methods += o.methods;
        self.methods_left += o.methods_left;
        self.const_fns += o.const_fns;
        self.already += o.already;
        self.foreign_fns += o.foreign_fns;
        self.macros += o.macros;
    }

    fn summary(&self, label: &str) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{label}: {} files: instrumented {} free fns and {} impl blocks ({} methods traced \
             by their block); skipped {} free const fns, {} items already traced, {} fns in \
             extern blocks; in the blocks, {} const or #[notrace] methods left to the macro; \
             not looked into: {} item macros",
            self.files,
            self.fns,
            self.impls,
            self.methods,
            self.const_fns,
            self.already,
            self.foreign_fns,
            self.methods_left,
            self.macros,
        );
        s
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first().map(PathBuf::from) else {
        eprintln!("usage: instrument CRATE_DIR [LABEL]");
        return ExitCode::from(2);
    };
    let label = args.get(1).cloned().unwrap_or_else(|| {
        dir.file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into())
    });
    let mut files = Vec::new();
    if let Err(e) = rust_files(&dir.join("src"), &mut files) {
        eprintln!("instrument: {}: {e}", dir.join("src").display());
        return ExitCode::FAILURE;
    }
    files.sort();
    let mut total = Counts::default();
    let mut failed = false;
    for file in &files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("instrument: {}: {e}", file.display());
                failed = true;
                continue;
            }
        };
        match instrument_source(&text) {
            Ok((out, counts)) => {
                if out != text {
                    if let Err(e) = std::fs::write(file, out) {
                        eprintln!("instrument: {}: {e}", file.display());
                        failed = true;
                    }
                }
                total.add(&counts);
            }
            Err(e) => {
                let at = e.span().start();
                eprintln!(
                    "instrument: {}:{}:{}: does not parse: {e}",
                    file.display(),
                    at.line,
                    at.column + 1
                );
                failed = true;
            }
        }
    }
    println!("{}", total.summary(&label));
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The source with the attribute inserted, and what was found.
fn instrument_source(text: &str) -> syn::Result<(String, Counts)> {
    let file = syn::parse_file(text)?;
    let mut counts = Counts {
        files: 1,
        ..Counts::default()
    };
    let mut at = Vec::new();
    visit_items(&file.items, &mut at, &mut counts);
    // syn drops a leading byte order mark before parsing: its positions are
    // in the text after it.
    let base = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let lines = LineStarts::new(&text[base..]);
    let mut offsets: Vec<usize> = at.iter().map(|lc| base + lines.offset(*lc)).collect();
    offsets.sort_unstable();
    offsets.dedup();
    let mut out = String::with_capacity(text.len() + offsets.len() * ATTR.len());
    let mut last = 0;
    for off in offsets {
        out.push_str(&text[last..off]);
        out.push_str(ATTR);
        last = off;
    }
    out.push_str(&text[last..]);
    Ok((out, counts))
}

/// Collects where each item to instrument starts, recursing into inline modules.
fn visit_items(items: &[Item], at: &mut Vec<LineColumn>, counts: &mut Counts) {
    for item in items {
        match item {
            Item::Fn(f) => {
                if is_traced(&f.attrs) {
                    counts.already += 1;
                } else if f.sig.constness.is_some() {
                    counts.const_fns += 1;
                } else {
                    counts.fns += 1;
                    at.push(start_after_attrs(item));
                }
            }
            Item::Impl(imp) => {
                if is_traced(&imp.attrs) {
                    counts.already += 1;
                    continue;
                }
                counts.impls += 1;
                at.push(start_after_attrs(item));
                for it in &imp.items {
                    if let ImplItem::Fn(m) = it {
                        if m.sig.constness.is_some() || has_attr(&m.attrs, "notrace") {
                            counts.methods_left += 1;
                        } else {
                            counts.methods += 1;
                        }
                    }
                }
            }
            Item::Mod(m) => {
                if let Some((_, content)) = &m.content {
                    visit_items(content, at, counts);
                }
            }
            Item::ForeignMod(f) => {
                counts.foreign_fns += f
                    .items
                    .iter()
                    .filter(|i| matches!(i, syn::ForeignItem::Fn(_)))
                    .count();
            }
            Item::Macro(_) => counts.macros += 1,
            _ => {}
        }
    }
}

/// `#[traced]` or `#[fgtrace::traced]` among the item's outer attributes.
fn is_traced(attrs: &[Attribute]) -> bool {
    has_attr(attrs, "traced")
}

/// `#[name]` or `#[fgtrace::name]` (a leading `::` aside).
fn has_attr(attrs: &[Attribute], name: &str) -> bool {
    attrs.iter().any(|a| {
        let segs: Vec<String> = a
            .path()
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        segs == [name] || segs == ["fgtrace", name]
    })
}

/// Where the item starts once its outer attributes are passed: its
/// visibility, `default`, `unsafe`, `const`, `async`, `extern`, `fn` or `impl`.
fn start_after_attrs(item: &Item) -> LineColumn {
    let mut bare = item.clone();
    match &mut bare {
        Item::Fn(f) => f.attrs.clear(),
        Item::Impl(i) => i.attrs.clear(),
        _ => unreachable!("only fns and impl blocks are instrumented"),
    }
    first_token_start(&bare)
}

/// Where the first token of an item starts.
fn first_token_start(item: &Item) -> LineColumn {
    item.to_token_stream()
        .into_iter()
        .next()
        .expect("an item has tokens")
        .span()
        .start()
}

/// Byte offsets of line starts, to turn a (1-based line, char column) into a
/// byte offset.
struct LineStarts<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineStarts<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineStarts { text, starts }
    }

    fn offset(&self, lc: LineColumn) -> usize {
        let start = self.starts[lc.line - 1];
        // proc-macro2 counts columns in chars.
        start
            + self.text[start..]
                .char_indices()
                .nth(lc.column)
                .map_or(self.text.len() - start, |(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str) -> (String, Counts) {
        instrument_source(src).expect("parses")
    }

    #[test]
    fn inserts_after_outer_attributes_keeping_comments_and_layout() {
        let src = "\
//! Crate docs.
#![no_std]

/// Doc.
#[inline] // why
pub(crate) fn a() {}

    unsafe extern \"C\" fn b() { /* é */ }

/// Impl docs.
#[cfg(feature = \"x\")]
unsafe impl<T> Send for S<T> {}

impl S { const fn new() -> S { S } #[notrace] fn n() {} fn m(&self) {} }
";
        let (out, counts) = run(src);
        assert_eq!(
            out,
            "\
//! Crate docs.
#![no_std]

/// Doc.
#[inline] // why
#[fgtrace::traced] pub(crate) fn a() {}

    #[fgtrace::traced] unsafe extern \"C\" fn b() { /* é */ }

/// Impl docs.
#[cfg(feature = \"x\")]
#[fgtrace::traced] unsafe impl<T> Send for S<T> {}

#[fgtrace::traced] impl S { const fn new() -> S { S } #[notrace] fn n() {} fn m(&self) {} }
"
        );
        assert_eq!(
            counts,
            Counts {
                files: 1,
                fns: 2,
                impls: 2,
                methods: 1,
                methods_left: 2,
                ..Counts::default()
            }
        );
    }

    #[test]
    fn skips_what_cannot_or_need_not_be_traced_and_recurses_into_inline_mods() {
        let src = "\
const fn c() -> u8 { 0 }
#[fgtrace::traced] fn t() {}
#[traced] impl S {}
extern \"C\" { fn ext(); fn ext2(); }
macro_rules! m { () => { fn in_macro() {} } }
m!();
const K: u8 = { fn nested() -> u8 { 1 } nested() };
fn outer() { fn inner() {} }
mod inline { mod deeper { /* x */ fn deep() {} } }
";
        let (out, counts) = run(src);
        assert_eq!(
            out,
            src.replace("fn outer", "#[fgtrace::traced] fn outer")
                .replace("fn deep", "#[fgtrace::traced] fn deep")
        );
        assert_eq!(
            counts,
            Counts {
                files: 1,
                fns: 2,
                const_fns: 1,
                already: 2,
                foreign_fns: 2,
                macros: 2,
                ..Counts::default()
            }
        );
    }

    #[test]
    fn a_byte_order_mark_does_not_shift_the_insertion() {
        let (out, _) = run("\u{feff}fn a() {}\n");
        assert_eq!(out, "\u{feff}#[fgtrace::traced] fn a() {}\n");
    }
}
