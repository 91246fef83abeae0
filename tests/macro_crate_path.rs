//! `crate = path` on `#[traced]`, `#[notrace]` and `#[budget]`, end to end
//! against the real runtime: fgtrace under another name (`fgt`, as after
//! `fgt = { package = "fgtrace", .. }`) and behind a facade module.
//!
//! So that this proves the expansions call fgtrace by the given path, the
//! name `fgtrace` is taken away from the real crate: below, `::fgtrace` is
//! this test crate, which has no `__private` or `testing`. An expansion that
//! still called `::fgtrace::..` would not compile. (That is also why this file
//! says `fgt::testing::capture`, not `fgtrace::testing::capture`.)

extern crate fgtrace as fgt;
extern crate self as fgtrace;

/// Stands for a crate that re-exports fgtrace (`my_facade::fgtrace`).
mod facade {
    pub(crate) use ::fgt as fgtrace;
}

use fgt::testing;

#[fgt::traced(crate = fgt)]
fn parse(s: &str) -> usize {
    s.len()
}

#[fgt::traced(name = "tokenize", crate = fgt)]
fn lex(s: &str) -> usize {
    s.split(' ').count()
}

#[fgt::traced(crate = fgt, name = "check")]
fn validate(n: usize) -> bool {
    n > 0
}

#[facade::fgtrace::traced(crate = crate::facade::fgtrace)]
fn through_facade() -> usize {
    parse("xy")
}

struct Parser {
    depth: u32,
}

#[fgt::traced(crate = fgt)]
impl Parser {
    fn new() -> Parser {
        Parser { depth: 0 }
    }

    fn parse_expr(&mut self) -> u32 {
        self.depth += 1;
        self.peek() + self.also_skipped() + self.skipped_too()
    }

    #[fgt::notrace]
    fn peek(&self) -> u32 {
        self.depth
    }

    #[fgt::notrace(crate = fgt)]
    fn also_skipped(&self) -> u32 {
        1
    }

    #[notrace(crate = fgt)]
    fn skipped_too(&self) -> u32 {
        2
    }

    #[fgt::traced(name = "Parser::finished")]
    fn finish(self) -> u32 {
        self.depth
    }
}

/// The same through the facade path: its own `notrace` is recognised.
struct Lexer;

#[facade::fgtrace::traced(crate = crate::facade::fgtrace, prefix = "Lx")]
impl Lexer {
    fn next_token(&self) -> usize {
        self.position()
    }

    #[crate::facade::fgtrace::notrace]
    fn position(&self) -> usize {
        3
    }
}

#[fgt::traced(crate = fgt)]
async fn load(key: &str) -> Result<usize, String> {
    tokio::task::yield_now().await;
    match parse(key) {
        0 => Err("empty key".to_string()),
        n => Ok(n),
    }
}

#[test]
fn traced_fns_record_under_a_renamed_crate() {
    let (n, cap) = testing::capture_with(|| {
        let n = parse("a b") + lex("a b c") + through_facade();
        assert!(validate(n));
        n
    });
    assert_eq!(n, 3 + 3 + 2);
    assert_eq!(
        cap.functions(),
        ["parse", "tokenize", "through_facade", "check"]
    );
    cap.assert_calls("parse", 2);
    cap.assert_calls("tokenize", 1);
    cap.assert_calls("check", 1);
    cap.assert_calls("through_facade", 1);
}

#[test]
fn an_impl_block_traces_its_methods_except_the_notrace_ones() {
    let (depth, cap) = testing::capture_with(|| {
        let mut p = Parser::new();
        assert_eq!(p.parse_expr(), 1 + 1 + 2);
        assert_eq!(p.parse_expr(), 2 + 1 + 2);
        assert_eq!(p.peek(), 2);
        let lexer = Lexer;
        assert_eq!(lexer.next_token(), 3);
        assert_eq!(lexer.position(), 3);
        p.finish()
    });
    assert_eq!(depth, 2);
    // Every traced method, and nothing else: the `notrace` methods, called
    // from inside and outside the traced ones, are not there.
    assert_eq!(
        cap.functions(),
        [
            "Parser::new",
            "Parser::parse_expr",
            "Lx::next_token",
            "Parser::finished"
        ]
    );
    cap.assert_calls("Parser::parse_expr", 2);
    for skipped in ["peek", "also_skipped", "skipped_too", "position"] {
        assert_eq!(cap.calls(skipped), 0, "{skipped}");
    }
}

#[test]
fn an_async_fn_records_its_future_and_polls() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (out, cap) = testing::capture_with(|| rt.block_on(load("abc")));
    assert_eq!(out, Ok(3));
    assert_eq!(cap.functions(), ["load", "parse"]);
    cap.assert_calls("load", 1);
    // `yield_now` returns `Pending` once, so the future is polled twice.
    assert!(cap.polls("load") >= 2, "{} polls", cap.polls("load"));
    cap.assert_inside("parse", "load");
}

#[test]
#[fgt::testing::budget(crate = fgt, parse(calls = 2, inside = through_facade), check(max_calls = 1))]
fn a_budget_under_a_renamed_crate() {
    assert!(validate(through_facade() + through_facade()));
}

#[test]
#[should_panic(expected = "`parse` was called 3 times, expected 1")]
#[fgt::testing::budget(parse(calls = 1))]
#[fgt::testing::budget(tokenize(calls = 1), crate = crate::facade::fgtrace)]
fn a_budget_under_a_facade_checks_its_limits() {
    lex("a");
    parse("a");
    parse("b");
    through_facade();
}
