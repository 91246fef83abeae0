//! Expansion tests on token streams. Spans and the runtime are checked by the
//! trybuild cases and `tests/macro_mock.rs` of the root package.

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::visit_mut::VisitMut;
use syn::{Expr, ImplItem, Item, ItemFn, ItemImpl, Lit, Stmt};

use crate::expand::{notrace, traced};

/// The `(name, is_async)` of every `Site::new(..)` in an expansion.
fn sites(out: &TokenStream) -> Vec<(String, bool)> {
    struct Find(Vec<(String, bool)>);
    impl VisitMut for Find {
        fn visit_expr_call_mut(&mut self, call: &mut syn::ExprCall) {
            let is_site_new = matches!(&*call.func, Expr::Path(p)
                if p.path.segments.iter().map(|s| s.ident.to_string()).collect::<Vec<_>>()
                    == ["fgtrace", "__private", "Site", "new"]);
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
