#!/usr/bin/env bash
# The user's case, from checks/real-crates/run.sh: a new project that depends
# on `regex` and has no fgtrace anywhere (a git repository, as `cargo new`
# makes it), traced without editing it:
#
#   cargo fgtrace record --crate regex -- run --release
#       writes a trace whose report lists regex's own functions with calls;
#   cargo fgtrace plan TRACE --below 1s -o PLAN, then
#   cargo fgtrace record --crate regex --plan PLAN -- run --release
#       builds regex's functions with a count instead of the probe: the
#       report has each as [counted], with the first run's call count;
#   cargo fgtrace record -- test --release
#       runs the project's tests with its own crate traced;
#
# and `git status` shows nothing changed outside target/ afterwards.
#
#   checks/real-crates/regex.sh CARGO_FGTRACE FGTRACE   # the check
#   checks/real-crates/regex.sh --update-locks          # the project's pinned lock
#
# The project's lock (regex and what it is built from) is pinned in
# checks/real-crates/regex/Cargo.lock; fgtrace's own dependencies are
# resolved by cargo fgtrace in its copy, as for any user.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
proj="$repo/target/real-crates/regex-app"
pinned="$here/regex/Cargo.lock"

rm -rf "$proj"
mkdir -p "$proj/src"
# What `cargo new` writes (not run here: inside this repository it would add
# the project to fgtrace's workspace), and an empty `[workspace]` for the
# same reason: the project is a workspace of its own, as it is anywhere else.
git init -q "$proj"
echo /target >"$proj/.gitignore"
cat >"$proj/Cargo.toml" <<'EOF'
[package]
name = "regex-app"
version = "0.1.0"
edition = "2024"

[dependencies]
regex = "1.13"

[workspace]
EOF
cat >"$proj/src/main.rs" <<'EOF'
//! Finds dates and words in generated lines; prints what it found.
use regex::Regex;

fn lines(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("line {i}: on 20{:02}-{:02}-{:02} word{} met value={}", i % 100, i % 12 + 1, i % 28 + 1, i % 7, i * 3))
        .collect()
}

fn count_dates(re: &Regex, text: &[String]) -> usize {
    text.iter().filter_map(|l| re.captures(l)).filter(|c| &c[2] == "03").count()
}

fn main() {
    let text = lines(2000);
    let date = Regex::new(r"(\d{4})-(\d{2})-(\d{2})").unwrap();
    let value = Regex::new(r"value=(\d+)").unwrap();
    let sum: u64 = text
        .iter()
        .filter_map(|l| value.captures(l))
        .map(|c| c[1].parse::<u64>().unwrap())
        .sum();
    println!("march dates: {}, sum of values: {sum}", count_dates(&date, &text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_march_dates() {
        let re = Regex::new(r"(\d{4})-(\d{2})-(\d{2})").unwrap();
        assert_eq!(count_dates(&re, &lines(24)), 2);
    }
}
EOF

if [ "${1:-}" = --update-locks ]; then
  if [ -f "$pinned" ]; then cp "$pinned" "$proj/Cargo.lock"; fi
  cargo metadata -q --format-version 1 --manifest-path "$proj/Cargo.toml" >/dev/null
  mkdir -p "$(dirname "$pinned")"
  cp "$proj/Cargo.lock" "$pinned"
  echo "real-crates: wrote ${pinned#"$repo"/}"
  exit 0
fi
cargo_fgtrace="$1"
fgtrace="$2"
cp "$pinned" "$proj/Cargo.lock"
git -C "$proj" add -A
git -C "$proj" -c user.name=check -c user.email=check@localhost commit -q -m "regex-app"

fail() { echo "regex project: FAILED: $*" >&2; exit 1; }

log="$repo/target/real-crates/logs/regex-app-run.log"
trace="$proj/target/regex.fgt"
(cd "$proj" && "$cargo_fgtrace" fgtrace record --crate regex -o "$trace" -- run --release --locked) >"$log" 2>&1 ||
  { cat "$log"; fail "cargo fgtrace record --crate regex -- run --release"; }
grep -q "^march dates: " "$log" || { cat "$log"; fail "the program's output is not in $log"; }
# The functions with calls, and their calls: only regex is instrumented
# (not regex-automata nor the program), so all are regex's own.
called() {
  "$fgtrace" report --format json "$@" | python3 -c '
import json, sys
fs = [f for f in json.load(sys.stdin)["functions"] if f["calls"] > 0]
print(len(fs), sum(f["calls"] for f in fs))'
}
read -r fns calls < <(called "$trace")
[ "$fns" -gt 0 ] || fail "no function of regex with calls in $trace"
"$fgtrace" report "$trace" | sed -n '1,8p'
echo "regex project: run: $fns functions of regex called, $calls calls"

# A plan of every function that run called, and the run again with it:
# every one counted, none timed, with the same counts.
plan="$proj/target/regex.plan"
"$cargo_fgtrace" fgtrace plan "$trace" --below 1s -o "$plan" 2>/dev/null || fail "cargo fgtrace plan"
planned=$(grep -vc '^#' "$plan")
[ "$planned" -eq "$fns" ] || { cat "$plan"; fail "the plan names $planned functions, the run called $fns"; }
log="$repo/target/real-crates/logs/regex-app-plan.log"
ptrace="$proj/target/regex-planned.fgt"
(cd "$proj" && "$cargo_fgtrace" fgtrace record --crate regex --plan "$plan" -o "$ptrace" -- run --release --locked) >"$log" 2>&1 ||
  { cat "$log"; fail "cargo fgtrace record --crate regex --plan PLAN -- run --release"; }
counts() {
  "$fgtrace" report --format json "$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)
for f in sorted(r["functions"], key=lambda f: (f["module_path"], f["name"], f["line"])):
    print(f["module_path"], f["name"], f["line"], f["calls"], f["counted"] if sys.argv[1] == "planned" else "")' "$2"
}
diff <(counts "$trace" first | awk '{print $1, $2, $3, $4}') <(counts "$ptrace" planned | awk '{print $1, $2, $3, $4}') ||
  fail "the planned run's counts differ from the first run's"
uncounted=$(counts "$ptrace" planned | awk '$4 != $5' | wc -l)
[ "$uncounted" -eq 0 ] || fail "$uncounted functions of the planned run were timed, not counted"
echo "regex project: plan: $planned functions of regex counted, not timed, each with the first run's count"

log="$repo/target/real-crates/logs/regex-app-test.log"
dir="$proj/target/test-traces"
(cd "$proj" && "$cargo_fgtrace" fgtrace record --dir "$dir" -- test --release --locked) >"$log" 2>&1 ||
  { cat "$log"; fail "cargo fgtrace record -- test --release"; }
grep -q "test tests::finds_the_march_dates ... ok" "$log" || { cat "$log"; fail "the test did not run"; }
# Only the project's own crate is instrumented this time.
read -r fns calls < <(called "$dir"/*.fgt)
[ "$fns" -gt 0 ] || fail "no function of regex_app with calls in $dir"
echo "regex project: test: $fns functions of regex_app called, $calls calls"

changed=$(git -C "$proj" status --porcelain --untracked-files=all)
[ -z "$changed" ] || fail "the project's files changed: $changed"
echo "regex project: git status shows no change"
