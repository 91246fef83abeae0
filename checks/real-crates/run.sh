#!/usr/bin/env bash
# Whole real crates, traced: each crate below, as published on crates.io, gets
# `#[fgtrace::traced]` on every free fn and impl block of its `src/` (see
# instrument/, a command over the fgtrace-instrument crate), then its own tests run twice: plain, and with every test
# process recording its whole run (FGTRACE_RECORD). Whatever fails to compile
# is a bug of the attribute macro (macros/), never a reason to edit the crate.
#
#   checks/real-crates/run.sh                 # the check (CI runs it)
#   checks/real-crates/run.sh --update-locks  # after fgtrace's dependencies change
#
# Each crate builds with the lock file pinned in checks/real-crates/<crate>/Cargo.lock
# (`--locked`): the crate's dev-dependencies at the versions of the lock file
# it shipped (a fresh resolution for a crate that shipped none, as bincode),
# plus fgtrace's dependencies. When fgtrace's own dependencies change, `--locked` fails:
# rerun with --update-locks (it starts from the pinned lock and only adds or
# drops what changed) and commit the locks.
#
# Everything is built and copied under target/real-crates/ of the repository.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/real-crates"
export CARGO_TARGET_DIR="$out/target"
cd "$repo"

# name version `cargo test` arguments   (why the arguments)
crates=(
  # Parser combinators: generic over the input, the error and the parser, with
  # deep trait-bound chains and `impl Trait` everywhere. --lib: its 282 doc
  # tests alone take a minute per run on 2 cores.
  "winnow 1.0.5 --lib"
  # Unsafe code behind safe traits (Deref, Extend, Drop, iterators), no_std,
  # const generics; the features that build on stable, `const_new` for more
  # `const fn`s in impl blocks.
  "smallvec 1.16.5 --features write,union,const_generics,const_new,drain_filter"
  # Edition 2015 (paths resolve from the crate root) and serde's Serializer
  # and Deserializer traits: many generic impls, associated types, lifetimes.
  "bincode 1.3.3"
  # Unsafe code behind traits: `Buf`/`BufMut` with default methods, `Bytes`
  # with hand-made vtables of fn pointers, atomics. --lib --tests: its 248
  # doc tests take half a minute per run.
  "bytes 1.12.2 --lib --tests"
)
# Not memchr 2.8.3 (SIMD, `#[target_feature]` unsafe fns): it builds and its
# tests pass traced, but they call the tiny search fns billions of times;
# recorded, its 142 unit tests take 4 minutes and write a 32 GB trace.

update_locks=0
case "${1:-}" in
  "") ;;
  --update-locks) update_locks=1 ;;
  *) echo "usage: $0 [--update-locks]" >&2; exit 2 ;;
esac

start_all=$SECONDS
mkdir -p "$out/logs"

# The instrumenting program, and its own tests.
instrument_dir="$here/instrument"
cargo test -q --locked --manifest-path "$instrument_dir/Cargo.toml" >"$out/logs/instrument-test.log" 2>&1 || {
  cat "$out/logs/instrument-test.log"; echo "real-crates: instrument's own tests failed" >&2; exit 1; }
cargo build -q --locked --manifest-path "$instrument_dir/Cargo.toml" >"$out/logs/instrument-build.log" 2>&1 || {
  cat "$out/logs/instrument-build.log"; exit 1; }
instrument="$CARGO_TARGET_DIR/debug/fgtrace-real-crates-instrument"

registry_src() {
  local dir
  for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$1-$2"; do
    [ -f "$dir/Cargo.toml" ] && { echo "$dir"; return 0; }
  done
  return 1
}

# The published source of name $1 version $2, downloaded into cargo's
# registry through a one-dependency manifest if it is not there yet.
crate_source() {
  local src fetch="$out/fetch/$1-$2"
  if src="$(registry_src "$1" "$2")"; then echo "$src"; return; fi
  mkdir -p "$fetch/src"
  : >"$fetch/src/lib.rs"
  printf '[package]\nname = "fetch-%s"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s = "=%s"\n\n[workspace]\n' \
    "$1" "$1" "$2" >"$fetch/Cargo.toml"
  (cd "$fetch" && cargo fetch -q) >&2
  registry_src "$1" "$2" || { echo "real-crates: $1 $2 not in the registry after cargo fetch" >&2; exit 1; }
}

# Sums the `test result:` lines of a cargo test log: "N passed, M failed, K ignored, in B test binaries".
test_summary() {
  awk '/^test result:/ { b++; for (i = 1; i <= NF; i++) { v = $(i-1) + 0;
         if ($i ~ /^passed/) p += v; if ($i ~ /^failed/) f += v; if ($i ~ /^ignored/) g += v } }
       END { printf "%d passed, %d failed, %d ignored, in %d test binar%s", p, f, g, b, b == 1 ? "y" : "ies" }' "$1"
}

failed=()
for entry in "${crates[@]}"; do
  read -r name version args <<<"$entry"
  t0=$SECONDS
  src="$(crate_source "$name" "$version")"
  work="$out/src/$name-$version"
  pinned="$here/$name/Cargo.lock"
  rm -rf "$work"
  mkdir -p "$(dirname "$work")"
  cp -R "$src" "$work"
  chmod -R u+w "$work"
  # fgtrace as a dependency, and a workspace of its own (the copy sits inside
  # this repository's workspace directory).
  printf '\n[dependencies.fgtrace]\npath = "%s"\n\n[workspace]\n' "$repo" >>"$work/Cargo.toml"

  if [ "$update_locks" = 1 ]; then
    # Start from the pinned lock, else from the one the crate shipped.
    if [ -f "$pinned" ]; then cp "$pinned" "$work/Cargo.lock"; fi
    (cd "$work" && cargo fetch -q)
    mkdir -p "$here/$name"
    cp "$work/Cargo.lock" "$pinned"
    echo "real-crates: $name $version: wrote ${pinned#"$repo"/}"
    continue
  fi
  [ -f "$pinned" ] || { echo "real-crates: no ${pinned#"$repo"/}: run $0 --update-locks" >&2; exit 1; }
  cp "$pinned" "$work/Cargo.lock"

  echo "== $name $version (cargo test $args)"
  "$instrument" "$work" "$name $version"

  # `timeout`: a test run that hangs (say, at exit, completing a trace)
  # fails here instead of stalling CI.
  log="$out/logs/$name-plain.log"
  # shellcheck disable=SC2086 # $args is a list of words
  if (cd "$work" && timeout 900 cargo test --locked $args) >"$log" 2>&1; then
    echo "$name: tests, not recording: $(test_summary "$log")"
  else
    tail -n 60 "$log"
    grep -q -- "--locked" "$log" && echo "real-crates: the pinned lock is out of date: run $0 --update-locks" >&2
    echo "$name: tests, not recording: FAILED ($(test_summary "$log")); log: $log"
    failed+=("$name (plain)")
    continue
  fi

  # Under target/, not /tmp (often memory): bytes' traces weigh 0.5 GB.
  rec="$out/traces/$name"
  rm -rf "$rec"
  mkdir -p "$rec"
  log="$out/logs/$name-recorded.log"
  # shellcheck disable=SC2086
  if (cd "$work" && FGTRACE_RECORD="$rec" timeout 900 cargo test --locked $args) >"$log" 2>&1; then
    echo "$name: tests, recording: $(test_summary "$log")"
  else
    tail -n 60 "$log"
    echo "$name: tests, recording: FAILED ($(test_summary "$log")); log: $log"
    failed+=("$name (recording)")
  fi
  # Every test process writes a trace; the crate's own traced fns must be in
  # one: a trace stores each site with its module path, as text.
  traces=$(find "$rec" -name '*.fgt' -size +0 | wc -l)
  module="${name//-/_}"
  own=$(find "$rec" -name '*.fgt' -exec grep -l -a -F "\"module_path\":\"$module" {} + | wc -l || true)
  size=$(find "$rec" -name '*.fgt' -printf '%s\n' | awk '{ n += $1 } END { print n + 0 }')
  echo "$name: recorded $traces non-empty traces ($size bytes), $own with sites of $module"
  if [ "$traces" -eq 0 ] || [ "$own" -eq 0 ]; then
    echo "$name: FAILED: no trace with the crate's calls in $rec"
    failed+=("$name (traces)")
  else
    rm -rf "$rec"
  fi
  echo "$name: $((SECONDS - t0)) s"
done

echo "real-crates: $((SECONDS - start_all)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "real-crates: FAILED: ${failed[*]}" >&2
  exit 1
fi
