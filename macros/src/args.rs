//! The options of `#[traced(...)]` and `#[notrace(...)]`.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{parse_quote, Attribute, Expr, ExprLit, ExprPath, Lit, LitStr, Meta, Path};

/// Options of one `#[traced(...)]`, each remembered with its span so misuse
/// can be reported at the option.
#[derive(Default)]
pub(crate) struct Options {
    /// `name = "..."`: the display name of one fn.
    pub name: Option<LitStr>,
    /// `prefix = "..."`: replaces the type name in an impl block's `Type::method`.
    pub prefix: Option<LitStr>,
    /// `crate = path`: where fgtrace is, for a renamed dependency or a facade
    /// crate that re-exports it. `None` is `::fgtrace`.
    pub krate: Option<Path>,
    /// `values(name = expr, arg, ..)`: values recorded with each call.
    pub values: Vec<(syn::Ident, Expr)>,
    /// `ret` (at the top level or inside `values(..)`): records the return value.
    pub ret: Option<Span>,
    /// Where `values(..)` was written, for errors about the whole list.
    pub values_span: Option<Span>,
}

/// Most expressions `values(..)` may name (`ret` aside).
pub(crate) const MAX_NAMED_VALUES: usize = 4;

impl Options {
    /// Parses the tokens inside `#[traced(...)]`.
    pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Options> {
        let mut opts = Options::default();
        syn::meta::parser(|meta| opts.parse_one(meta)).parse2(tokens)?;
        Ok(opts)
    }

    /// Parses a `#[traced]` / `#[traced(...)]` attribute found on a method of
    /// a traced impl block.
    pub(crate) fn from_attr(attr: &Attribute) -> syn::Result<Options> {
        match &attr.meta {
            Meta::Path(_) => Ok(Options::default()),
            Meta::List(list) => Options::parse(list.tokens.clone()),
            Meta::NameValue(nv) => Err(syn::Error::new_spanned(
                nv,
                "expected `#[traced]` or `#[traced(name = \"...\")]`",
            )),
        }
    }

    /// The path the expansion calls fgtrace by: `crate = path`, or `::fgtrace`.
    pub(crate) fn crate_path(&self) -> Path {
        crate_or_default(self.krate.as_ref())
    }

    fn parse_one(&mut self, meta: ParseNestedMeta) -> syn::Result<()> {
        if meta.path.is_ident("crate") {
            return parse_crate(&meta, &mut self.krate, "traced");
        }
        if meta.path.is_ident("ret") {
            return self.parse_ret(&meta);
        }
        if meta.path.is_ident("values") {
            if self.values_span.is_some() {
                return Err(meta.error("duplicate #[traced] option `values`"));
            }
            self.values_span = Some(meta.path.span());
            let empty = "`values(..)` names at least one value, e.g. `values(len = input.len())`";
            if !meta.input.peek(syn::token::Paren) {
                return Err(meta.error(empty));
            }
            let content;
            syn::parenthesized!(content in meta.input);
            if content.is_empty() {
                return Err(meta.error(empty));
            }
            let tokens: TokenStream = content.parse()?;
            syn::meta::parser(|m| self.parse_value(m)).parse2(tokens)?;
            return Ok(());
        }
        let (key, slot) = if meta.path.is_ident("name") {
            ("name", &mut self.name)
        } else if meta.path.is_ident("prefix") {
            ("prefix", &mut self.prefix)
        } else {
            let path = meta.path.get_ident().map(ToString::to_string);
            let what = path.map_or(String::new(), |p| format!(" `{p}`"));
            return Err(meta.error(format!(
                "unknown #[traced] option{what}: \
                 expected `name = \"...\"`, `prefix = \"...\"`, `values(..)`, `ret` or `crate = path`"
            )));
        };
        if slot.is_some() {
            return Err(meta.error(format!("duplicate #[traced] option `{key}`")));
        }
        // Parse any expression so that `name = foo` gets our message, not syn's.
        match meta.value()?.parse::<Expr>()? {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) if !s.value().is_empty() => {
                *slot = Some(s);
                Ok(())
            }
            other => Err(syn::Error::new_spanned(
                other,
                format!("`{key}` expects a non-empty string literal, e.g. `{key} = \"parse\"`"),
            )),
        }
    }
}

impl Options {
    fn parse_ret(&mut self, meta: &ParseNestedMeta) -> syn::Result<()> {
        if self.ret.is_some() {
            return Err(meta.error("duplicate #[traced] option `ret`"));
        }
        if !meta.input.is_empty() && !meta.input.peek(syn::Token![,]) {
            return Err(meta.error("`ret` takes nothing: `#[traced(ret)]`"));
        }
        self.ret = Some(meta.path.span());
        Ok(())
    }

    /// One item of `values(..)`: `name = expr`, a bare argument name, or `ret`.
    fn parse_value(&mut self, meta: ParseNestedMeta) -> syn::Result<()> {
        if meta.path.is_ident("ret") {
            return self.parse_ret(&meta);
        }
        let Some(name) = meta.path.get_ident().cloned() else {
            return Err(meta.error(
                "a value is `name = expression` or an argument's name, e.g. \
                 `values(len = input.len(), depth)`",
            ));
        };
        if self.values.iter().any(|(n, _)| *n == name) {
            return Err(meta.error(format!("duplicate value `{name}`")));
        }
        if self.values.len() == MAX_NAMED_VALUES {
            return Err(meta.error(format!(
                "at most {MAX_NAMED_VALUES} values per fn (and `ret`): each one is recorded \
                 with every call"
            )));
        }
        let expr = if meta.input.peek(syn::Token![=]) {
            meta.value()?.parse::<Expr>()?
        } else {
            parse_quote!(#name)
        };
        self.values.push((name, expr));
        Ok(())
    }

    /// Whether calls record any value.
    pub(crate) fn has_values(&self) -> bool {
        !self.values.is_empty() || self.ret.is_some()
    }
}

/// Parses the tokens inside `#[notrace(...)]`: only `crate = path`, accepted
/// so that code written against a renamed fgtrace can say so everywhere.
pub(crate) fn parse_notrace(tokens: TokenStream) -> syn::Result<Option<Path>> {
    let mut krate = None;
    syn::meta::parser(|meta| {
        if meta.path.is_ident("crate") {
            parse_crate(&meta, &mut krate, "notrace")
        } else {
            let path = meta.path.get_ident().map(ToString::to_string);
            let what = path.map_or(String::new(), |p| format!(" `{p}`"));
            Err(meta.error(format!(
                "unknown #[notrace] option{what}: the only option is `crate = path`"
            )))
        }
    })
    .parse2(tokens)?;
    Ok(krate)
}

/// Parses a `#[notrace]` / `#[notrace(...)]` attribute found on a method of a
/// traced impl block.
pub(crate) fn notrace_from_attr(attr: &Attribute) -> syn::Result<Option<Path>> {
    match &attr.meta {
        Meta::Path(_) => Ok(None),
        Meta::List(list) => parse_notrace(list.tokens.clone()),
        Meta::NameValue(nv) => Err(syn::Error::new_spanned(
            nv,
            "expected `#[notrace]` or `#[notrace(crate = path)]`",
        )),
    }
}

/// `path`, or fgtrace's own `::fgtrace` when no `crate = ..` was given.
pub(crate) fn crate_or_default(krate: Option<&Path>) -> Path {
    match krate {
        Some(path) => path.clone(),
        None => parse_quote!(::fgtrace),
    }
}

/// What `crate = ..` was expected to be, for error messages.
pub(crate) const CRATE_EXPECTS: &str = "`crate` expects a path to the fgtrace crate, \
     e.g. `crate = fgt` or `crate = ::my_facade::fgtrace`";

/// `crate = path` of the attribute `attr` (`traced`, `notrace`).
fn parse_crate(meta: &ParseNestedMeta, slot: &mut Option<Path>, attr: &str) -> syn::Result<()> {
    if slot.is_some() {
        return Err(meta.error(format!("duplicate #[{attr}] option `crate`")));
    }
    // Any expression, so that `crate = 5` or `crate = "fgt"` gets our message.
    match meta.value()?.parse::<Expr>()? {
        Expr::Path(ExprPath {
            attrs, qself, path, ..
        }) if attrs.is_empty() && qself.is_none() && is_module_path(&path) => {
            *slot = Some(path);
            Ok(())
        }
        other => Err(syn::Error::new_spanned(other, CRATE_EXPECTS)),
    }
}

/// A path a module can be at: no generic arguments.
pub(crate) fn is_module_path(path: &Path) -> bool {
    path.segments.iter().all(|s| s.arguments.is_none())
}
