//! Compile tests of `#[traced]`: every supported form builds against the
//! real runtime without warnings, and misuse gives a readable error at the
//! offending code. Regenerate `.stderr` files with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
