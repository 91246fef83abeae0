#!/usr/bin/env bash
# Peak memory and time of the views on a real traced test suite: hashbrown
# 0.15 from crates.io with `#[fgtrace::traced]` on every fn and impl block of
# its src/ (checks/real-crates/instrument), its own tests recorded with
# `FGTRACE_RECORD=DIR cargo test --release --lib --tests` (one trace file per
# test process, about 100 threads and 775M calls in the largest), then
# `fgtrace report DIR/*.fgt` and the other views on the largest file, each
# printed with its wall time and peak RSS (`/usr/bin/time`).
#
#   benches/views_memory/run.sh            # record (about 4 GB on disk), measure, delete
#   benches/views_memory/run.sh --keep     # keep the traces in target/views-memory/traces
#   benches/views_memory/run.sh --record   # only record, into target/views-memory/traces
#   benches/views_memory/run.sh DIR        # measure the *.fgt files already in DIR
#   VIEWS_MEMORY_ALL=1 benches/views_memory/run.sh ...   # graph, perfetto, diff, html, plot too
#
# Needs the network for crates.io (cargo fetch) the first time. Run it on an
# idle machine: the figures are wall times.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/views-memory"
keep=0
traces=""
case "${1:-}" in
  "") ;;
  --keep) keep=1 ;;
  --record) keep=2 ;;
  -*) echo "usage: $0 [--keep | TRACE_DIR]" >&2; exit 2 ;;
  *) traces="$(cd "$1" && pwd)" ;;
esac
mkdir -p "$out"

if [ -z "$traces" ]; then
  export CARGO_TARGET_DIR="$out/target"
  cargo build -q --locked --manifest-path "$repo/checks/real-crates/instrument/Cargo.toml"
  instrument="$CARGO_TARGET_DIR/debug/fgtrace-real-crates-instrument"
  # hashbrown's newest 0.15 release, fetched into cargo's registry.
  fetch="$out/fetch"
  mkdir -p "$fetch/src"
  : >"$fetch/src/lib.rs"
  printf '[package]\nname = "fetch-hashbrown"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nhashbrown = "~0.15"\n\n[workspace]\n' >"$fetch/Cargo.toml"
  (cd "$fetch" && cargo fetch -q)
  version=$(cd "$fetch" && cargo metadata -q --format-version 1 |
    grep -o '"name":"hashbrown","version":"[^"]*"' | head -n 1 | sed 's/.*"version":"//; s/"//')
  src=""
  for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"hashbrown-$version"; do
    [ -f "$d/Cargo.toml" ] && src="$d"
  done
  [ -n "$src" ] || { echo "views-memory: hashbrown $version is not in the registry" >&2; exit 1; }
  work="$out/src/hashbrown-$version"
  rm -rf "$work"
  mkdir -p "$out/src"
  cp -R "$src" "$work"
  chmod -R u+w "$work"
  printf '\n[dependencies.fgtrace]\npath = "%s"\n\n[workspace]\n' "$repo" >>"$work/Cargo.toml"
  "$instrument" "$work" "hashbrown $version"
  traces="$out/traces"
  rm -rf "$traces"
  mkdir -p "$traces"
  echo "recording hashbrown $version's tests (cargo test --release --lib --tests) ..."
  (cd "$work" && cargo test -q --release --lib --tests --no-run) >"$out/build.log" 2>&1 ||
    { tail -n 40 "$out/build.log"; exit 1; }
  t0=$(date +%s.%N)
  (cd "$work" && FGTRACE_RECORD="$traces" cargo test -q --release --lib --tests) >"$out/test.log" 2>&1 ||
    { tail -n 40 "$out/test.log"; exit 1; }
  echo "recorded in $(echo "$(date +%s.%N) - $t0" | bc) s: $(grep -c '^test result: ok' "$out/test.log") test binaries passed"
  unset CARGO_TARGET_DIR
  [ "$keep" = 2 ] && { ls -l "$traces"; exit 0; }
  [ "$keep" = 1 ] || trap 'rm -rf "$traces"' EXIT
fi

cargo build -q --release --manifest-path "$repo/Cargo.toml" -p fgtrace-cli
fg="$repo/target/release/fgtrace"
files=("$traces"/*.fgt)
largest=$(ls -S "${files[@]}" | head -n 1)
echo "${#files[@]} files, $(du -ch "${files[@]}" | tail -n 1 | cut -f1) in all; the largest, $(du -h "$largest" | cut -f1):"
"$fg" info "$largest" | grep -E '^ *(calls|threads|lost)'
status=0
measure() { # label FGTRACE_THREADS args...
  local label=$1 threads=$2 rc=0
  shift 2
  FGTRACE_THREADS=$threads /usr/bin/time -f '%e s %M KB' -o "$out/time.txt" "$fg" "$@" \
    >/dev/null 2>"$out/err.log" || rc=$?
  if [ "$rc" -ne 0 ]; then
    printf '%-40s FAILED (exit %s): %s\n' "$label" "$rc" "$(tail -n 1 "$out/err.log")"
    status=1
  else
    printf '%-40s %s\n' "$label" "$(tail -n 1 "$out/time.txt")"
  fi
}
cores=$(nproc)
echo "view                                     wall time, peak RSS"
measure "report DIR/*.fgt" "$cores" report "${files[@]}"
measure "report (largest)" "$cores" report "$largest"
measure "report (largest, FGTRACE_THREADS=1)" 1 report "$largest"
measure "flame --folded (largest)" "$cores" flame --folded "$largest"
measure "flame --folded (largest, FGTRACE_THREADS=1)" 1 flame --folded "$largest"
measure "flame (SVG, largest)" "$cores" flame "$largest" -o /dev/null
# The views whose output holds every call they show, through a window (whole,
# the largest file's chart or Firefox profile would take about 100 GB).
measure "flame --chart --folded --to 100ms" "$cores" flame --chart --folded --to 100ms "$largest"
measure "firefox --to 100ms (largest)" "$cores" firefox --to 100ms "$largest" -o /dev/null
# VIEWS_MEMORY_ALL=1: the other views too, each a few minutes on the largest file.
if [ "${VIEWS_MEMORY_ALL:-0}" = 1 ]; then
  measure "graph (largest)" "$cores" graph "$largest"
  measure "perfetto (largest)" "$cores" perfetto "$largest" -o /dev/null
  measure "diff (largest vs itself)" "$cores" diff "$largest" "$largest"
  measure "html (largest)" "$cores" html "$largest" -o /dev/null
  measure "plot -f insert (largest)" "$cores" plot -f 'RawTable<T, A>::insert' "$largest" -o /dev/null
fi
exit $status
