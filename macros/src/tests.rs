//! Expansion tests on token streams. Spans and the runtime are checked by the
//! trybuild cases and `tests/macro_mock.rs` of the root package.

use std::collections::BTreeSet;

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::visit_mut::VisitMut;
use syn::{Expr, ImplItem, Item, ItemFn, ItemImpl, Lit, Stmt};

use crate::budget::budget;
use crate::expand::{notrace, traced};

/// The `(name, is_async)` of every `Site::new(..)` in an expansion, whatever
/// the crate path before `__private` (see [`runtime_paths`] for that).
fn sites(out: &TokenStream) -> Vec<(String, bool)> {
    struct Find(Vec<(String, bool)>);
    impl VisitMut for Find {
        fn visit_expr_call_mut(&mut self, call: &mut syn::ExprCall) {
            let is_site_new = matches!(&*call.func, Expr::Path(p)
                if p.path.segments.iter().map(|s| s.ident.to_string()).collect::<Vec<_>>()
                    .ends_with(&["__private".to_string(), "Site".to_string(), "new".to_string()]));
            if is_site_new {
                let lit = |i: usize| match &call.args[i] {
                    Expr::Lit(l) => l.lit.clone(),
                    other => panic!("not a literal: {}", other.to_token_stream()),
                };
                match (lit(0), lit(4)) {
                    (Lit::Str(name), Lit::Bool(is_async)) => {
                        self.0.push((name.value(), is_async.value))
                    }
                    _ => panic!("bad Site::new args"),
                }
            }
            syn::visit_mut::visit_expr_call_mut(self, call);
        }
    }
    let mut find = Find(Vec::new());
    match syn::parse2::<syn::File>(out.clone()) {
        Ok(mut file) => find.visit_file_mut(&mut file),
        // `default fn` is only an impl item.
        Err(_) => find.visit_impl_item_mut(&mut syn::parse2(out.clone()).expect("parses")),
    }
    find.0
}

/// Every path of an expansion into fgtrace's runtime, split at `module`
/// (`__private` for `#[traced]`, `testing` for `#[budget]`):
/// `{("::fgtrace", "__private::enter"), ..}`. Only the user's own paths have
/// no such segment.
fn runtime_paths(out: &TokenStream, module: &str) -> BTreeSet<(String, String)> {
    struct Find<'m>(&'m str, BTreeSet<(String, String)>);
    impl VisitMut for Find<'_> {
        fn visit_path_mut(&mut self, path: &mut syn::Path) {
            let idents: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            if let Some(at) = idents.iter().position(|i| i == self.0) {
                let colon = if path.leading_colon.is_some() {
                    "::"
                } else {
                    ""
                };
                let krate = format!("{colon}{}", idents[..at].join("::"));
                self.1.insert((krate, idents[at..].join("::")));
            }
            syn::visit_mut::visit_path_mut(self, path);
        }
    }
    let mut find = Find(module, BTreeSet::new());
    let mut file: syn::File = syn::parse2(out.clone()).expect("parses");
    find.visit_file_mut(&mut file);
    find.1
}

/// The crate paths `#[traced]` called its runtime by.
fn crates(out: &TokenStream) -> BTreeSet<String> {
    runtime_paths(out, "__private")
        .into_iter()
        .map(|(krate, _)| krate)
        .collect()
}

fn set<const N: usize>(items: [&str; N]) -> BTreeSet<String> {
    items.iter().map(ToString::to_string).collect()
}

fn names(out: &TokenStream) -> Vec<String> {
    sites(out).into_iter().map(|(name, _)| name).collect()
}

fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    traced(attr, item)
}

/// The `compile_error!` message of an expansion, which must also still
/// contain the original item so that no follow-up errors appear.
fn error(attr: TokenStream, item: TokenStream) -> String {
    let out = expand(attr, item.clone());
    let file: syn::File = syn::parse2(out).expect("error expansion parses");
    let (first, rest) = file.items.split_first().expect("not empty");
    let Item::Macro(mac) = first else {
        panic!("no compile_error! first: {}", first.to_token_stream())
    };
    assert!(s(&mac.mac.path).ends_with("compile_error"));
    let kept: TokenStream = rest.iter().map(ToTokens::to_token_stream).collect();
    assert_eq!(kept.to_string(), item.to_string(), "original item kept");
    syn::parse2::<syn::LitStr>(mac.mac.tokens.clone())
        .expect("message")
        .value()
}

fn s(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string()
}

#[test]
fn sync_fn_keeps_signature_and_statements_after_the_guard() {
    let item: ItemFn = syn::parse_quote! {
        /// Doc.
        #[inline]
        pub(crate) unsafe extern "C" fn f<'a, T: Clone>(x: &'a T) -> T where T: Default {
            let y = x.clone();
            if true { return y; }
            y
        }
    };
    let out = expand(quote!(), item.to_token_stream());
    let got: ItemFn = syn::parse2(out.clone()).unwrap();
    assert_eq!(s(&got.sig), s(&item.sig));
    assert_eq!(got.attrs.len(), 2);
    assert_eq!(s(&got.vis), s(&item.vis));
    assert_eq!(got.block.stmts.len(), item.block.stmts.len() + 1);
    assert!(matches!(&got.block.stmts[0], Stmt::Local(l) if s(&l.pat) == "__fgtrace_guard"));
    for (g, i) in got.block.stmts[1..].iter().zip(&item.block.stmts) {
        assert_eq!(s(g), s(i));
    }
    assert_eq!(sites(&out), [("f".to_string(), false)]);
}

#[test]
fn the_guard_goes_after_leading_items() {
    let out = expand(
        quote!(),
        quote! {
            fn f() -> u32 {
                use std::convert::identity;
                const K: u32 = 1;
                identity(K)
            }
        },
    );
    let got: ItemFn = syn::parse2(out).unwrap();
    assert!(matches!(got.block.stmts[0], Stmt::Item(_)));
    assert!(matches!(got.block.stmts[1], Stmt::Item(_)));
    assert!(matches!(&got.block.stmts[2], Stmt::Local(l) if s(&l.pat) == "__fgtrace_guard"));
}

#[test]
fn async_fn_awaits_a_traced_future_of_its_body() {
    let item: ItemFn = syn::parse_quote! {
        pub async fn load(&self, key: &str) -> Result<u32, Error> {
            let v = self.get(key).await?;
            Ok(v)
        }
    };
    let out = expand(quote!(), item.to_token_stream());
    let got: ItemFn = syn::parse2(out.clone()).unwrap();
    assert_eq!(s(&got.sig), s(&item.sig));
    assert_eq!(sites(&out), [("load".to_string(), true)]);
    let [Stmt::Expr(Expr::Await(awaited), None)] = &got.block.stmts[..] else {
        panic!("body is not one `.await`: {}", s(&got.block))
    };
    let Expr::Call(call) = &*awaited.base else {
        panic!("not a call")
    };
    assert!(s(&call.func).ends_with("TracedFuture :: new"));
    let Expr::Async(body) = &call.args[1] else {
        panic!("second arg is not an async block")
    };
    assert!(body.capture.is_some(), "async move");
    // A never-taken return pins the block's output to the fn's.
    let pin = s(&body.block.stmts[0]);
    assert!(pin.contains("if false"), "{pin}");
    assert!(
        pin.contains("let __fgtrace_output : Result < u32 , Error > = loop { }"),
        "{pin}"
    );
    assert_eq!(s(&body.block.stmts[1]), s(&item.block.stmts[0]));
    assert_eq!(s(&body.block.stmts[2]), s(&item.block.stmts[1]));
}

#[test]
fn async_output_pin_erases_what_a_let_cannot_name() {
    let pin_of = |item: TokenStream| {
        let got: ItemFn = syn::parse2(expand(quote!(), item)).unwrap();
        let Stmt::Expr(Expr::Await(a), None) = &got.block.stmts[0] else {
            panic!()
        };
        let Expr::Call(call) = &*a.base else { panic!() };
        let Expr::Async(body) = &call.args[1] else {
            panic!()
        };
        body.block
            .stmts
            .first()
            .map(s)
            .filter(|s| s.contains("__fgtrace_output"))
    };
    let pin = pin_of(quote!(
        async fn f() -> Result<impl Display, E> {
            todo!()
        }
    ))
    .unwrap();
    assert!(pin.contains(": Result < _ , E >"), "{pin}");
    assert_eq!(
        pin_of(quote!(
            async fn f() -> impl Display {
                1
            }
        )),
        None
    );
    assert_eq!(
        pin_of(quote!(
            async fn f() {
                g().await
            }
        )),
        None
    );
    assert_eq!(
        pin_of(quote!(
            async fn f() -> ! {
                loop {}
            }
        )),
        None
    );
}

#[test]
fn impl_block_names_methods_type_colon_colon_method() {
    let item = quote! {
        impl<'s, T: Clone> crate::parse::Parser<'s, T> where T: Default {
            const LIMIT: usize = 8;
            pub fn parse_expr(&mut self) -> Option<T> { None }
            #[notrace]
            fn skipped(&self) -> u32 { 1 }
            #[fgtrace::notrace]
            fn skipped_too(&self) {}
            #[traced(name = "custom")]
            fn renamed(self: Box<Self>) {}
            #[fgtrace::traced]
            async fn r#async(&self) {}
            pub const fn new() -> u32 { 0 }
            type_macro!();
        }
    };
    let out = expand(quote!(), item);
    assert_eq!(
        names(&out),
        ["Parser::parse_expr", "custom", "Parser::async"]
    );
    let got: ItemImpl = syn::parse2(out).unwrap();
    for it in &got.items {
        if let ImplItem::Fn(f) = it {
            assert!(f.attrs.is_empty(), "attributes removed: {}", s(f));
            if f.sig.ident == "skipped" {
                assert_eq!(s(&f.block), s(&quote!({ 1 })));
            }
            if f.sig.ident == "new" {
                assert_eq!(s(&f.block), s(&quote!({ 0 })));
            }
        }
    }
}

#[test]
fn an_impl_blocks_untraceable_items_are_left_as_they_are_without_error() {
    // What the block's attribute cannot or must not trace is kept token for
    // token, and the rest of the block is still traced: a `const fn` (of
    // any qualifiers), a `#[notrace]` fn, a fn without a body (rustc, not
    // the attribute, reports that one), a macro call, consts and types.
    let untraced = [
        quote!(
            pub const fn new() -> Self {
                S
            }
        ),
        quote!(
            const unsafe fn raw() -> u8 {
                0
            }
        ),
        quote!(
            pub(crate) const extern "C" fn cb() {}
        ),
        quote!(
            fn declared(&self);
        ),
        quote!(items!();),
        quote!(
            const K: u8 = 1;
        ),
        quote!(
            type T = u8;
        ),
    ];
    let item = quote! {
        impl<T> Tr<T> for S where T: Copy {
            #(#untraced)*
            #[notrace]
            fn opted_out(&self) {}
            unsafe extern "C" fn traced_ffi(&self) {}
            fn traced(&self) {}
        }
    };
    let out = expand(quote!(), item);
    assert_eq!(names(&out), ["S::traced_ffi", "S::traced"]);
    let got: ItemImpl = syn::parse2(out).expect("no compile_error!, one impl block");
    for (kept, want) in got.items.iter().zip(&untraced) {
        assert_eq!(s(kept), want.to_string());
    }
    let ImplItem::Fn(opted_out) = &got.items[untraced.len()] else {
        panic!()
    };
    assert_eq!(
        s(opted_out),
        s(&quote!(
            fn opted_out(&self) {}
        ))
    );
}

#[test]
fn the_site_names_core_through_a_block_local_extern_crate() {
    // `line!()`/`file!()` carry the user's span, so their path resolves by
    // the user's edition: `::core` would fail in a 2015 crate with `std`
    // (tests/editions.rs builds one).
    let out = expand(
        quote!(),
        quote!(
            fn f() {}
        ),
    );
    let f: ItemFn = syn::parse2(out).unwrap();
    let text = s(&f.block);
    assert!(
        text.contains("extern crate core as __fgtrace_core ;"),
        "{text}"
    );
    assert!(text.contains("__fgtrace_core :: file ! ()"), "{text}");
    assert!(text.contains("__fgtrace_core :: line ! ()"), "{text}");
    assert!(!text.contains(":: core :: line"), "{text}");
}

#[test]
fn impl_block_names_for_trait_impls_references_and_blankets() {
    let first = |attr: TokenStream, item: TokenStream| names(&expand(attr, item)).remove(0);
    let fmt = quote!(
        fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
            Ok(())
        }
    );
    assert_eq!(
        first(quote!(), quote!(impl fmt::Display for Point { #fmt })),
        "Point::fmt"
    );
    assert_eq!(
        first(
            quote!(),
            quote!(impl<'a> Display for &'a mut Point<'a> { #fmt })
        ),
        "Point::fmt"
    );
    assert_eq!(
        first(
            quote!(),
            quote!(
                impl<T: Debug> Show for T {
                    fn show(&self) {}
                }
            )
        ),
        "Show::show"
    );
    assert_eq!(
        first(quote!(prefix = "P"), quote!(impl Point { fn m() {} })),
        "P::m"
    );
    assert_eq!(first(quote!(), quote!(impl [u8] { fn m() {} })), "[u8]::m");
}

#[test]
fn a_single_method_gets_its_bare_name_unless_renamed() {
    let method = quote!(
        pub fn parse_expr(&mut self) -> u32 {
            1
        }
    );
    assert_eq!(names(&expand(quote!(), method.clone())), ["parse_expr"]);
    assert_eq!(
        names(&expand(quote!(name = "Parser::parse_expr"), method)),
        ["Parser::parse_expr"]
    );
    assert_eq!(
        names(&expand(
            quote!(),
            quote!(
                fn r#type() {}
            )
        )),
        ["type"]
    );
    // A specializing `default fn` is not an `Item`; it is still a method.
    assert_eq!(
        names(&expand(quote!(), quote!(default fn spec(&self) {}))),
        ["spec"]
    );
    // A trait method with a default body.
    assert_eq!(
        names(&expand(
            quote!(),
            quote!(
                fn provided(&self) -> u8 {
                    0
                }
            )
        )),
        ["provided"]
    );
}

#[test]
fn rejects_what_it_cannot_instrument() {
    let e = |attr, item| error(attr, item);
    assert!(e(
        quote!(),
        quote!(
            const fn f() {}
        )
    )
    .contains("`const fn`"));
    assert!(e(
        quote!(),
        quote!(
            struct S;
        )
    )
    .contains("applies to fns and impl blocks"));
    assert!(e(
        quote!(),
        quote!(
            enum E {
                A,
            }
        )
    )
    .contains("applies to fns"));
    assert!(e(
        quote!(),
        quote!(
            mod m {}
        )
    )
    .contains("applies to fns"));
    assert!(e(
        quote!(),
        quote!(
            trait T {
                fn f();
            }
        )
    )
    .contains("trait definition"));
    assert!(e(
        quote!(),
        quote!(
            fn f(&self) -> u8;
        )
    )
    .contains("needs a fn body"));
    let impl_const = quote!(impl S { #[traced] const fn new() -> S { S } });
    assert!(e(quote!(), impl_const).contains("`const fn`"));
}

#[test]
fn rejects_bad_options() {
    let f = || {
        quote!(
            fn f() {}
        )
    };
    let e = |attr, item| error(attr, item);
    assert!(e(quote!(nmae = "x"), f()).contains("unknown #[traced] option `nmae`"));
    assert!(e(quote!(name = 42), f()).contains("`name` expects a non-empty string literal"));
    assert!(e(quote!(name = ""), f()).contains("non-empty string literal"));
    assert!(e(quote!(name = x), f()).contains("string literal"));
    assert!(e(quote!(name = "a", name = "b"), f()).contains("duplicate"));
    assert!(e(quote!(prefix = "P"), f()).contains("`prefix` applies to impl blocks"));
    let imp = quote!(impl S { fn f() {} });
    assert!(e(quote!(name = "x"), imp).contains("`name` names a single fn"));
    let both = quote!(impl S { #[traced] #[notrace] fn f() {} });
    assert!(e(quote!(), both).contains("both #[traced] and #[notrace]"));
    let inner = quote!(impl S { #[traced(prefix = "P")] fn f() {} });
    assert!(e(quote!(), inner).contains("`prefix` applies to impl blocks"));
}

#[test]
fn notrace_alone_returns_the_item_unchanged() {
    let item = quote!(
        fn f() -> u8 {
            1
        }
    );
    assert_eq!(
        notrace(quote!(), item.clone()).to_string(),
        item.to_string()
    );
    assert!(notrace(quote!(x), item)
        .to_string()
        .contains("compile_error"));
}

#[test]
fn crate_path_replaces_fgtrace_for_every_runtime_item() {
    let sync = quote!(
        fn f() -> u8 {
            1
        }
    );
    let async_fn = quote!(
        async fn g() -> u8 {
            1
        }
    );
    let runtime = |attr: TokenStream, item: TokenStream| {
        runtime_paths(&expand(attr, item), "__private")
            .into_iter()
            .map(|(krate, item)| format!("{krate}::{item}"))
            .collect::<BTreeSet<_>>()
    };
    // The default, and the same items under every other path.
    assert_eq!(
        runtime(quote!(), sync.clone()),
        set([
            "::fgtrace::__private::Site",
            "::fgtrace::__private::Site::new",
            "::fgtrace::__private::enter",
        ])
    );
    assert_eq!(
        runtime(quote!(crate = fgt), sync.clone()),
        set([
            "fgt::__private::Site",
            "fgt::__private::Site::new",
            "fgt::__private::enter",
        ])
    );
    assert_eq!(
        runtime(quote!(crate = ::my_facade::fgtrace), async_fn.clone()),
        set([
            "::my_facade::fgtrace::__private::Site",
            "::my_facade::fgtrace::__private::Site::new",
            "::my_facade::fgtrace::__private::TracedFuture::new",
        ])
    );
    assert_eq!(
        crates(&expand(quote!(crate = crate::reexports::fgtrace), async_fn)),
        set(["crate::reexports::fgtrace"])
    );
    // `crate` is a keyword; as a path it is this crate (`extern crate self as ..`).
    assert_eq!(crates(&expand(quote!(crate = crate), sync)), set(["crate"]));
}

#[test]
fn crate_path_combines_with_name_in_any_order() {
    let f = || {
        quote!(
            fn f() {}
        )
    };
    for attr in [
        quote!(name = "parse", crate = fgt),
        quote!(crate = fgt, name = "parse"),
    ] {
        let out = expand(attr.clone(), f());
        assert_eq!(names(&out), ["parse"], "{attr}");
        assert_eq!(crates(&out), set(["fgt"]), "{attr}");
    }
    for attr in [
        quote!(prefix = "P", crate = fgt),
        quote!(crate = fgt, prefix = "P"),
    ] {
        let out = expand(attr.clone(), quote!(impl S { fn m(&self) {} }));
        assert_eq!(names(&out), ["P::m"], "{attr}");
        assert_eq!(crates(&out), set(["fgt"]), "{attr}");
    }
}

#[test]
fn impl_block_crate_path_applies_to_every_method_and_finds_its_notrace() {
    let item = quote! {
        impl Parser {
            fn plain(&self) {}
            #[fgt::notrace]
            fn skipped_by_crate_path(&self) -> u8 { 1 }
            #[notrace(crate = fgt)]
            fn skipped_with_option(&self) {}
            #[fgt::notrace(crate = fgt)]
            fn skipped_both(&self) {}
            #[fgtrace::notrace]
            fn skipped_by_fgtrace(&self) {}
            #[notrace]
            fn skipped_bare(&self) {}
            #[fgt::traced(name = "custom")]
            fn renamed(&self) {}
            async fn load(&self) {}
        }
    };
    let out = expand(quote!(crate = fgt), item);
    assert_eq!(
        sites(&out),
        [
            ("Parser::plain".to_string(), false),
            ("custom".to_string(), false),
            ("Parser::load".to_string(), true),
        ]
    );
    assert_eq!(crates(&out), set(["fgt"]));
    let got: ItemImpl = syn::parse2(out).unwrap();
    for it in &got.items {
        let ImplItem::Fn(f) = it else { continue };
        assert!(f.attrs.is_empty(), "attributes removed: {}", s(f));
        if f.sig.ident == "skipped_by_crate_path" {
            assert_eq!(s(&f.block), s(&quote!({ 1 })));
        }
    }

    // A multi-segment path: its `notrace` is that path plus `notrace`.
    let facade = quote! {
        impl Parser {
            #[my_facade::fgtrace::notrace]
            fn skipped(&self) {}
            #[::my_facade::fgtrace::notrace]
            fn skipped_too(&self) {}
            fn kept(&self) {}
        }
    };
    let out = expand(quote!(crate = ::my_facade::fgtrace), facade);
    assert_eq!(names(&out), ["Parser::kept"]);
    assert_eq!(crates(&out), set(["::my_facade::fgtrace"]));
}

#[test]
fn a_method_crate_path_overrides_the_blocks() {
    let item = quote! {
        impl S {
            #[traced(crate = other)]
            fn own(&self) {}
            fn inherited(&self) {}
        }
    };
    let out = expand(quote!(crate = fgt), item);
    assert_eq!(names(&out), ["S::own", "S::inherited"]);
    assert_eq!(crates(&out), set(["other", "fgt"]));
    let got: ItemImpl = syn::parse2(out).unwrap();
    let ImplItem::Fn(own) = &got.items[0] else {
        panic!()
    };
    assert_eq!(crates(&own.to_token_stream()), set(["other"]));
}

#[test]
fn other_crates_attributes_are_left_alone() {
    // Without `crate = fgt` the block cannot know `fgt::notrace` is its own;
    // `other::notrace` must not be taken for fgtrace's either.
    let item = quote! {
        impl S {
            #[other::notrace]
            fn m(&self) {}
        }
    };
    let out = expand(quote!(crate = fgt), item);
    assert_eq!(names(&out), ["S::m"]);
    let got: ItemImpl = syn::parse2(out).unwrap();
    let ImplItem::Fn(m) = &got.items[0] else {
        panic!()
    };
    assert_eq!(s(&m.attrs[0]), "# [other :: notrace]");
}

#[test]
fn rejects_bad_crate_paths() {
    let f = || {
        quote!(
            fn f() {}
        )
    };
    let e = |attr, item| error(attr, item);
    for bad in [
        quote!(crate = 5),
        quote!(crate = "fgt"),
        quote!(crate = fgt::<u8>),
        quote!(crate = <T as Trait>::fgtrace),
        quote!(crate = a + b),
    ] {
        let msg = e(bad.clone(), f());
        assert!(
            msg.starts_with("`crate` expects a path to the fgtrace crate, e.g. `crate = fgt`"),
            "{bad}: {msg}"
        );
    }
    assert_eq!(
        e(quote!(crate = fgt, crate = fgt), f()),
        "duplicate #[traced] option `crate`"
    );
    assert_eq!(
        e(quote!(crate = fgt, name = "x", crate = other), f()),
        "duplicate #[traced] option `crate`"
    );
    assert!(e(quote!(krate = fgt), f()).contains("`values(..)`, `ret` or `crate = path`"));
    let imp = quote!(impl S { fn m(&self) {} });
    assert!(e(quote!(crate = 5), imp).contains("`crate` expects a path"));
    let inner = quote!(impl S { #[traced(crate = 5)] fn m(&self) {} });
    assert!(e(quote!(crate = fgt), inner).contains("`crate` expects a path"));
}

#[test]
fn notrace_takes_only_a_crate_path() {
    let item = quote!(
        fn f() -> u8 {
            1
        }
    );
    for ok in [quote!(crate = fgt), quote!(crate = ::my_facade::fgtrace)] {
        assert_eq!(
            notrace(ok, item.clone()).to_string(),
            item.to_string(),
            "unchanged"
        );
    }
    let message = |attr: TokenStream| {
        let out = notrace(attr, item.clone());
        let file: syn::File = syn::parse2(out).unwrap();
        let [Item::Macro(mac), Item::Fn(kept)] = &file.items[..] else {
            panic!("not a compile_error! and the item: {}", s(&file))
        };
        assert_eq!(s(kept), item.to_string(), "original item kept");
        syn::parse2::<syn::LitStr>(mac.mac.tokens.clone())
            .unwrap()
            .value()
    };
    assert!(message(quote!(crate = 5)).starts_with("`crate` expects a path"));
    assert_eq!(
        message(quote!(crate = a, crate = b)),
        "duplicate #[notrace] option `crate`"
    );
    assert_eq!(
        message(quote!(name = "x")),
        "unknown #[notrace] option `name`: the only option is `crate = path`"
    );
    // The same checks inside a traced impl block.
    for (attr, msg) in [
        (quote!(#[notrace(crate = 5)]), "`crate` expects a path"),
        (
            quote!(#[fgt::notrace(skip)]),
            "unknown #[notrace] option `skip`",
        ),
        (
            quote!(#[notrace = "x"]),
            "expected `#[notrace]` or `#[notrace(crate = path)]`",
        ),
    ] {
        let imp = quote!(impl S { #attr fn m(&self) {} });
        let msg_got = error(quote!(crate = fgt), imp);
        assert!(msg_got.starts_with(msg), "{attr}: {msg_got}");
    }
}

#[test]
fn budget_crate_path_replaces_fgtrace_for_every_runtime_item() {
    let test_fn = || {
        quote! {
            #[test]
            fn t() { work(); }
        }
    };
    let runtime = |attr: TokenStream, item: TokenStream| {
        runtime_paths(&budget(attr, item), "testing")
            .into_iter()
            .map(|(krate, item)| format!("{krate}::{item}"))
            .collect::<BTreeSet<_>>()
    };
    let items = |krate: &str| {
        [
            "testing::Counters::Auto",
            "testing::Stat::Median",
            "testing::__budget::Limit::Calls",
            "testing::__budget::Limit::Instructions",
            "testing::__budget::Spec",
        ]
        .map(|item| format!("{krate}::{item}"))
        .into_iter()
        .collect::<BTreeSet<_>>()
    };
    let limits = quote!(work(calls = 1, instructions = 10));
    assert_eq!(runtime(limits.clone(), test_fn()), items("::fgtrace"));
    assert_eq!(
        runtime(quote!(crate = fgt, #limits), test_fn()),
        items("fgt")
    );
    assert_eq!(
        runtime(quote!(#limits, crate = ::my_facade::fgtrace), test_fn()),
        items("::my_facade::fgtrace")
    );
    // Given in a stacked `#[budget]`, it applies to the merged one.
    let stacked = quote! {
        #[fgt::testing::budget(crate = fgt, work(instructions = 10))]
        #[test]
        fn t() { work(); }
    };
    assert_eq!(runtime(quote!(work(calls = 1)), stacked), items("fgt"));
}

#[test]
fn budget_rejects_bad_crate_paths() {
    let message = |attr: TokenStream, item: TokenStream| {
        let out = budget(attr, item).to_string();
        assert!(out.contains("compile_error"), "{out}");
        out
    };
    let f = || {
        quote!(
            fn t() {}
        )
    };
    for bad in [
        quote!(crate = 5, f(calls = 1)),
        quote!(crate = "fgt", f(calls = 1)),
        quote!(crate = fgt::<u8>, f(calls = 1)),
    ] {
        let out = message(bad.clone(), f());
        assert!(
            out.contains("`crate` expects a path to the fgtrace crate"),
            "{bad}: {out}"
        );
    }
    let out = message(quote!(crate = fgt, crate = fgt, f(calls = 1)), f());
    assert!(out.contains("duplicate #[budget] option `crate`"), "{out}");
    let stacked = quote! {
        #[budget(crate = other, f(calls = 1))]
        fn t() {}
    };
    let out = message(quote!(crate = fgt, f(calls = 1)), stacked);
    assert!(out.contains("duplicate #[budget] option `crate`"), "{out}");
    let out = message(quote!(krate = fgt, f(calls = 1)), f());
    assert!(
        out.contains("options are `runs`, `warmup`, `stat`, `counters`, `crate`"),
        "{out}"
    );
}
