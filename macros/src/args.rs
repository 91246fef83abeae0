//! The options of `#[traced(...)]`.

use proc_macro2::TokenStream;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Attribute, Expr, ExprLit, Lit, LitStr, Meta};

/// Options of one `#[traced(...)]`, each remembered with its span so misuse
/// can be reported at the option.
#[derive(Default)]
pub(crate) struct Options {
    /// `name = "..."`: the display name of one fn.
    pub name: Option<LitStr>,
    /// `prefix = "..."`: replaces the type name in an impl block's `Type::method`.
    pub prefix: Option<LitStr>,
}

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

    fn parse_one(&mut self, meta: ParseNestedMeta) -> syn::Result<()> {
        let (key, slot) = if meta.path.is_ident("name") {
            ("name", &mut self.name)
        } else if meta.path.is_ident("prefix") {
            ("prefix", &mut self.prefix)
        } else {
            let path = meta.path.get_ident().map(ToString::to_string);
            let what = path.map_or(String::new(), |p| format!(" `{p}`"));
            return Err(meta.error(format!(
                "unknown #[traced] option{what}: expected `name = \"...\"` or `prefix = \"...\"`"
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
