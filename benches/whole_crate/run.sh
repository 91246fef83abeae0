#!/usr/bin/env bash
# Whole real crates traced, timed: `regex` 1.11.3 and the four crates it is
# built from (regex-automata, regex-syntax, aho-corasick, memchr), as
# published, every free fn and impl block given `#[fgtrace::traced]` by
# checks/real-crates' instrument tool: about 1,900 items. driver.rs searches
# a generated text for captures (one thread), built twice with cargo's
# default release profile (plus the frame pointers the repository's
# .cargo/config.toml adds to everything built under it): against the crates
# as published, and against the
# traced copies (`[patch.crates-io]`). Four runs, each the best of three
# processes:
#
#   untraced     the crates as published
#   no session   traced, compiled in, not recording
#   recorded     every call recorded: FGTRACE_RECORD (stream mode)
#   auto 50ns    FGTRACE_RECORD with FGTRACE_AUTO_EXCLUDE=50ns
#   plan, no session / plan, recorded
#                the traced copies built again with the plan `cargo fgtrace
#                plan` writes from the auto runs' traces (FGTRACE_PLAN): the
#                functions auto-exclude switched get an exact count instead
#                of the probe; not recording, and recording every call
#   uncounted, no session / uncounted, recorded
#                the same with `cargo fgtrace plan --uncounted`: those
#                functions get neither probe nor count
#
# Each process searches ROUNDS times; the figures are the best round (the
# steady state) and the first (with the regex's lazy caches, and for auto
# the switches, still being made). The script checks that the auto run's
# report has every function's exact call count, the same as the recorded
# run's, which lost nothing.
#
#   benches/whole_crate/run.sh [ROUNDS] [KB]     (default 3 rounds of 300 KB)
#
# Needs python3 (the comparison) and the crates in cargo's registry (fetched
# if missing). Everything goes under target/whole-crate/.
set -euo pipefail
rounds=${1:-3}
kb=${2:-300}
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/whole-crate"
crates=(regex:1.11.3 regex-automata:0.4.11 regex-syntax:0.8.6 aho-corasick:1.1.3 memchr:2.7.6)
cd "$repo"

registry_src() {
  local dir
  for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$1-$2"; do
    [ -f "$dir/Cargo.toml" ] && { echo "$dir"; return 0; }
  done
  return 1
}

rm -rf "$out/src" "$out/plain" "$out/traced" "$out/traces"
mkdir -p "$out/src" "$out/plain/src" "$out/traced/src" "$out/traces"
deps=""
patch=""
for c in "${crates[@]}"; do
  deps+="${c%%:*} = \"=${c##*:}\""$'\n'
done
# The plain program first: its build fetches whatever the registry lacks.
cp "$here/driver.rs" "$out/plain/src/main.rs"
printf '[package]\nname = "whole-crate-plain"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s\n[workspace]\n' \
  "$deps" >"$out/plain/Cargo.toml"
(cd "$out/plain" && CARGO_TARGET_DIR="$out/target" cargo build -q --release)

instrument_dir="$repo/checks/real-crates/instrument"
CARGO_TARGET_DIR="$out/target" cargo build -q --locked --manifest-path "$instrument_dir/Cargo.toml"
for c in "${crates[@]}"; do
  name=${c%%:*} version=${c##*:}
  src=$(registry_src "$name" "$version") || { echo "whole-crate: $name $version is not in the registry" >&2; exit 1; }
  cp -R "$src" "$out/src/$name"
  chmod -R u+w "$out/src/$name"
  printf '\n[dependencies.fgtrace]\npath = "%s"\n' "$repo" >>"$out/src/$name/Cargo.toml"
  "$out/target/debug/fgtrace-real-crates-instrument" "$out/src/$name" "$name $version" | cut -d';' -f1
  patch+="$name = { path = \"../src/$name\" }"$'\n'
done
cp "$here/driver.rs" "$out/traced/src/main.rs"
printf '[package]\nname = "whole-crate-traced"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%sfgtrace = { path = "%s" }\n\n[patch.crates-io]\n%s\n[workspace]\n' \
  "$deps" "$repo" "$patch" >"$out/traced/Cargo.toml"
# The crates' own warnings (newer lints than they were published with) go to a log.
(cd "$out/traced" && CARGO_TARGET_DIR="$out/target" cargo build -q --release) >"$out/traced-build.log" 2>&1 || {
  cat "$out/traced-build.log"; echo "whole-crate: the traced build failed" >&2; exit 1; }
cargo build -q --release -p fgtrace-cli
plain="$out/target/release/whole-crate-plain"
traced="$out/target/release/whole-crate-traced"
fgtrace="$repo/target/release/fgtrace"

# run LABEL ENV... PROGRAM: the best of three processes, as "LABEL BEST FIRST".
# $trace_dir, when set, is where the process's FGTRACE_RECORD points (run N).
run() {
  local label=$1 b="" f="" line
  shift
  for i in 1 2 3; do
    if [ "$label" = recorded ] || [ "$label" = auto-50ns ]; then
      line=$(env FGTRACE_RECORD="$out/traces/$label/$i" "$@" "$rounds" "$kb")
    elif [ "$label" = plan-recorded ] || [ "$label" = uncounted-recorded ]; then
      line=$(env FGTRACE_RECORD="$out/traces/$label/$i" "$@" "$rounds" "$kb")
    else
      line=$(env "$@" "$rounds" "$kb")
    fi
    read -r ms _ first <<<"$line"
    b=$(awk -v a="$b" -v m="$ms" 'BEGIN { print (a == "" || m < a) ? m : a }')
    f=$(awk -v a="$f" -v m="$first" 'BEGIN { print (a == "" || m < a) ? m : a }')
  done
  printf '%s %s %s\n' "$label" "$b" "$f"
}

results=$(
  run untraced "$plain"
  run "no-session" "$traced"
  run recorded "$traced"
  run auto-50ns FGTRACE_AUTO_EXCLUDE=50ns "$traced"
)
# The plan from the auto runs, and the traced copies built with it (in the
# same target directory: only the five crates compile again).
# planned NAME [PLAN OPTIONS]: the plan of the auto runs' traces in
# $out/NAME.plan, and the program built with it, $out/whole-crate-NAME.
planned() {
  local name=$1
  shift
  "$repo/target/release/cargo-fgtrace" plan "$@" "$out/traces/auto-50ns"/*/*.fgt -o "$out/$name.plan" 2>/dev/null
  (cd "$out/traced" && FGTRACE_PLAN="$out/$name.plan" CARGO_TARGET_DIR="$out/target" cargo build -q --release) \
    >"$out/$name-build.log" 2>&1 || {
    cat "$out/$name-build.log"; echo "whole-crate: the $name build failed" >&2; exit 1; }
  cp "$traced" "$out/whole-crate-$name"
}
planned planned
planned uncounted --uncounted
planned="$out/whole-crate-planned"
uncounted="$out/whole-crate-uncounted"
results+=$'\n'$(
  run plan-no-session "$planned"
  run plan-recorded "$planned"
  run uncounted-no-session "$uncounted"
  run uncounted-recorded "$uncounted"
)
echo "whole-crate: regex 1.11.3 and its 4 crates, every fn traced; $rounds searches of $kb KB per process, best of 3 processes"
echo "  plan: $(grep -vc '^#' "$out/planned.plan") functions counted, not timed (cargo fgtrace plan of the auto runs)"
awk 'NR == 1 { b = $2; f = $3 }
     { printf "  %-20s best round %9.2f ms %7.2fx   first round %9.2f ms %7.2fx\n", $1, $2, $2 / b, $3, $3 / f }' <<<"$results"

# Exact counts. A few functions' counts vary from process to process even
# with every call recorded (hash tables seeded at random: how often keys are
# compared on a collision); those that differ between the three recorded
# processes are left out, and every other function's count in each auto
# process must equal the recorded processes'.
for run in recorded auto-50ns plan-recorded uncounted-recorded; do
  for i in 1 2 3; do
    "$fgtrace" report "$out/traces/$run/$i"/*.fgt --format json >"$out/traces/$run-$i.json"
  done
done
python3 - "$out/traces" <<'PY'
import json, sys
from collections import Counter
d = sys.argv[1]
load = lambda run, i: json.load(open(f"{d}/{run}-{i}.json"))
full = [load("recorded", i) for i in (1, 2, 3)]
auto = [load("auto-50ns", i) for i in (1, 2, 3)]
plan = [load("plan-recorded", i) for i in (1, 2, 3)]
for r in full + auto + plan:
    assert not r["losses"], f"a run lost calls: {r['losses']}"
# Per (name, site): functions of the same display name stay apart.
counts = lambda r: Counter({(f["name"], f["site"]): f["calls"] for f in r["functions"]})
# The planned builds' sites are numbered in another order: their functions
# are matched by (name, module, file, line).
by_place = lambda r: Counter({(f["name"], f["module_path"], f["file"], f["line"]): f["calls"] for f in r["functions"]})
def check(label, runs, count_of, every_key=True):
    """Each run's counts against the first recorded run's, leaving out the
    functions whose count varies between recorded runs; every_key=False:
    only the functions the run has (the rest were left out of its build)."""
    fulls = [count_of(r) for r in full]
    ref = fulls[0]
    varying = {k for k in set().union(*fulls) if len({c[k] for c in fulls}) > 1}
    bad = []
    for r in runs:
        assert not r["losses"], f"a run lost calls: {r['losses']}"
        c = count_of(r)
        for k in (set(ref) | set(c)) if every_key else set(c):
            if k not in varying and c[k] != ref[k]:
                bad.append((k[0], ref[k], c[k]))
    if bad:
        sys.exit(f"whole-crate: call counts differ (function, recorded, {label}): {bad[:10]}")
    return varying
varying = check("auto", auto, counts)
check("planned", plan, by_place)
check("uncounted", [load("uncounted-recorded", i) for i in (1, 2, 3)], by_place, every_key=False)
keys = set().union(*(counts(r) for r in full))
p = plan[-1]
counted_fns = sum(1 for f in p["functions"] if f["counted"])
print(f"  plan: {p['calls'] - p['counted']} calls recorded, {p['counted']} counted by the plan "
      f"in {counted_fns} functions; every function's count equals the recorded runs'")
a = auto[-1]
switched = sum(1 for f in a["functions"] if f["count_only"])
print(f"  auto: {a['calls'] - a['count_only']} calls recorded, {a['count_only']} counted only "
      f"in {switched} functions; every function's count equals the recorded runs' "
      f"({len(keys) - len(varying)} functions; {len(varying)} left out, whose count varies between recorded runs too: "
      f"{', '.join(sorted(k[0] for k in varying)) or 'none'})")
PY
rm -rf "$out/traces"
