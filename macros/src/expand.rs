//! The expansion of `#[traced]`.
//!
//! A sync fn keeps its signature and statements; one statement goes first:
//!
//! ```text
//! let __fgtrace_guard = ::fgtrace::__private::enter({
//!     extern crate core as __fgtrace_core;
//!     static __FGTRACE_SITE: ::fgtrace::__private::Site = ::fgtrace::__private::Site::new(
//!         "name", ::core::module_path!(), __fgtrace_core::file!(), __fgtrace_core::line!(), false);
//!     &__FGTRACE_SITE
//! });
//! ```
//!
//! The site `static` sits in its own block so user code cannot see or clash
//! with it (and so generic fns work: one static for all instantiations). The
//! guard's name is `mixed_site` hygienic. `line!()`/`file!()` carry the fn
//! name's span, so they report the fn's own line, not the attribute's; with
//! that span their path resolves as the user's crate's edition says, and in
//! a 2015 crate with `std`, `::core` is not there (see `instrument` below):
//! hence the block-local `extern crate`.
//!
//! An `async fn` keeps its signature; its body becomes
//! `::fgtrace::__private::TracedFuture::new(<site>, async move { .. }).await`
//! where `<site>` is the same `{ static ..; &__FGTRACE_SITE }` block.
//! So that `?` and `return` in the block see the fn's output type, the block
//! starts with a never-taken `return` of a value of that type (the trick of
//! tracing's `#[instrument]`), with `impl Trait` parts replaced by `_`.
//!
//! With `crate = path` every `::fgtrace` above is `path` instead (the user's
//! tokens, so a wrong path is reported at the option); the items called under
//! `__private` are the same.
//!
//! The user's tokens are moved, never re-printed, so errors in a body keep
//! pointing at the user's code.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    parse_quote, parse_quote_spanned, Attribute, Block, GenericParam, ImplItem, ImplItemFn, Item,
    ItemImpl, LitStr, Path, ReturnType, Signature, Stmt, TraitItemFn, Type,
};

use crate::args::{self, Options};
use crate::plan;

const CONST_FN: &str = "#[traced] cannot instrument a `const fn`: probes read a clock at run time";
const NOT_A_FN: &str = "#[traced] applies to fns and impl blocks";
const NO_BODY: &str = "#[traced] needs a fn body, and this fn has none: \
    annotate the method in each `impl` instead (or give it a default body)";
const TRAIT_DEF: &str = "#[traced] cannot instrument a trait definition: \
    put it on the `impl` blocks (or on a default method body)";

/// `#[traced]`: on error, the original item is kept next to the
/// `compile_error!` so the error is the only one reported.
pub(crate) fn traced(attr: TokenStream, item: TokenStream) -> TokenStream {
    match Options::parse(attr).and_then(|opts| expand_item(&opts, item.clone())) {
        Ok(out) => out,
        Err(err) => {
            let err = err.to_compile_error();
            quote!(#err #item)
        }
    }
}

/// `#[notrace]` outside a traced impl block has nothing to do but check its
/// options.
pub(crate) fn notrace(attr: TokenStream, item: TokenStream) -> TokenStream {
    match args::parse_notrace(attr) {
        Ok(_) => item,
        Err(err) => {
            let err = err.to_compile_error();
            quote!(#err #item)
        }
    }
}

fn expand_item(opts: &Options, tokens: TokenStream) -> syn::Result<TokenStream> {
    let item = match syn::parse2::<Item>(tokens.clone()) {
        Ok(item) => item,
        // Not an `Item`, but maybe an impl item: a specializing `default fn`.
        Err(err) => match syn::parse2::<ImplItem>(tokens) {
            Ok(ImplItem::Fn(mut f)) => {
                instrument_lone_fn(opts, &f.sig, &mut f.block)?;
                return Ok(f.into_token_stream());
            }
            _ => return Err(err),
        },
    };
    match item {
        Item::Fn(mut f) => {
            instrument_lone_fn(opts, &f.sig, &mut f.block)?;
            Ok(f.into_token_stream())
        }
        Item::Impl(mut imp) => {
            if let Some(name) = &opts.name {
                return Err(syn::Error::new_spanned(
                    name,
                    "`name` names a single fn: on an impl block use `prefix = \"...\"`, \
                     or `#[traced(name = \"...\")]` on the method",
                ));
            }
            if let Some(span) = opts.values_span.or(opts.ret) {
                return Err(syn::Error::new(
                    span,
                    "`values(..)` and `ret` name one fn's arguments and result: \
                     put them on the method, `#[traced(values(..))]`",
                ));
            }
            instrument_impl(opts, &mut imp)?;
            Ok(imp.into_token_stream())
        }
        Item::Trait(t) => {
            let (kw, ident) = (&t.trait_token, &t.ident);
            Err(syn::Error::new_spanned(quote!(#kw #ident), TRAIT_DEF))
        }
        // syn keeps a fn without a body (trait method declaration, foreign
        // fn) as raw tokens.
        Item::Verbatim(tokens) => match syn::parse2::<TraitItemFn>(tokens.clone()) {
            Ok(f) if f.default.is_none() => Err(syn::Error::new_spanned(&f.sig, NO_BODY)),
            _ => Err(syn::Error::new_spanned(tokens, NOT_A_FN)),
        },
        other => Err(syn::Error::new_spanned(item_head(&other), NOT_A_FN)),
    }
}

/// A fn annotated on its own: the macro cannot see an enclosing impl, so the
/// name is the bare fn name unless `name` says otherwise.
fn instrument_lone_fn(opts: &Options, sig: &Signature, block: &mut Block) -> syn::Result<()> {
    reject_prefix(opts)?;
    let name = match &opts.name {
        Some(name) => name.clone(),
        None => LitStr::new(&sig.ident.unraw().to_string(), sig.ident.span()),
    };
    instrument(sig, block, &name, &opts.crate_path(), opts)
}

/// Instruments every fn of an impl block, honouring per-method attributes.
/// The block's `crate = ..` applies to every method (a method's own
/// `#[traced(crate = ..)]` overrides it).
fn instrument_impl(opts: &Options, imp: &mut ItemImpl) -> syn::Result<()> {
    let prefix = match &opts.prefix {
        Some(p) => p.value(),
        None => impl_type_name(imp),
    };
    let krate = opts.crate_path();
    let mut errors: Option<syn::Error> = None;
    for item in &mut imp.items {
        if let ImplItem::Fn(f) = item {
            if let Err(e) = instrument_method(&prefix, &krate, f) {
                match &mut errors {
                    Some(all) => all.combine(e),
                    None => errors = Some(e),
                }
            }
        }
    }
    errors.map_or(Ok(()), Err)
}

fn instrument_method(prefix: &str, krate: &Path, f: &mut ImplItemFn) -> syn::Result<()> {
    let notrace = take_attrs(&mut f.attrs, "notrace", krate);
    let traced = take_attrs(&mut f.attrs, "traced", krate);
    if let Some(attr) = notrace.first() {
        // Its `crate = ..` has nothing to name here, but must be well formed.
        args::notrace_from_attr(attr)?;
        if let Some(t) = traced.first() {
            return Err(syn::Error::new_spanned(
                t,
                "this method is both #[traced] and #[notrace]",
            ));
        }
        return Ok(());
    }
    if let Some(dup) = traced.get(1) {
        return Err(syn::Error::new_spanned(dup, "duplicate #[traced]"));
    }
    let opts = match traced.first() {
        Some(attr) => Options::from_attr(attr)?,
        // Only an explicit #[traced] on a const fn is an error; the block's
        // own #[traced] skips const fns (often constructors) silently.
        None if f.sig.constness.is_some() => return Ok(()),
        None => Options::default(),
    };
    reject_prefix(&opts)?;
    let krate = opts.krate.as_ref().unwrap_or(krate);
    let name = opts.name.clone().unwrap_or_else(|| {
        let method = f.sig.ident.unraw();
        LitStr::new(&format!("{prefix}::{method}"), f.sig.ident.span())
    });
    instrument(&f.sig, &mut f.block, &name, krate, &opts)
}

fn reject_prefix(opts: &Options) -> syn::Result<()> {
    match &opts.prefix {
        Some(p) => Err(syn::Error::new_spanned(
            p,
            "`prefix` applies to impl blocks: use `name = \"...\"` on a fn",
        )),
        None => Ok(()),
    }
}

/// Removes and returns the attributes `#[name]`, `#[fgtrace::name]` and
/// `#[<krate>::name]` (`#[fgt::notrace]` in a `#[traced(crate = fgt)]` block).
/// A leading `::` does not matter.
fn take_attrs(attrs: &mut Vec<Attribute>, name: &str, krate: &Path) -> Vec<Attribute> {
    let idents = |path: &Path| -> Vec<String> {
        path.segments.iter().map(|s| s.ident.to_string()).collect()
    };
    let mut in_krate = idents(krate);
    in_krate.push(name.to_string());
    let (taken, kept) = std::mem::take(attrs).into_iter().partition(|attr| {
        let segments = idents(attr.path());
        segments == [name] || segments == ["fgtrace", name] || segments == in_krate
    });
    *attrs = kept;
    taken
}

/// The `Type` of `Type::method`: the self type's last path segment without
/// generics. A blanket `impl<T> Trait for T` is named after the trait, since
/// `T` says nothing.
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

/// What a "not a fn" error points at: the keyword and name, not the whole
/// (possibly long) item.
fn item_head(item: &Item) -> TokenStream {
    fn head(kw: &dyn ToTokens, ident: &syn::Ident) -> TokenStream {
        quote!(#kw #ident)
    }
    match item {
        Item::Struct(i) => head(&i.struct_token, &i.ident),
        Item::Enum(i) => head(&i.enum_token, &i.ident),
        Item::Union(i) => head(&i.union_token, &i.ident),
        Item::Mod(i) => head(&i.mod_token, &i.ident),
        Item::Type(i) => head(&i.type_token, &i.ident),
        Item::Const(i) => head(&i.const_token, &i.ident),
        Item::Static(i) => head(&i.static_token, &i.ident),
        Item::TraitAlias(i) => head(&i.trait_token, &i.ident),
        Item::Macro(i) => i.mac.path.to_token_stream(),
        Item::ForeignMod(i) => i.abi.to_token_stream(),
        _ => item.to_token_stream(),
    }
}

/// Adds the probe to one fn body; `krate` is where fgtrace is (`::fgtrace`).
/// The first fn a rustc process instruments also gets the plan's
/// dependencies (see [`plan::first_expansion`]).
fn instrument(
    sig: &Signature,
    block: &mut Block,
    name: &LitStr,
    krate: &Path,
    opts: &Options,
) -> syn::Result<()> {
    if let Some(kw) = &sig.constness {
        return Err(syn::Error::new(kw.span, CONST_FN));
    }
    instrument_body(sig, block, name, krate, opts)?;
    let first = plan::first_expansion();
    if !first.is_empty() {
        let at = leading_items(block);
        block.stmts.insert(at, syn::parse2(first)?);
    }
    Ok(())
}

/// How many statements at the start of `block` are items (they run nothing:
/// what is inserted goes after them, so that clippy's
/// `items_after_statements` does not blame the user's code).
fn leading_items(block: &Block) -> usize {
    block
        .stmts
        .iter()
        .take_while(|s| matches!(s, Stmt::Item(_)))
        .count()
}

fn instrument_body(
    sig: &Signature,
    block: &mut Block,
    name: &LitStr,
    krate: &Path,
    opts: &Options,
) -> syn::Result<()> {
    if opts.has_values() {
        return instrument_values(sig, block, name, krate, opts);
    }
    let is_async = sig.asyncness.is_some();
    // `line!()` and `file!()` report where their call is when its span is
    // the user's own (a span of this macro's would give the attribute's
    // line), so the calls carry the fn name's span. That span also decides
    // how the path to them resolves: in a 2015 crate `::core` is looked up in
    // the crate's root, where `core` is only in `no_std` crates. So `core` is
    // named by a block-local `extern crate`, which every edition resolves;
    // the item itself is the macro's (lints on it are the macro's, not the user's).
    let here = sig.ident.span();
    let core = Ident::new("__fgtrace_core", Span::call_site());
    let core_here = Ident::new("__fgtrace_core", here);
    let line = quote_spanned!(here=> #core_here::line!());
    let file = quote_spanned!(here=> #core_here::file!());
    let site = quote! {{
        extern crate core as #core;
        static __FGTRACE_SITE: #krate::__private::Site = #krate::__private::Site::new(
            #name, ::core::module_path!(), #file, #line, #is_async,
        );
        &__FGTRACE_SITE
    }};
    if is_async {
        let mut inner = Block {
            brace_token: block.brace_token,
            stmts: std::mem::take(&mut block.stmts),
        };
        if let Some(pin) = pin_output_type(&sig.output) {
            inner.stmts.insert(0, pin);
        }
        // The user's `async` span makes the block's span run from `async fn`
        // to the body's end, so errors about "this function" point there.
        let async_move = quote_spanned!(sig.asyncness.span()=> async move);
        block.stmts = vec![Stmt::Expr(
            parse_quote!(#krate::__private::TracedFuture::new(#site, #async_move #inner).await),
            None,
        )];
    } else {
        let guard = syn::Ident::new("__fgtrace_guard", Span::mixed_site());
        let at = leading_items(block);
        let planned = plan::planned_modules(&name.value());
        let enter: Stmt = if planned.is_empty() {
            parse_quote!(let #guard = #krate::__private::enter(#site);)
        } else {
            planned_enter(&guard, krate, name, &file, &line, &planned)
        };
        block.stmts.insert(at, enter);
    }
    Ok(())
}

/// The entry of a fn the plan may name: which module the plan names it in is
/// decided at compile time against `module_path!()`; there, a count (or
/// nothing, on an `uncounted` line), and elsewhere (and on boards, whose
/// stream carries no counts) the probe.
///
/// ```text
/// let __fgtrace_guard = {
///     extern crate core as __fgtrace_core;
///     static __FGTRACE_SITE: Site = Site::new(..);
///     static __FGTRACE_COUNTED: Counted = Counted::new(&__FGTRACE_SITE);
///     const __FGTRACE_UNCOUNTED: bool = !cfg!(target_os = "none")
///         && planned(module_path!(), &["regex_automata::dfa", ..]);
///     const __FGTRACE_COUNT: bool = !cfg!(target_os = "none")
///         && planned(module_path!(), &["regex_automata::util::search", ..]);
///     if __FGTRACE_UNCOUNTED { None }
///     else if __FGTRACE_COUNT { count(&__FGTRACE_COUNTED); None }
///     else { Some(enter(&__FGTRACE_SITE)) }
/// };
/// ```
fn planned_enter(
    guard: &Ident,
    krate: &Path,
    name: &LitStr,
    file: &TokenStream,
    line: &TokenStream,
    planned: &plan::Planned,
) -> Stmt {
    let core = Ident::new("__fgtrace_core", Span::call_site());
    let (counted, uncounted) = (&planned.counted, &planned.uncounted);
    parse_quote! {
        let #guard = {
            extern crate core as #core;
            static __FGTRACE_SITE: #krate::__private::Site = #krate::__private::Site::new(
                #name, ::core::module_path!(), #file, #line, false,
            );
            static __FGTRACE_COUNTED: #krate::__private::Counted =
                #krate::__private::Counted::new(&__FGTRACE_SITE);
            const __FGTRACE_UNCOUNTED: bool = !#core::cfg!(target_os = "none")
                && #krate::__private::planned(::core::module_path!(), &[#(#uncounted),*]);
            const __FGTRACE_COUNT: bool = !#core::cfg!(target_os = "none")
                && #krate::__private::planned(::core::module_path!(), &[#(#counted),*]);
            if __FGTRACE_UNCOUNTED {
                #core::option::Option::None
            } else if __FGTRACE_COUNT {
                #krate::__private::count(&__FGTRACE_COUNTED);
                #core::option::Option::None
            } else {
                #core::option::Option::Some(#krate::__private::enter(&__FGTRACE_SITE))
            }
        };
    }
}

/// [`instrument`] for a fn whose calls record values (`values(..)`, `ret`).
///
/// The values are evaluated before entry (each at its expression's span, so
/// a type that cannot be recorded is reported there) and ride in the guard.
/// A sync fn:
///
/// ```text
/// let mut __fgtrace_guard = ::fgtrace::__private::enter_values(<site>, [value(&(expr)), ..]);
/// // with `ret`, the body runs in a closure so that its result can be seen:
/// let __fgtrace_ret: <output> = ::fgtrace::__private::call_once(move || <body>);
/// __fgtrace_guard.set_ret(<ret value of &__fgtrace_ret>);
/// __fgtrace_ret
/// ```
///
/// An `async fn`: `ValuesFuture::new(<site>, [..], async move { .. })`, with
/// `.with_ret(|r| ..)` for `ret`; the values are evaluated at the first poll
/// (where the async fn's body starts), the return value at completion.
fn instrument_values(
    sig: &Signature,
    block: &mut Block,
    name: &LitStr,
    krate: &Path,
    opts: &Options,
) -> syn::Result<()> {
    let is_async = sig.asyncness.is_some();
    let here = sig.ident.span();
    let core = Ident::new("__fgtrace_core", Span::call_site());
    let core_here = Ident::new("__fgtrace_core", here);
    let line = quote_spanned!(here=> #core_here::line!());
    let file = quote_spanned!(here=> #core_here::file!());
    let mut names: Vec<String> = opts
        .values
        .iter()
        .map(|(n, _)| n.unraw().to_string())
        .collect();
    let ret_ty = match opts.ret {
        None => None,
        Some(span) => {
            names.push("ret".into());
            match &sig.output {
                ReturnType::Default => {
                    return Err(syn::Error::new(
                        span,
                        "`ret` records the return value, and this fn returns `()`",
                    ))
                }
                ReturnType::Type(_, ty) => {
                    let mut probe = FindUnnameable(false);
                    probe.visit_type_mut(&mut (**ty).clone());
                    if probe.0 {
                        return Err(syn::Error::new_spanned(
                            ty,
                            "`ret` cannot record an `impl Trait` (or `!`) return value: \
                             record a named type",
                        ));
                    }
                    Some((**ty).clone())
                }
            }
        }
    };
    let site = quote! {{
        extern crate core as #core;
        static __FGTRACE_SITE: #krate::__private::Site = #krate::__private::Site::with_values(
            #name, ::core::module_path!(), #file, #line, #is_async, &[#(#names),*],
        );
        &__FGTRACE_SITE
    }};
    let mut values: Vec<TokenStream> = opts
        .values
        .iter()
        .map(|(_, e)| quote_spanned!(e.span()=> #krate::__private::value(&(#e))))
        .collect();
    if ret_ty.is_some() {
        values.push(quote!(#krate::__private::RawValue::ABSENT));
    }
    let ret_of = |r: &Ident, ty: &Type| -> TokenStream {
        let shape = quote_spanned!(ty.span()=> #krate::__private::shape::<#ty>(#r));
        // An inner `&'static str` (spelled so in the return type) is recorded
        // as a string; any other inner type is picked by type (`Inner`).
        let (ok_static, err_static) = static_str_args(ty);
        let inner = |x: &Ident, is_str: bool| {
            if is_str {
                quote!(#krate::__private::value(#x))
            } else {
                quote!((&&__FgtraceInner(#x)).inner())
            }
        };
        let (o, e) = (
            Ident::new("o", Span::call_site()),
            Ident::new("e", Span::call_site()),
        );
        let ok = inner(&o, ok_static);
        let err = inner(&e, err_static);
        quote! {{
            #[allow(unused_imports)]
            use #krate::__private::{InnerOther as _, InnerValue as _};
            use #krate::__private::{tag as __fgtrace_tag, Inner as __FgtraceInner, Shape as __FgtraceShape};
            match #shape {
                __FgtraceShape::Plain(v) => v,
                __FgtraceShape::Ok(#o) => #ok.in_variant(__fgtrace_tag::OK),
                __FgtraceShape::Err(#e) => #err.in_variant(__fgtrace_tag::ERR),
                __FgtraceShape::Some(#o) => #ok.in_variant(__fgtrace_tag::SOME),
                __FgtraceShape::None => #krate::__private::RawValue::ABSENT.in_variant(__fgtrace_tag::NONE),
            }
        }}
    };
    let r = Ident::new("__fgtrace_ret", Span::mixed_site());
    if is_async {
        let mut inner = Block {
            brace_token: block.brace_token,
            stmts: std::mem::take(&mut block.stmts),
        };
        if let Some(pin) = pin_output_type(&sig.output) {
            inner.stmts.insert(0, pin);
        }
        let async_move = quote_spanned!(sig.asyncness.span()=> async move);
        let with_ret = ret_ty.map(|ty| {
            let ret = ret_of(&r, &ty);
            quote!(.with_ret(|#r| #ret))
        });
        block.stmts = vec![Stmt::Expr(
            parse_quote!(#krate::__private::ValuesFuture::new(
                #site, [#(#values),*], #async_move #inner
            ) #with_ret .await),
            None,
        )];
        return Ok(());
    }
    let guard = Ident::new("__fgtrace_guard", Span::mixed_site());
    match ret_ty {
        None => {
            let at = block
                .stmts
                .iter()
                .take_while(|s| matches!(s, Stmt::Item(_)))
                .count();
            block.stmts.insert(
                at,
                parse_quote!(let #guard = #krate::__private::enter_values(#site, [#(#values),*]);),
            );
        }
        Some(ty) => {
            let body = Block {
                brace_token: block.brace_token,
                stmts: std::mem::take(&mut block.stmts),
            };
            let ret = ret_of(&r, &ty);
            block.stmts = parse_quote! {
                let mut #guard = #krate::__private::enter_values(#site, [#(#values),*]);
                let #r: #ty = #krate::__private::call_once(move || #body);
                #guard.set_ret({ let #r = &#r; #ret });
                #r
            };
        }
    }
    Ok(())
}

/// Whether a `Result<A, B>` / `Option<A>` return type spells its inner
/// types `&'static str`: (A is, B is).
fn static_str_args(ty: &Type) -> (bool, bool) {
    let Type::Path(p) = ty else {
        return (false, false);
    };
    let Some(last) = p.path.segments.last() else {
        return (false, false);
    };
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return (false, false);
    };
    if last.ident != "Result" && last.ident != "Option" {
        return (false, false);
    }
    let is_static_str = |a: Option<&syn::GenericArgument>| {
        let Some(syn::GenericArgument::Type(Type::Reference(r))) = a else {
            return false;
        };
        r.mutability.is_none()
            && r.lifetime.as_ref().is_some_and(|l| l.ident == "static")
            && matches!(&*r.elem, Type::Path(p) if p.qself.is_none() && p.path.is_ident("str"))
    };
    let mut it = args.args.iter();
    (is_static_str(it.next()), is_static_str(it.next()))
}

/// A never-taken `return` that fixes an async block's output type to the
/// fn's, so `?` and `return` inside it infer as they did in the `async fn`.
/// `None` when there is nothing to pin (no return type, or only `_`).
fn pin_output_type(output: &ReturnType) -> Option<Stmt> {
    let ReturnType::Type(_, ty) = output else {
        return None;
    };
    let mut ty = (**ty).clone();
    ErasedUnnameable.visit_type_mut(&mut ty);
    if matches!(ty, Type::Infer(_)) {
        return None;
    }
    let span = ty.span();
    Some(parse_quote_spanned! {span=>
        #[allow(
            unknown_lints,
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::let_with_type_underscore,
            clippy::needless_return,
            clippy::unreachable
        )]
        if false {
            let __fgtrace_output: #ty = loop {};
            return __fgtrace_output;
        }
    })
}

/// Replaces the parts of a return type a `let` cannot name: `impl Trait`
/// (opaque) and `!` (unstable outside return position) become `_`.
struct ErasedUnnameable;

impl VisitMut for ErasedUnnameable {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        match ty {
            Type::ImplTrait(_) | Type::Never(_) => *ty = parse_quote!(_),
            _ => syn::visit_mut::visit_type_mut(self, ty),
        }
    }
}

/// Finds what [`ErasedUnnameable`] would replace.
struct FindUnnameable(bool);

impl VisitMut for FindUnnameable {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        match ty {
            Type::ImplTrait(_) | Type::Never(_) => self.0 = true,
            _ => syn::visit_mut::visit_type_mut(self, ty),
        }
    }
}
