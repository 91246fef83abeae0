#!/usr/bin/env bash
# Whole real crates, traced by `cargo fgtrace`: each crate below, as published
# on crates.io, is a member of a scratch workspace under
# target/real-crates/ws/ (its files copied from cargo's registry, none
# edited), and `cargo fgtrace record --crate NAME -- test ...`, run in its
# directory, runs its own tests with every free fn and impl block of its
# `src/` traced and every test process recording. Whatever fails to build or to pass is a bug of
# fgtrace (the instrumenting, the macros, the runtime), never a reason to
# edit the crate. Each crate's traces must hold calls of its own functions
# (`fgtrace info`).
#
# Then the user's case, on a scratch project that depends on `regex` and has
# no fgtrace anywhere (regex.sh): `cargo fgtrace record --crate regex -- run
# --release` and `cargo fgtrace record -- test --release`, the project's files
# unchanged.
#
#   checks/real-crates/run.sh                 # the check (CI runs it)
#   checks/real-crates/run.sh --update-locks  # after fgtrace's dependencies change
#   checks/real-crates/run.sh NAME...         # only these crates (and no regex project)
#
# One lock file, checks/real-crates/Cargo.lock, pins the whole scratch
# workspace: the crates' dev-dependencies and fgtrace's dependencies (a
# member `real-crates-lock` depends on fgtrace, so that the lock holds them).
# When fgtrace's own dependencies change, the `cargo metadata --locked` below
# fails: rerun with --update-locks (it starts from the pinned lock and only
# adds or drops what changed) and commit the lock. The regex project has its
# own, checks/real-crates/regex/Cargo.lock.
#
# All crates share one workspace and so one target directory and one set of
# build flags: fgtrace and the dev-dependencies are built once for all. (Cargo
# warns that the `[profile]`s of winnow, indexmap and arrayvec are ignored
# there: they set bench and release options, not the test profile's.)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/real-crates"
ws="$out/ws"
cd "$repo"

# name version `cargo test` arguments   (why the arguments)
crates=(
  # Parser combinators: generic over the input, the error and the parser, with
  # deep trait-bound chains and `impl Trait` everywhere. --lib: its 282 doc
  # tests alone take a minute on 2 cores.
  "winnow 1.0.5 --lib"
  # Unsafe code behind safe traits (Deref, Extend, Drop, iterators), no_std,
  # const generics; the features that build on stable. fgtrace's runtime is
  # itself built with smallvec (through parking_lot): here the two are
  # different packages, the member and crates.io's.
  "smallvec 1.16.5 --features write,union,const_generics,const_new,drain_filter"
  # Edition 2015 (paths resolve from the crate root) and serde's Serializer
  # and Deserializer traits: many generic impls, associated types, lifetimes.
  "bincode 1.3.3"
  # Unsafe code behind traits: `Buf`/`BufMut` with default methods, `Bytes`
  # with hand-made vtables of fn pointers, atomics. --lib --tests: its 248
  # doc tests take half a minute.
  "bytes 1.12.2 --lib --tests"
  # A SwissTable: raw pointers, SIMD groups, allocator generics, rayon and
  # serde impls. --lib --tests: doc tests. Not `test_lots_of_insertions`
  # (half a minute untraced on 2 cores, 4.8 GB of trace recorded whole).
  "hashbrown 0.16.1 --lib --tests --features serde,rayon -- --skip test_lots_of_insertions"
  # An ordered map over hashbrown's raw table, with quickcheck properties.
  "indexmap 2.14.2 --lib --tests"
  # Integer and float formatting: unsafe writes into uninitialised buffers,
  # lookup tables, 128-bit arithmetic.
  "itoa 1.0.19 --tests"
  # Not `test_random` (a million random values) nor `test_non_finite` (every
  # NaN mantissa in a range), each in two binaries: 2.5 minutes and 1.9 GB of
  # trace.
  "ryu 1.0.23 --lib --tests -- --skip test_random --skip test_non_finite"
  # The parser and serializer behind half the ecosystem: serde's traits,
  # derives in the tests, macros (`json!`). Its `test`, `map`, `stream` and
  # `regression` tests (not `compiletest`, which runs trybuild, nor `debug`).
  "serde_json 1.0.150 --lib --test test --test map --test stream --test regression"
  # Generic enum plumbing: hundreds of small forwarding impls, many of them
  # made by macro_rules.
  "either 1.15.0 --lib"
  # Fixed-capacity vectors: MaybeUninit, raw pointers, const generics, Drop.
  "arrayvec 0.7.8 --lib --tests"
  # Error handling: a hand-made vtable per error type, object-safe downcasts,
  # backtraces. Its tests, not `compiletest` (trybuild).
  "anyhow 1.0.104 --lib --test test_*"
  # A derive macro's runtime: every test is `#[derive(Error)]` expanded by
  # thiserror-impl (a proc-macro crate, not traced); what is traced is the
  # small runtime the expansions call. Not `compiletest`.
  "thiserror 2.0.18 --lib --test test_*"
  # The slab allocator under tokio and mio: index reuse, vacant lists.
  "slab 0.4.12 --lib --tests"
)

# `cargo fgtrace record` options beyond --crate and --dir, by crate: indexmap's
# quickcheck properties call tiny fns millions of times; there the functions
# whose calls average under 1 us are switched to count-only (their counts
# stay exact), which the check then covers too.
declare -A record_opts=(
  [indexmap]="--auto-exclude 1us"
)

update_locks=0
only=()
case "${1:-}" in
  --update-locks) update_locks=1 ;;
  -*) echo "usage: $0 [--update-locks | NAME...]" >&2; exit 2 ;;
  *) only=("$@") ;;
esac

start_all=$SECONDS
mkdir -p "$out/logs"
# The crates' tests expect a clean shell: anyhow's compare an error's Debug
# text with one that has no backtrace.
unset RUST_BACKTRACE RUST_LIB_BACKTRACE

registry_src() {
  local dir
  for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$1-$2"; do
    [ -f "$dir/Cargo.toml" ] && { echo "$dir"; return 0; }
  done
  return 1
}

# The published sources of every crate: one manifest depending on all of
# them, fetched into cargo's registry.
fetch="$out/fetch"
mkdir -p "$fetch/src"
: >"$fetch/src/lib.rs"
{
  printf '[package]\nname = "real-crates-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n'
  for entry in "${crates[@]}"; do
    read -r name version _ <<<"$entry"
    printf '%s = "=%s"\n' "$name" "$version"
  done
  printf '\n[workspace]\n'
} >"$fetch/Cargo.toml"
(cd "$fetch" && cargo fetch -q)

# The scratch workspace: each crate's published files, as they are (its
# target directory kept: a second run builds only what changed).
mkdir -p "$ws"
find "$ws" -mindepth 1 -maxdepth 1 ! -name target -exec rm -rf {} +
mkdir -p "$ws/real-crates-lock/src"
members=""
for entry in "${crates[@]}"; do
  read -r name version _ <<<"$entry"
  src="$(registry_src "$name" "$version")" ||
    { echo "real-crates: $name $version not in the registry after cargo fetch" >&2; exit 1; }
  cp -R "$src" "$ws/$name-$version"
  chmod -R u+w "$ws/$name-$version"
  members+="  \"$name-$version\","$'\n'
done
: >"$ws/real-crates-lock/src/lib.rs"
printf '[package]\nname = "real-crates-lock"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[dependencies]\nfgtrace = { path = "%s" }\n' \
  "$repo" >"$ws/real-crates-lock/Cargo.toml"
printf '[workspace]\nresolver = "2"\nmembers = [\n  "real-crates-lock",\n%s]\n' "$members" >"$ws/Cargo.toml"

pinned="$here/Cargo.lock"
if [ "$update_locks" = 1 ]; then
  # Start from the pinned lock: only what changed moves.
  if [ -f "$pinned" ]; then cp "$pinned" "$ws/Cargo.lock"; fi
  cargo metadata -q --format-version 1 --manifest-path "$ws/Cargo.toml" >/dev/null
  cp "$ws/Cargo.lock" "$pinned"
  echo "real-crates: wrote ${pinned#"$repo"/}"
  "$here/regex.sh" --update-locks
  exit 0
fi
[ -f "$pinned" ] || { echo "real-crates: no ${pinned#"$repo"/}: run $0 --update-locks" >&2; exit 1; }
cp "$pinned" "$ws/Cargo.lock"
cargo metadata -q --locked --format-version 1 --manifest-path "$ws/Cargo.toml" >/dev/null || {
  echo "real-crates: the pinned lock is out of date: run $0 --update-locks" >&2; exit 1; }

# The command under test, built as real-join builds it (CI runs that next).
t0=$SECONDS
cargo build -q --release -p fgtrace-cli
cargo_fgtrace="$repo/target/release/cargo-fgtrace"
fgtrace="$repo/target/release/fgtrace"
echo "real-crates: fgtrace-cli built in $((SECONDS - t0)) s"

# Sums the `test result:` lines of a cargo test log: "N passed, M failed, K ignored, in B test binaries".
test_summary() {
  awk '/^test result:/ { b++; for (i = 1; i <= NF; i++) { v = $(i-1) + 0;
         if ($i ~ /^passed/) p += v; if ($i ~ /^failed/) f += v; if ($i ~ /^ignored/) g += v } }
       END { printf "%d passed, %d failed, %d ignored, in %d test binar%s", p, f, g, b, b == 1 ? "y" : "ies" }' "$1"
}

# "FUNCTIONS CALLS": the most functions with calls in one of the traces $@,
# and the calls of all, from `fgtrace info` (a file's summary: constant
# time, where `report` would read gigabytes). Only the crate is instrumented
# (not its tests, not fgtrace), so every traced function is one of its own.
own_calls() {
  local t
  for t in "$@"; do "$fgtrace" info "$t"; done |
    awk '/^functions:/ { if ($2 > f) f = $2 } /^calls:/ { c += $2 } END { print f + 0, c + 0 }'
}

failed=()
for entry in "${crates[@]}"; do
  read -r name version args <<<"$entry"
  if [ ${#only[@]} -gt 0 ] && ! printf '%s\n' "${only[@]}" | grep -qx "$name"; then
    continue
  fi
  t0=$SECONDS
  echo "== $name $version (cargo fgtrace record ${record_opts[$name]:+${record_opts[$name]} }-- test $args)"
  # Under target/, not /tmp (often memory): bytes' traces weigh 0.5 GB.
  rec="$out/traces/$name"
  rm -rf "$rec"
  mkdir -p "$rec"
  log="$out/logs/$name.log"
  # `timeout`: a test run that hangs (say, at exit, completing a trace)
  # fails here instead of stalling CI.
  # shellcheck disable=SC2086 # $args is a list of words
  # From the crate's directory, cargo picks it (not `-p`: crates.io's package
  # of the same name and version may be in the graph too).
  if (cd "$ws/$name-$version" && timeout 900 "$cargo_fgtrace" fgtrace record --crate "$name" \
        --dir "$rec" ${record_opts[$name]:-} -- test --locked $args) >"$log" 2>&1; then
    echo "$name: tests, traced and recording: $(test_summary "$log")"
  else
    tail -n 60 "$log"
    echo "$name: tests, traced and recording: FAILED ($(test_summary "$log")); log: $log"
    failed+=("$name (tests)")
    continue
  fi
  traces=("$rec"/*.fgt)
  size=$(du -sb "$rec" | cut -f1)
  if own=$(own_calls "${traces[@]}") && [ "${own%% *}" -gt 0 ]; then
    echo "$name: ${#traces[@]} traces ($size bytes): up to ${own%% *} of its functions called in one, ${own##* } calls"
    rm -rf "$rec"
  else
    echo "$name: FAILED: no call of its functions in the ${#traces[@]} traces of $rec"
    failed+=("$name (traces)")
  fi
  echo "$name: $((SECONDS - t0)) s"
done

if [ ${#only[@]} -eq 0 ]; then
  t0=$SECONDS
  "$here/regex.sh" "$cargo_fgtrace" "$fgtrace" || failed+=("regex project")
  echo "regex project: $((SECONDS - t0)) s"
fi

echo "real-crates: $((SECONDS - start_all)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "real-crates: FAILED: ${failed[*]}" >&2
  exit 1
fi
