//! `#[budget(...)]`: a test's performance budget as an attribute. The test
//! body runs inside an `fgtrace::testing` capture; after it returns, every
//! limit is checked, and a failure panics with the offending call's graph.
//!
//! ```text
//! #[test]
//! #[fgtrace::testing::budget(parse_headers(calls = 1, max = "200us"), handle(instructions = 50_000))]
//! fn handler_stays_cheap() { handle(&request()); }
//! ```
//!
//! expands the body to
//!
//! ```text
//! static __FGTRACE_BUDGET: ::fgtrace::testing::__budget::Spec = Spec { counters, off_cpu, runs, warmup, stat,
//!     limits: &[("parse_headers", Limit::Calls(1)), ("parse_headers", Limit::Max(..)), ..] };
//! __FGTRACE_BUDGET.once(move || -> Ret { <body> })          // runs = 1 (default)
//! __FGTRACE_BUDGET.repeat(|| -> Ret { <body> })             // runs = N > 1
//! __FGTRACE_BUDGET.future(async move { <body> }).await      // async fn
//! ```
//!
//! Several `#[budget]` attributes on one fn are merged by the outermost, so
//! there is one capture (nested captures would hide calls from each other).
//! With `crate = path` (in any of them) every `::fgtrace` above is `path`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, LitInt, LitStr, Path, ReturnType, Token, Type};

use crate::args::{crate_or_default, is_module_path, CRATE_EXPECTS};

/// One `key = value`.
struct KeyValue {
    key: Ident,
    value: Value,
}

enum Value {
    Int(LitInt),
    Str(LitStr),
    Path(Path),
}

impl Value {
    fn span(&self) -> Span {
        match self {
            Value::Int(v) => v.span(),
            Value::Str(v) => v.span(),
            Value::Path(v) => v.span(),
        }
    }

    fn int<T: std::str::FromStr>(&self, what: &str) -> syn::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        match self {
            Value::Int(v) => v.base10_parse(),
            _ => Err(syn::Error::new(
                self.span(),
                format!("`{what}` takes a number"),
            )),
        }
    }

    fn string(&self, what: &str) -> syn::Result<String> {
        match self {
            Value::Str(v) => Ok(v.value()),
            _ => Err(syn::Error::new(
                self.span(),
                format!("`{what}` takes a string"),
            )),
        }
    }

    /// A function name: a path (`Parser::parse`) or a string.
    fn name(&self, what: &str) -> syn::Result<String> {
        match self {
            Value::Str(v) => Ok(v.value()),
            Value::Path(p) => Ok(path_name(p)),
            Value::Int(_) => Err(syn::Error::new(
                self.span(),
                format!("`{what}` takes a function name"),
            )),
        }
    }
}

impl Parse for Value {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(LitInt) {
            Ok(Value::Int(input.parse()?))
        } else if input.peek(LitStr) {
            Ok(Value::Str(input.parse()?))
        } else {
            Ok(Value::Path(input.parse()?))
        }
    }
}

impl Parse for KeyValue {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        Ok(KeyValue {
            key,
            value: input.parse()?,
        })
    }
}

/// `name(limit = .., ..)` or `option = ..`.
enum Entry {
    Func {
        name: String,
        span: Span,
        limits: Vec<KeyValue>,
    },
    Opt(KeyValue),
}

impl Parse for Entry {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (name, span) = if input.peek(LitStr) {
            let s: LitStr = input.parse()?;
            (s.value(), s.span())
        } else {
            let p: Path = input.parse()?;
            if input.peek(Token![=]) {
                let key = p
                    .get_ident()
                    .cloned()
                    .ok_or_else(|| syn::Error::new(p.span(), "expected an option name"))?;
                input.parse::<Token![=]>()?;
                return Ok(Entry::Opt(KeyValue {
                    key,
                    value: input.parse()?,
                }));
            }
            (path_name(&p), p.span())
        };
        let content;
        syn::parenthesized!(content in input);
        let limits = Punctuated::<KeyValue, Token![,]>::parse_terminated(&content)?;
        Ok(Entry::Func {
            name,
            span,
            limits: limits.into_iter().collect(),
        })
    }
}

fn path_name(p: &Path) -> String {
    p.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

/// Everything the attributes on one fn asked for.
#[derive(Default)]
struct Spec {
    counters: Option<TokenStream>,
    runs: Option<usize>,
    warmup: Option<usize>,
    stat: Option<TokenStream>,
    /// `(function, Limit variant, span of the limit's key)`; the path to
    /// `Limit` is only known once every attribute has been read.
    limits: Vec<(String, TokenStream, Span)>,
    counted: bool,
    /// An `off_cpu` or `blocked` limit: the capture records off-CPU time.
    off_cpu: bool,
    /// `crate = path`: where fgtrace is. `None` is `::fgtrace`.
    krate: Option<Path>,
}

impl Spec {
    fn add(&mut self, attr: TokenStream) -> syn::Result<()> {
        let entries = Punctuated::<Entry, Token![,]>::parse_terminated.parse2(attr)?;
        for e in entries {
            match e {
                Entry::Opt(kv) => self.option(kv)?,
                Entry::Func { name, span, limits } => {
                    if limits.is_empty() {
                        return Err(syn::Error::new(
                            span,
                            format!("no limits for `{name}`: add e.g. `{name}(max = \"1ms\")`"),
                        ));
                    }
                    for kv in limits {
                        let limit = self.limit(&kv)?;
                        self.limits.push((name.clone(), limit, kv.key.span()));
                    }
                }
            }
        }
        Ok(())
    }

    fn option(&mut self, kv: KeyValue) -> syn::Result<()> {
        let v = &kv.value;
        match kv.key.to_string().as_str() {
            "runs" => self.runs = Some(v.int("runs")?),
            "warmup" => self.warmup = Some(v.int("warmup")?),
            "stat" => {
                self.stat = Some(match v.string("stat")?.as_str() {
                    "median" => quote!(Median),
                    "min" => quote!(Min),
                    "max" => quote!(Max),
                    _ => return Err(syn::Error::new(v.span(), "`stat` is \"median\", \"min\" or \"max\"")),
                })
            }
            "counters" => {
                self.counters = Some(match v.string("counters")?.as_str() {
                    "auto" => quote!(Auto),
                    "required" => quote!(Required),
                    "off" => quote!(Off),
                    _ => return Err(syn::Error::new(v.span(), "`counters` is \"auto\", \"required\" or \"off\"")),
                })
            }
            "crate" => {
                if self.krate.is_some() {
                    return Err(syn::Error::new(
                        kv.key.span(),
                        "duplicate #[budget] option `crate`",
                    ));
                }
                self.krate = Some(match v {
                    Value::Path(p) if is_module_path(p) => p.clone(),
                    _ => return Err(syn::Error::new(v.span(), CRATE_EXPECTS)),
                })
            }
            other => {
                return Err(syn::Error::new(
                    kv.key.span(),
                    format!("unknown option `{other}`: options are `runs`, `warmup`, `stat`, `counters`, `crate`; limits go in `function(..)`"),
                ))
            }
        }
        Ok(())
    }

    fn limit(&mut self, kv: &KeyValue) -> syn::Result<TokenStream> {
        let key = kv.key.to_string();
        let v = &kv.value;
        let dur = |v: &Value| -> syn::Result<TokenStream> {
            let ns = parse_duration(&v.string(&key)?).map_err(|e| syn::Error::new(v.span(), e))?;
            Ok(quote!(::core::time::Duration::from_nanos(#ns)))
        };
        Ok(match key.as_str() {
            "calls" => {
                let n: usize = v.int(&key)?;
                quote!(Calls(#n))
            }
            "max_calls" => {
                let n: usize = v.int(&key)?;
                quote!(MaxCalls(#n))
            }
            "max" => {
                let d = dur(v)?;
                quote!(Max(#d))
            }
            "total" => {
                let d = dur(v)?;
                quote!(Total(#d))
            }
            "self_total" => {
                let d = dur(v)?;
                quote!(SelfTotal(#d))
            }
            "instructions" => {
                self.counted = true;
                let n: u64 = v.int(&key)?;
                quote!(Instructions(#n))
            }
            "instructions_total" => {
                self.counted = true;
                let n: u64 = v.int(&key)?;
                quote!(InstructionsTotal(#n))
            }
            "allocs" => {
                let n: u64 = v.int(&key)?;
                quote!(Allocs(#n))
            }
            "allocs_total" => {
                let n: u64 = v.int(&key)?;
                quote!(AllocsTotal(#n))
            }
            "alloc_bytes" => {
                let n: u64 = v.int(&key)?;
                quote!(AllocBytes(#n))
            }
            "off_cpu" => {
                self.off_cpu = true;
                let d = dur(v)?;
                quote!(OffCpu(#d))
            }
            "blocked" => {
                self.off_cpu = true;
                let d = dur(v)?;
                quote!(Blocked(#d))
            }
            "growth" | "alloc_growth" | "instructions_growth" => {
                let (value, k) = parse_growth(&v.string(&key)?)
                    .map_err(|e| syn::Error::new(v.span(), format!("`{key}`: {e}")))?;
                // 0 duration, 1 allocations, 2 instructions.
                let measure: u8 = match key.as_str() {
                    "growth" => 0,
                    "alloc_growth" => 1,
                    _ => {
                        self.counted = true;
                        2
                    }
                };
                quote!(Growth(#value, #k, #measure))
            }
            "inside" => {
                let g = v.name(&key)?;
                quote!(Inside(#g))
            }
            "not_inside" => {
                let g = v.name(&key)?;
                quote!(NotInside(#g))
            }
            p if p.len() > 1 && p.starts_with('p') && p[1..].bytes().all(|b| b.is_ascii_digit()) => {
                let pct: f64 = p[1..].parse().unwrap_or(101.0);
                if pct > 100.0 {
                    return Err(syn::Error::new(kv.key.span(), "a percentile is p0 to p100"));
                }
                let d = dur(v)?;
                quote!(Percentile(#pct, #d))
            }
            other => {
                return Err(syn::Error::new(
                    kv.key.span(),
                    format!(
                        "unknown limit `{other}`: limits are `calls`, `max_calls`, `max`, `total`, `self_total`, \
                         `p50`/`p99`/.., `instructions`, `instructions_total`, `allocs`, `allocs_total`, `alloc_bytes`, \
                         `off_cpu`, `blocked`, `inside`, `not_inside`, `growth`, `alloc_growth`, \
                         `instructions_growth`"
                    ),
                ))
            }
        })
    }
}

/// `"len: linear"` (or `constant`, `quadratic`, an exponent such as `1.5`)
/// to the value's name and the class's exponent.
fn parse_growth(s: &str) -> Result<(String, f64), String> {
    let expects = "expects \"VALUE: CLASS\", e.g. \"len: linear\" \
                   (classes: constant, linear, quadratic, or an exponent such as 1.5)";
    let Some((value, class)) = s.split_once(':') else {
        return Err(expects.into());
    };
    let (value, class) = (value.trim(), class.trim());
    if value.is_empty() {
        return Err(expects.into());
    }
    let k = match class {
        "constant" => 0.0,
        "linear" => 1.0,
        "quadratic" => 2.0,
        other => match other.parse::<f64>() {
            Ok(k) if k.is_finite() && k >= 0.0 => k,
            _ => return Err(expects.into()),
        },
    };
    Ok((value.to_string(), k))
}

/// `"200us"`, `"1.5 ms"`, `"2s"`, `"750ns"` (also `µs`) to nanoseconds.
fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].trim());
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration such as \"200us\" or \"1.5ms\""))?;
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("unit of `{s}`: use ns, us, ms or s")),
    };
    Ok((n * scale).round() as u64)
}

/// Whether an attribute is this one (`budget`, `testing::budget`, ...).
fn is_budget(attr: &syn::Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "budget")
}

pub(crate) fn budget(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr, item.clone()) {
        Ok(out) => out,
        Err(err) => {
            let err = err.to_compile_error();
            quote!(#err #item)
        }
    }
}

fn expand(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let mut f: ItemFn = syn::parse2(item)
        .map_err(|e| syn::Error::new(e.span(), "#[budget] applies to a test fn"))?;
    let mut spec = Spec::default();
    spec.add(attr)?;
    // Merge the `#[budget]`s below this one into one capture.
    let mut rest = Vec::new();
    for a in std::mem::take(&mut f.attrs) {
        if is_budget(&a) {
            spec.add(a.meta.require_list()?.tokens.clone())?;
        } else {
            rest.push(a);
        }
    }
    f.attrs = rest;
    if spec.limits.is_empty() {
        return Err(syn::Error::new(
            Span::call_site(),
            "#[budget] needs at least one `function(limit = ..)`",
        ));
    }
    let runs = spec.runs.unwrap_or(1).max(1);
    let warmup = spec.warmup.unwrap_or(if runs > 1 { 1 } else { 0 });
    let counters = spec.counters.clone().unwrap_or(if spec.counted {
        quote!(Auto)
    } else {
        quote!(Off)
    });
    let stat = spec.stat.clone().unwrap_or(quote!(Median));
    let off_cpu = spec.off_cpu;
    let krate = crate_or_default(spec.krate.as_ref());
    let limits = spec.limits.iter().map(
        |(name, limit, sp)| quote_spanned!(*sp=> (#name, #krate::testing::__budget::Limit::#limit)),
    );
    let block = &f.block;
    let ret = match &f.sig.output {
        ReturnType::Type(_, ty) if !has_impl_trait(ty) => quote!(-> #ty),
        ReturnType::Default => quote!(-> ()),
        _ => quote!(),
    };
    let run = if f.sig.asyncness.is_some() {
        if runs > 1 {
            return Err(syn::Error::new(
                f.sig.fn_token.span,
                "`runs` is for sync test fns: an async body is captured once",
            ));
        }
        quote!(__FGTRACE_BUDGET.future(async move #block).await)
    } else if runs > 1 {
        quote!(__FGTRACE_BUDGET.repeat(|| #ret #block))
    } else {
        quote!(__FGTRACE_BUDGET.once(move || #ret #block))
    };
    let body = quote!({
        static __FGTRACE_BUDGET: #krate::testing::__budget::Spec = #krate::testing::__budget::Spec {
            counters: #krate::testing::Counters::#counters,
            off_cpu: #off_cpu,
            runs: #runs,
            warmup: #warmup,
            stat: #krate::testing::Stat::#stat,
            limits: &[#(#limits),*],
        };
        #run
    });
    *f.block = syn::parse2(body)?;
    Ok(quote!(#f))
}

fn has_impl_trait(ty: &Type) -> bool {
    quote!(#ty).to_string().contains("impl ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("200us"), Ok(200_000));
        assert_eq!(parse_duration("1.5 ms"), Ok(1_500_000));
        assert_eq!(parse_duration("2s"), Ok(2_000_000_000));
        assert_eq!(parse_duration("750ns"), Ok(750));
        assert_eq!(parse_duration("3µs"), Ok(3_000));
        assert!(parse_duration("3 minutes").is_err());
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn off_cpu_limits_ask_for_off_cpu_time() {
        let out = budget(
            quote!(handler(blocked = "0ns", off_cpu = "1ms")),
            quote! { #[test] fn t() { work(); } },
        )
        .to_string();
        assert!(
            out.contains("Blocked (:: core :: time :: Duration :: from_nanos (0u64))"),
            "{out}"
        );
        assert!(
            out.contains("OffCpu (:: core :: time :: Duration :: from_nanos (1000000u64))"),
            "{out}"
        );
        assert!(out.contains("off_cpu : true"), "{out}");
        let plain = budget(quote!(handler(max = "1ms")), quote! { #[test] fn t() {} }).to_string();
        assert!(plain.contains("off_cpu : false"), "{plain}");
    }

    #[test]
    fn limits_merge_from_stacked_attributes() {
        let out = budget(
            quote!(parse(calls = 1, max = "200us"), runs = 3),
            quote! {
                #[fgtrace::testing::budget(handle(instructions = 5, inside = main))]
                #[test]
                fn t() { work(); }
            },
        )
        .to_string();
        assert!(out.contains("Calls (1usize)"), "{out}");
        assert!(out.contains("Duration :: from_nanos (200000u64)"), "{out}");
        assert!(out.contains("Instructions (5u64)"), "{out}");
        assert!(out.contains("Inside (\"main\")"), "{out}");
        assert!(out.contains("Counters :: Auto"), "{out}");
        assert!(out.contains("runs : 3usize"), "{out}");
        assert!(out.contains(". repeat"), "{out}");
        assert!(
            !out.contains("budget ("),
            "the inner attribute is merged: {out}"
        );
        assert!(out.contains("# [test]"), "{out}");
    }

    #[test]
    fn mistakes_are_compile_errors() {
        for (attr, msg) in [
            (quote!(parse(fast = 1)), "unknown limit `fast`"),
            (quote!(parse(max = "3 minutes")), "unit of `3 minutes`"),
            (quote!(parse()), "no limits for `parse`"),
            (quote!(speed = 1), "unknown option `speed`"),
            (quote!(runs = 3), "needs at least one"),
            (
                quote!(parse(growth = "linear")),
                "expects \\\"VALUE: CLASS\\\"",
            ),
            (quote!(parse(growth = "len: cubic")), "`growth`: expects"),
            (quote!(parse(growth = 2)), "`growth` takes a string"),
        ] {
            let out = budget(
                attr,
                quote!(
                    fn t() {}
                ),
            )
            .to_string();
            assert!(
                out.contains("compile_error") && out.contains(msg),
                "{msg}: {out}"
            );
        }
    }
}
