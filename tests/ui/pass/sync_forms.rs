//! Every sync form `#[traced]` supports, built with `deny(warnings)` so the
//! expansion adds no warnings to user code.
#![deny(warnings)]

use fgtrace::{notrace, traced};
use std::fmt::{self, Debug, Display};
use std::pin::Pin;
use std::rc::Rc;

#[traced]
fn plain() {}

/// Generics, lifetimes and a where-clause, all kept as written.
#[traced]
#[inline]
pub fn longest<'a, T: ?Sized, const N: usize>(items: &'a [&'a T; N]) -> Option<&'a T>
where
    T: PartialOrd,
{
    let mut best = *items.first()?;
    for item in items {
        if *item > best {
            best = item;
        }
    }
    Some(best)
}

#[traced]
unsafe fn read(p: *const u32) -> u32 {
    *p
}

#[traced]
#[no_mangle]
pub extern "C" fn fgtrace_pass_extern(x: i32) -> i32 {
    x + 1
}

#[traced]
fn evens(limit: u32) -> impl Iterator<Item = u32> + Clone {
    (0..limit).filter(|n| n % 2 == 0)
}

#[traced]
fn boxed_display<'a>(s: &'a str) -> Box<dyn Display + 'a> {
    Box::new(s)
}

#[traced]
fn early(n: i32) -> Result<i32, String> {
    if n < 0 {
        return Err("negative".into());
    }
    let parsed: i32 = n.to_string().parse().map_err(|e| format!("{e}"))?;
    Ok(parsed)
}

#[traced]
fn never(msg: &str) -> ! {
    panic!("{msg}")
}

#[traced(name = "r#type renamed")]
fn r#type() {}

/// The fn a sync call returns can be a future: the call is what is traced.
#[traced]
fn make_future() -> impl std::future::Future<Output = u32> {
    async { 1 }
}

#[traced]
fn with_item_inside() -> u32 {
    fn helper() -> u32 {
        2
    }
    const K: u32 = 3;
    helper() + K
}

#[traced]
fn destructure((a, b): (u32, u32), mut c: u32) -> u32 {
    c += a;
    c + b
}

struct Parser<'s, T> {
    input: &'s str,
    depth: T,
}

#[traced]
impl<'s, T> Parser<'s, T>
where
    T: Copy + Into<u64>,
{
    const LIMIT: u64 = 64;

    pub const fn new(input: &'s str, depth: T) -> Self {
        Parser { input, depth }
    }

    pub fn parse_expr(&mut self) -> Option<&'s str> {
        if self.depth.into() > Self::LIMIT {
            return None;
        }
        self.input.split_whitespace().next()
    }

    #[notrace]
    fn hot(&self) -> usize {
        self.input.len()
    }

    #[fgtrace::notrace]
    fn hot_too(&self) -> usize {
        self.hot()
    }

    #[traced(name = "Parser::boxed")]
    fn boxed(self: Box<Self>) -> u64 {
        self.depth.into()
    }

    fn rc(self: Rc<Self>) -> usize {
        self.hot_too()
    }

    fn pinned(self: Pin<&mut Self>) -> &'s str {
        self.input
    }

    fn generic_method<U: Debug>(&self, u: U) -> String {
        format!("{u:?}")
    }
}

struct Point(i32, i32);

#[traced(prefix = "Pt")]
impl Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.0, self.1)
    }
}

trait Shape {
    type Unit;
    fn area(&self) -> Self::Unit;
    #[traced]
    fn describe(&self) -> String {
        "shape".to_string()
    }
}

#[traced]
unsafe impl Send for Point2 {}
struct Point2(*const u8);

#[traced]
impl Shape for Point {
    type Unit = i32;
    fn area(&self) -> i32 {
        self.0 * self.1
    }
}

impl Point {
    #[traced]
    pub fn norm1(&self) -> i32 {
        self.0.abs() + self.1.abs()
    }

    #[notrace]
    pub fn alone(&self) -> i32 {
        0
    }
}

/// A const fn still works in const context next to traced methods.
const P: Parser<'static, u8> = Parser::new("a b", 1);

fn main() {
    plain();
    assert_eq!(longest(&[&1, &3, &2]), Some(&3));
    assert_eq!(unsafe { read(&7) }, 7);
    assert_eq!(fgtrace_pass_extern(1), 2);
    assert_eq!(evens(5).collect::<Vec<_>>(), [0, 2, 4]);
    assert_eq!(boxed_display("x").to_string(), "x");
    assert_eq!(early(-1), Err("negative".to_string()));
    assert_eq!(early(3), Ok(3));
    std::panic::set_hook(Box::new(|_| {}));
    assert!(std::panic::catch_unwind(|| never("boom")).is_err());
    drop(std::panic::take_hook());
    r#type();
    drop(make_future());
    assert_eq!(with_item_inside(), 5);
    assert_eq!(destructure((1, 2), 3), 6);

    let mut p = P;
    assert_eq!(p.parse_expr(), Some("a"));
    assert_eq!(Pin::new(&mut p).pinned(), "a b");
    assert_eq!(p.generic_method(1), "1");
    assert_eq!(Rc::new(Parser::new("abc", 2u8)).rc(), 3);
    assert_eq!(Box::new(p).boxed(), 1);

    let pt = Point(3, -4);
    assert_eq!(pt.to_string(), "(3, -4)");
    assert_eq!(pt.area(), -12);
    assert_eq!(pt.describe(), "shape");
    assert_eq!(pt.norm1(), 7);
    assert_eq!(pt.alone(), 0);
    let _ = Point2(std::ptr::null());
}
