//! What `#[traced]` code does at run time, against a mock of
//! `fgtrace::__private` that logs every probe: this checks the expansion
//! (guard placement, names, sites, async wrapping) independently of the real
//! recorder.

// The expansion calls `::fgtrace::__private::..`; make that this crate.
extern crate self as fgtrace;

use fgtrace_macros::{notrace, traced};
use std::fmt;

/// A stand-in for the runtime: same API, but it logs into a thread-local.
pub mod __private {
    use std::cell::RefCell;
    use std::future::Future;
    use std::marker::PhantomData;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    pub struct Site {
        pub name: &'static str,
        pub module_path: &'static str,
        pub file: &'static str,
        pub line: u32,
        pub is_async: bool,
    }

    impl Site {
        pub const fn new(
            name: &'static str,
            module_path: &'static str,
            file: &'static str,
            line: u32,
            is_async: bool,
        ) -> Site {
            Site {
                name,
                module_path,
                file,
                line,
                is_async,
            }
        }
    }

    thread_local! {
        static LOG: RefCell<Vec<(&'static str, &'static Site)>> = const { RefCell::new(Vec::new()) };
    }

    fn log(what: &'static str, site: &'static Site) {
        LOG.with(|l| l.borrow_mut().push((what, site)));
    }

    /// Takes the log: `"> name"` on entry, `"< name"` on exit, `"poll name"`.
    pub fn take_log() -> Vec<String> {
        LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
            .into_iter()
            .map(|(what, site)| format!("{what} {}", site.name))
            .collect()
    }

    /// Takes the sites entered, in order.
    pub fn take_sites() -> Vec<&'static Site> {
        LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
            .into_iter()
            .filter(|(what, _)| *what == ">")
            .map(|(_, site)| site)
            .collect()
    }

    pub struct Guard {
        site: &'static Site,
        _not_send: PhantomData<*const ()>,
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            log("<", self.site);
        }
    }

    pub fn enter(site: &'static Site) -> Guard {
        log(">", site);
        Guard {
            site,
            _not_send: PhantomData,
        }
    }

    pub struct TracedFuture<F> {
        site: &'static Site,
        inner: Pin<Box<F>>,
    }

    impl<F> TracedFuture<F> {
        pub fn new(site: &'static Site, inner: F) -> Self {
            TracedFuture {
                site,
                inner: Box::pin(inner),
            }
        }
    }

    impl<F: Future> Future for TracedFuture<F> {
        type Output = F::Output;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            let this = self.get_mut();
            log("poll", this.site);
            let _g = enter(this.site);
            this.inner.as_mut().poll(cx)
        }
    }
}

use __private::{take_log, take_sites};

#[traced]
fn add(a: u32, b: u32) -> u32 {
    a + b
}

#[traced]
fn outer() -> u32 {
    add(1, 2) * 2
}

#[test]
fn a_call_is_an_entry_and_an_exit_around_the_body() {
    take_log();
    assert_eq!(outer(), 6);
    assert_eq!(take_log(), ["> outer", "> add", "< add", "< outer"]);
}

#[traced]
fn parse_double(s: &str) -> Result<u32, std::num::ParseIntError> {
    let n: u32 = s.parse()?;
    if n == 0 {
        return Ok(0);
    }
    Ok(n * 2)
}

#[test]
fn question_mark_and_return_pass_through_the_exit() {
    take_log();
    assert!(parse_double("x").is_err());
    assert_eq!(parse_double("0"), Ok(0));
    assert_eq!(parse_double("4"), Ok(8));
    let exits = ["> parse_double", "< parse_double"];
    assert_eq!(take_log(), [exits, exits, exits].concat());
}

#[traced]
fn explode() {
    panic!("boom");
}

#[test]
fn a_panic_records_the_exit_while_unwinding() {
    take_log();
    assert!(std::panic::catch_unwind(explode).is_err());
    assert_eq!(take_log(), ["> explode", "< explode"]);
}

/// Doc comments and other attributes may sit between `#[traced]` and the fn.
#[traced]
#[inline(never)]
#[rustfmt::skip]
fn located() -> u32 { line!() }

#[test]
fn the_site_has_the_fn_line_file_and_module() {
    take_log();
    let line = located();
    let [site] = take_sites()[..] else { panic!() };
    assert_eq!(site.name, "located");
    assert_eq!(site.line, line);
    assert_eq!(site.file, file!());
    assert_eq!(site.module_path, module_path!());
    assert!(!site.is_async);
}

#[traced]
fn same<T>(t: T) -> T {
    t
}

#[test]
fn a_generic_fn_has_one_site_for_all_instantiations() {
    take_log();
    assert_eq!(same(1u8), 1);
    assert_eq!(same("a"), "a");
    let sites = take_sites();
    assert!(std::ptr::eq(sites[0], sites[1]));
}

#[traced(name = "custom name")]
fn renamed() {}

#[notrace]
fn untouched() {}

#[test]
fn name_option_and_a_lone_notrace() {
    take_log();
    renamed();
    untouched();
    assert_eq!(take_log(), ["> custom name", "< custom name"]);
}

struct Parser {
    depth: u32,
}

#[traced]
impl Parser {
    const fn new() -> Parser {
        Parser { depth: 0 }
    }

    fn parse_expr(&mut self) -> u32 {
        self.depth += 1;
        self.helper()
    }

    #[notrace]
    fn helper(&self) -> u32 {
        self.depth
    }

    #[traced(name = "Parser::finish!")]
    #[allow(clippy::boxed_local)] // the `Box<Self>` receiver is what is tested
    fn finish(self: Box<Self>) -> u32 {
        self.depth
    }
}

// Still a `const fn`: the block's #[traced] leaves it alone.
const PARSER: Parser = Parser::new();

#[test]
fn impl_block_methods_are_type_colon_colon_method() {
    take_log();
    let mut p = PARSER;
    assert_eq!(p.parse_expr(), 1);
    assert_eq!(Box::new(p).finish(), 1);
    assert_eq!(
        take_log(),
        [
            "> Parser::parse_expr",
            "< Parser::parse_expr",
            "> Parser::finish!",
            "< Parser::finish!"
        ]
    );
}

struct Point(i32, i32);

#[traced]
impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}

trait Describe {
    fn describe(&self) -> String;
}

#[traced]
impl<T: fmt::Debug> Describe for T {
    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

#[test]
fn trait_impls_and_blanket_impls() {
    take_log();
    assert_eq!(Point(1, 2).to_string(), "(1, 2)");
    assert_eq!(3.describe(), "3");
    assert_eq!(
        take_log(),
        [
            "> Point::fmt",
            "< Point::fmt",
            "> Describe::describe",
            "< Describe::describe"
        ]
    );
}

/// A sync fn returning a future is a sync call: it ends when the future is made.
#[traced]
fn make_future() -> impl std::future::Future<Output = u32> {
    async { 7 }
}

#[traced]
async fn half(n: u32) -> Result<u32, String> {
    tokio::task::yield_now().await;
    if n % 2 == 1 {
        return Err(format!("{n} is odd"));
    }
    let n = n.checked_div(2).ok_or("unreachable")?;
    Ok(n)
}

#[traced]
async fn quarter(n: u32) -> Result<u32, String> {
    let h = half(n).await?;
    half(h).await
}

#[tokio::test]
async fn an_async_fn_is_entered_on_each_poll() {
    take_log();
    assert_eq!(half(4).await, Ok(2));
    // Polled twice: `yield_now` returns `Pending` once.
    assert_eq!(
        take_log(),
        [
            "poll half",
            "> half",
            "< half",
            "poll half",
            "> half",
            "< half"
        ]
    );
    assert_eq!(half(3).await, Err("3 is odd".to_string()));
    let sites = take_sites();
    assert!(sites.iter().all(|s| s.name == "half" && s.is_async));

    assert_eq!(quarter(8).await, Ok(2));
    assert_eq!(quarter(6).await, Err("3 is odd".to_string()));
    let log = take_log();
    assert_eq!(log[..3], ["poll quarter", "> quarter", "poll half"]);

    assert_eq!(make_future().await, 7);
    assert_eq!(take_log(), ["> make_future", "< make_future"]);
}

struct Store {
    items: Vec<u32>,
}

#[traced]
impl Store {
    async fn get(&self, i: usize) -> Option<&u32> {
        tokio::task::yield_now().await;
        self.items.get(i)
    }

    async fn push(&mut self, v: u32) -> &mut Self {
        self.items.push(v);
        self
    }

    async fn into_items(self) -> Vec<u32> {
        self.items
    }
}

#[tokio::test]
async fn async_methods_borrow_and_consume_self() {
    let mut s = Store { items: vec![] };
    s.push(1).await.push(2).await;
    assert_eq!(s.get(1).await, Some(&2));
    assert_eq!(s.into_items().await, [1, 2]);
    let names: Vec<_> = take_sites().iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "Store::push",
            "Store::push",
            "Store::get",
            "Store::get",
            "Store::into_items"
        ]
    );
}
