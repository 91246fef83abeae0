//! `#[traced]` and `#[notrace]` for fgtrace.
//!
//! `#[traced]` puts an entry probe at the top of a fn body: a `static` call
//! site descriptor plus a guard whose `Drop` records the exit, so `return`,
//! `?` and unwinding are all covered without touching the user's code. An
//! `async fn` instead wraps its body in `TracedFuture`, which probes every
//! poll. The expansion only refers to `::fgtrace::__private` (or
//! `<path>::__private` with `crate = path`); see `expand.rs` for the exact
//! shape.

#![warn(missing_docs)]

use proc_macro::TokenStream;

mod args;
mod budget;
mod expand;
mod plan;
#[cfg(test)]
mod tests;

/// Instruments a fn, or every method of an `impl` block, with fgtrace probes.
///
/// - On a fn (free fn, method, trait impl method, trait default method):
///   records each call under the fn's name, or `#[traced(name = "...")]`.
/// - On an `impl` block: records every method as `Type::method` (the last
///   path segment of the self type; the trait's name for a blanket
///   `impl<T> Trait for T`), or `Prefix::method` with `#[traced(prefix = "Prefix")]`.
///   Opt a method out with `#[notrace]`; rename one with `#[traced(name = "...")]`.
///   What the block cannot trace is left as it is, never an error for the
///   block: `const fn`s (they can run at compile time, where no probe can),
///   fns without a body, and items that are not fns.
///
/// `#[traced(crate = path)]` says where fgtrace is when it is not
/// `::fgtrace`: a renamed dependency (`fgt = { package = "fgtrace", .. }`,
/// then `#[fgt::traced(crate = fgt)]`) or a crate that re-exports it
/// (`#[traced(crate = ::my_facade::fgtrace)]`). It combines with `name` and
/// `prefix` in any order. On an `impl` block it applies to every method, and
/// the block then also recognises `#[path::notrace]` and `#[path::traced]` on
/// its methods (besides `#[notrace]` and `#[fgtrace::notrace]`).
///
/// `#[traced(values(len = input.len(), depth))]` records up to 4 values with
/// every call (`name = expression`, or an argument's bare name), evaluated at
/// entry; `ret` (alone or inside `values(..)`) records the return value. A
/// value is an integer up to 64 bits, a `bool`, a `char` or a `&'static str`
/// (or a reference to one); a return value may also be a `Result` or `Option`
/// (its variant, with the inner value when it is one of those; an inner
/// string where the return type spells it `&'static str`). Any other type is
/// a compile error at the expression. On an `impl` block they go on each method; on an
/// `async fn` the values are taken at the first poll, the return value at
/// completion. A fn without them expands exactly as before.
///
/// Written on a `const fn` itself (free, or a method in a block), on a fn
/// without a body, or on any other item, `#[traced]` is a `compile_error!`:
/// what was asked for explicitly cannot be done, so it is not dropped in
/// silence. (Tools that annotate a whole crate skip free `const fn`s, as
/// `checks/real-crates/` does.)
///
/// The expansion compiles in crates of every edition, 2015 included, with or
/// without `std`.
///
/// ```
/// use fgtrace::Event;
///
/// struct Parser;
///
/// #[fgtrace::traced]
/// impl Parser {
///     fn parse(&self, s: &str) -> usize { self.count(s) }
///     #[notrace]
///     fn count(&self, s: &str) -> usize { s.len() }
/// }
///
/// #[fgtrace::traced(name = "load", values(len = input.len()))]
/// fn load_config(input: &str) -> usize { Parser.parse(input) }
///
/// let session = fgtrace::Session::start(fgtrace::Config::builtin())?;
/// assert_eq!(load_config("abc"), 3);
/// let trace = session.stop()?;
///
/// // The renamed fn, then the block's method as `Type::method`; not `count`.
/// let names: Vec<&str> = trace.calls().map(|c| trace.meta.site_name(c.site)).collect();
/// assert_eq!(names, ["load", "Parser::parse"]);
/// // The value, named by the site and following its call in the events.
/// let load = trace.meta.sites.iter().find(|s| s.name == "load").unwrap();
/// assert_eq!(load.values, ["len"]);
/// let values = trace.events().find_map(|e| match e {
///     Event::Values(v) => Some(v),
///     _ => None,
/// });
/// assert_eq!(values.unwrap().values[0].to_string(), "3");
/// # Ok::<(), fgtrace::Error>(())
/// ```
#[proc_macro_attribute]
pub fn traced(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::traced(attr.into(), item.into()).into()
}

/// Excludes a method from a `#[traced]` impl block. The block's `#[traced]`
/// removes this attribute (so inside such a block it needs no import, and an
/// import used only there is reported unused); anywhere else it leaves the
/// item unchanged. It accepts the same `crate = path` option as `#[traced]`
/// (`#[fgt::notrace(crate = fgt)]`); the option only has to be well formed,
/// since `#[notrace]` expands to nothing that names fgtrace.
#[proc_macro_attribute]
pub fn notrace(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::notrace(attr.into(), item.into()).into()
}

/// A test's performance budget, checked on a capture of its body; re-exported
/// as `fgtrace::testing::budget` (see there). Like `#[traced]` it takes
/// `crate = path` when fgtrace is not `::fgtrace`
/// (`#[fgt::testing::budget(crate = fgt, handle(calls = 1))]`).
#[proc_macro_attribute]
pub fn budget(attr: TokenStream, item: TokenStream) -> TokenStream {
    budget::budget(attr.into(), item.into()).into()
}
