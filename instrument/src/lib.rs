//! Puts `#[fgtrace::traced] ` in front of every free fn and every impl block
//! of a crate's sources: the rewriting `cargo fgtrace` does on its copies of
//! the chosen crates, and `checks/real-crates/instrument` on published crates.
//!
//! A file is parsed with syn; the items at module level (the file's, and
//! those of inline `mod m { .. }` blocks, at any depth) are looked at, and the
//! attribute text is inserted where the item starts after its outer
//! attributes (so doc comments and `#[cfg]` stay first). Only text is
//! inserted: formatting and comments survive, and the crate's own lines keep
//! their numbers (so a trace's, a panic's and a compiler error's lines are
//! the original file's).
//!
//! Left alone, and counted:
//! - a free `const fn`: it can run at compile time, where no probe can, and
//!   `#[traced]` on one is a compile error by design;
//! - an item already carrying `#[fgtrace::traced]` or `#[traced]`;
//! - fns declared in `extern { .. }` blocks (no body to probe);
//! - whatever an item-position macro call or `macro_rules!` holds (its tokens
//!   are not items until expansion; the macros are counted, not their fns);
//! - what a skip glob matches ([`Skip`]): a free fn or a whole impl block by
//!   its path, or one method, which then gets `#[fgtrace::notrace] `.
//!
//! Left alone, not counted: fns nested in fn bodies or const initializers
//! (not at module level), and trait definitions' default methods.
//!
//! The methods of an instrumented impl block are counted too: the block's
//! attribute traces each method with a body except `const fn`s and
//! `#[notrace]` ones, which the macro leaves as they are.
//!
//! Every item has a path, `crate::module::name` for a free fn and
//! `crate::module::Type` for an impl block (its methods `..::Type::method`),
//! the type named as the `#[traced]` macro names it. The module part comes
//! from the file's place under the source directory ([`module_path()`]) and
//! the inline modules around the item: what `--skip` globs match and what
//! errors name ([`item_at`]), spelled the same way by both.

#![warn(missing_docs)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proc_macro2::LineColumn;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, GenericParam, ImplItem, Item, ItemImpl, Type};

/// The text inserted in front of each instrumented item.
pub const ATTR: &str = "#[fgtrace::traced] ";
/// The text inserted in front of a skipped method of an instrumented block.
pub const NOTRACE: &str = "#[fgtrace::notrace] ";

/// What one crate (or one file) had.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Source files looked at.
    pub files: usize,
    /// Free fns given the attribute.
    pub fns: usize,
    /// Impl blocks given the attribute.
    pub impls: usize,
    /// Methods with a body in those blocks that the block's attribute traces.
    pub methods: usize,
    /// Methods of those blocks the macro leaves alone (`const fn`, `#[notrace]`).
    pub methods_left: usize,
    /// Free `const fn`s, not instrumented.
    pub const_fns: usize,
    /// Items that already had `#[fgtrace::traced]` / `#[traced]`.
    pub already: usize,
    /// Fns declared in `extern` blocks.
    pub foreign_fns: usize,
    /// `macro_rules!` definitions and item-position macro calls not looked into.
    pub macros: usize,
    /// Free fns, impl blocks and methods a skip glob left out.
    pub skipped: usize,
}

impl Counts {
    /// Adds `o`'s counts to these, field by field (a crate's from its files').
    pub fn add(&mut self, o: &Counts) {
        self.files += o.files;
        self.fns += o.fns;
        self.impls += o.impls;
        self.methods += o.methods;
        self.methods_left += o.methods_left;
        self.const_fns += o.const_fns;
        self.already += o.already;
        self.foreign_fns += o.foreign_fns;
        self.macros += o.macros;
        self.skipped += o.skipped;
    }

    /// One line: what was instrumented and what was left, prefixed by `label`.
    pub fn summary(&self, label: &str) -> String {
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
        if self.skipped > 0 {
            let _ = write!(s, "; left out by --skip: {}", self.skipped);
        }
        s
    }
}

/// Which items to leave out, by path (`crate::module::fn`,
/// `crate::module::Type`, `crate::module::Type::method`).
pub trait Skip {
    /// `true` to leave the item at `path` out (a free fn or impl block stays as
    /// it is; a method gets [`NOTRACE`]).
    fn skip(&self, path: &str) -> bool;
}

/// Nothing is left out.
pub struct NoSkip;

impl Skip for NoSkip {
    fn skip(&self, _: &str) -> bool {
        false
    }
}

impl<F: Fn(&str) -> bool> Skip for F {
    fn skip(&self, path: &str) -> bool {
        self(path)
    }
}

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A free fn (at module level, or in an inline `mod`).
    Fn,
    /// An impl block (inherent or trait impl).
    Impl,
    /// A method with a body in an impl block.
    Method,
}

/// An item the instrumenting looks at, where it is in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemAt {
    /// Free fn, impl block or method.
    pub kind: Kind,
    /// `crate::module::name`, `crate::module::Type`, `crate::module::Type::method`.
    pub path: String,
    /// First and last line (1-based), outer attributes included.
    pub lines: (usize, usize),
}

/// The module path of a file at `rel` under the crate's source directory:
/// `lib.rs`, `main.rs` and `mod.rs` are their directory's module (`krate`
/// itself at the top), `a/b.rs` is `krate::a::b`.
pub fn module_path(krate: &str, rel: &Path) -> String {
    let mut path = krate.to_string();
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let name = if last {
            match part.strip_suffix(".rs") {
                Some("lib" | "main" | "mod") => continue,
                Some(stem) => stem,
                None => part.as_str(),
            }
        } else {
            part.as_str()
        };
        path.push_str("::");
        path.push_str(&name.replace('-', "_"));
    }
    path
}

/// The source with the attributes inserted, and what was found; `module`
/// is the file's module path (see [`module_path()`]).
pub fn instrument_source(
    text: &str,
    module: &str,
    skip: &dyn Skip,
) -> syn::Result<(String, Counts)> {
    let file = syn::parse_file(text)?;
    let mut counts = Counts {
        files: 1,
        ..Counts::default()
    };
    let mut v = Visit {
        skip,
        at: Vec::new(),
        counts: &mut counts,
        items: None,
    };
    v.items(&file.items, module);
    let at = v.at;
    // syn drops a leading byte order mark before parsing: its positions are
    // in the text after it.
    let base = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let lines = LineStarts::new(&text[base..]);
    let mut offsets: Vec<(usize, &str)> = at
        .iter()
        .map(|(lc, what)| (base + lines.offset(*lc), *what))
        .collect();
    offsets.sort_unstable();
    offsets.dedup();
    let mut out = String::with_capacity(text.len() + offsets.len() * ATTR.len());
    let mut last = 0;
    for (off, what) in offsets {
        out.push_str(&text[last..off]);
        out.push_str(what);
        last = off;
    }
    out.push_str(&text[last..]);
    Ok((out, counts))
}

/// Every free fn, impl block and method with a body the instrumenting
/// looks at (instrumented or not), in source order.
pub fn items(text: &str, module: &str) -> syn::Result<Vec<ItemAt>> {
    let file = syn::parse_file(text)?;
    let mut counts = Counts::default();
    let mut v = Visit {
        skip: &NoSkip,
        at: Vec::new(),
        counts: &mut counts,
        items: Some(Vec::new()),
    };
    v.items(&file.items, module);
    Ok(v.items.unwrap_or_default())
}

/// The innermost item (a method before its impl block) whose lines hold
/// `line`: what a compiler error at that line is about.
pub fn item_at(text: &str, module: &str, line: usize) -> Option<ItemAt> {
    items(text, module)
        .ok()?
        .into_iter()
        .filter(|i| i.lines.0 <= line && line <= i.lines.1)
        .min_by_key(|i| i.lines.1 - i.lines.0)
}

/// What [`instrument_dir`] did.
#[derive(Debug, Default)]
pub struct DirReport {
    /// What was instrumented and left, over all files.
    pub counts: Counts,
    /// Files that do not parse as a module (left as they were), and why.
    pub unparsed: Vec<(PathBuf, String)>,
    /// Files that could not be read or written.
    pub io_errors: Vec<(PathBuf, std::io::Error)>,
}

/// Instruments every `.rs` file under `src` in place; `krate` starts the
/// module paths.
pub fn instrument_dir(src: &Path, krate: &str, skip: &dyn Skip) -> DirReport {
    let mut report = DirReport::default();
    let mut files = Vec::new();
    if let Err(e) = rust_files(src, &mut files) {
        report.io_errors.push((src.to_path_buf(), e));
        return report;
    }
    files.sort();
    for file in &files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                report.io_errors.push((file.clone(), e));
                continue;
            }
        };
        let rel = file.strip_prefix(src).unwrap_or(file);
        match instrument_source(&text, &module_path(krate, rel), skip) {
            Ok((out, counts)) => {
                if out != text {
                    if let Err(e) = std::fs::write(file, out) {
                        report.io_errors.push((file.clone(), e));
                    }
                }
                report.counts.add(&counts);
            }
            Err(e) => {
                let at = e.span().start();
                report
                    .unparsed
                    .push((file.clone(), format!("{}:{}: {e}", at.line, at.column + 1)));
            }
        }
    }
    report
}

/// Every `.rs` file under `dir`, recursively.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
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

/// One walk over a file's items: where to insert what, the counts, and
/// (for [`items`]) each item looked at.
struct Visit<'a> {
    skip: &'a dyn Skip,
    at: Vec<(LineColumn, &'static str)>,
    counts: &'a mut Counts,
    items: Option<Vec<ItemAt>>,
}

impl Visit<'_> {
    fn found(&mut self, kind: Kind, path: &str, tokens: &dyn ToTokens) {
        if let Some(items) = &mut self.items {
            let span = tokens.span();
            items.push(ItemAt {
                kind,
                path: path.to_string(),
                lines: (span.start().line, span.end().line),
            });
        }
    }

    /// Collects where each item to instrument starts, recursing into inline modules.
    fn items(&mut self, items: &[Item], module: &str) {
        for item in items {
            match item {
                Item::Fn(f) => {
                    let path = format!("{module}::{}", f.sig.ident.unraw());
                    self.found(Kind::Fn, &path, item);
                    if is_traced(&f.attrs) {
                        self.counts.already += 1;
                    } else if f.sig.constness.is_some() {
                        self.counts.const_fns += 1;
                    } else if self.skip.skip(&path) {
                        self.counts.skipped += 1;
                    } else {
                        self.counts.fns += 1;
                        self.at.push((start_after_attrs(item), ATTR));
                    }
                }
                Item::Impl(imp) => self.impl_block(item, imp, module),
                Item::Mod(m) => {
                    if let Some((_, content)) = &m.content {
                        let inner = format!("{module}::{}", m.ident.unraw());
                        self.items(content, &inner);
                    }
                }
                Item::ForeignMod(f) => {
                    self.counts.foreign_fns += f
                        .items
                        .iter()
                        .filter(|i| matches!(i, syn::ForeignItem::Fn(_)))
                        .count();
                }
                Item::Macro(_) => self.counts.macros += 1,
                _ => {}
            }
        }
    }

    fn impl_block(&mut self, item: &Item, imp: &ItemImpl, module: &str) {
        let path = format!("{module}::{}", impl_type_name(imp));
        self.found(Kind::Impl, &path, item);
        let methods: Vec<_> = imp
            .items
            .iter()
            .filter_map(|it| match it {
                ImplItem::Fn(m) => Some(m),
                _ => None,
            })
            .collect();
        for m in &methods {
            self.found(
                Kind::Method,
                &format!("{path}::{}", m.sig.ident.unraw()),
                *m,
            );
        }
        if is_traced(&imp.attrs) {
            self.counts.already += 1;
            return;
        }
        if self.skip.skip(&path) {
            self.counts.skipped += 1;
            return;
        }
        self.counts.impls += 1;
        self.at.push((start_after_attrs(item), ATTR));
        for m in methods {
            if m.sig.constness.is_some() || has_attr(&m.attrs, "notrace") {
                self.counts.methods_left += 1;
            } else if self.skip.skip(&format!("{path}::{}", m.sig.ident.unraw())) {
                self.counts.skipped += 1;
                let mut bare = m.clone();
                bare.attrs.clear();
                self.at.push((first_token_start(&bare), NOTRACE));
            } else {
                self.counts.methods += 1;
            }
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

/// The name `#[traced]` gives an impl block's methods before `::method`: the
/// last segment of the self type, or the trait's name for a blanket
/// `impl<T> Trait for T` (as `macros/src/expand.rs` does).
fn impl_type_name(imp: &ItemImpl) -> String {
    if let (Some((_, trait_path, _)), Type::Path(ty)) = (&imp.trait_, &*imp.self_ty) {
        let is_param = ty.qself.is_none()
            && imp.generics.params.iter().any(|p| match p {
                GenericParam::Type(t) => ty.path.is_ident(&t.ident),
                _ => false,
            });
        if is_param {
            if let Some(last) = trait_path.segments.last() {
                return last.ident.unraw().to_string();
            }
        }
    }
    type_name(&imp.self_ty)
}

fn type_name(ty: &Type) -> String {
    match ty {
        Type::Path(p) => match p.path.segments.last() {
            Some(last) => last.ident.unraw().to_string(),
            None => String::new(),
        },
        Type::Reference(r) => type_name(&r.elem),
        Type::Ptr(p) => type_name(&p.elem),
        Type::Paren(p) => type_name(&p.elem),
        Type::Group(g) => type_name(&g.elem),
        Type::Slice(s) => format!("[{}]", type_name(&s.elem)),
        Type::Array(a) => format!("[{}; _]", type_name(&a.elem)),
        other => other.to_token_stream().to_string().replace(' ', ""),
    }
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
fn first_token_start(item: &dyn ToTokens) -> LineColumn {
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
        instrument_source(src, "c", &NoSkip).expect("parses")
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

    #[test]
    fn module_paths_follow_the_files_place() {
        assert_eq!(module_path("c", Path::new("lib.rs")), "c");
        assert_eq!(module_path("c", Path::new("main.rs")), "c");
        assert_eq!(module_path("c", Path::new("a.rs")), "c::a");
        assert_eq!(module_path("c", Path::new("a/mod.rs")), "c::a");
        assert_eq!(module_path("c", Path::new("a/b-c.rs")), "c::a::b_c");
    }

    #[test]
    fn skip_leaves_out_fns_blocks_and_methods_by_path() {
        let src = "\
fn keep() {}
fn gone() {}
impl A { fn m(&self) {} }
mod inner {
    impl<T> Tr for T { fn x() {} fn y() {} }
}
";
        let skip = |p: &str| matches!(p, "c::gone" | "c::A" | "c::inner::Tr::y");
        let (out, counts) = instrument_source(src, "c", &skip).unwrap();
        assert_eq!(
            out,
            "\
#[fgtrace::traced] fn keep() {}
fn gone() {}
impl A { fn m(&self) {} }
mod inner {
    #[fgtrace::traced] impl<T> Tr for T { fn x() {} #[fgtrace::notrace] fn y() {} }
}
"
        );
        assert_eq!(
            (counts.fns, counts.impls, counts.methods, counts.skipped),
            (1, 1, 1, 3)
        );
    }

    #[test]
    fn an_error_line_names_the_innermost_item() {
        let src = "\
/// Doc.
fn a() {
    let x = 1;
}
impl S {
    fn m(&self) {
        todo!()
    }
}
";
        let at = |line| item_at(src, "c::m", line).map(|i| (i.kind, i.path));
        assert_eq!(at(1), Some((Kind::Fn, "c::m::a".into())));
        assert_eq!(at(3), Some((Kind::Fn, "c::m::a".into())));
        assert_eq!(at(5), Some((Kind::Impl, "c::m::S".into())));
        assert_eq!(at(7), Some((Kind::Method, "c::m::S::m".into())));
        assert_eq!(at(10), None);
    }
}
