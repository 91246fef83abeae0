#!/usr/bin/env bash
# The combined flamegraph's join on real code: `regex` 1.11.3 and the four
# crates it is built from (regex-automata, regex-syntax, aho-corasick,
# memchr), as published, every free fn and impl block given
# `#[fgtrace::traced]` by checks/real-crates' instrument tool. driver.rs runs
# two threads: regex searches, then the hidden 3:1 split of
# tests/support/split.rs (two traced parents calling one untraced helper,
# parent_a with three times parent_b's work).
#
# Built with cargo's default release profile (no debug info) and with
# `debug = "line-tables-only"`, both with frame pointers (this repository's
# .cargo/config.toml, as the sampler asks of its users); each build recorded twice,
# with the perf-ring sampler (FGTRACE_SAMPLE=timer:999) and the signal
# sampler (timer-signal:999). For each of the four, from
# `fgtrace flame --combined`:
#
#   unplaced   samples placed under their innermost call without a join
#              (`[unknown below <fn>]`), share of all samples
#   split      the helper's samples under parent_a / (under a + under b),
#              against 0.75 within 4 sigma of binomial noise
#
#   checks/real-join/run.sh [CPU_MS]     (each thread's CPU time; default 1000)
#
# Both profiles are built again without frame pointers (`RUSTFLAGS=""`: what
# a project that did not set the flag gets, cargo's default release profile
# exactly as a user has it), with fgtrace's `unwind` feature (both sampler
# paths copy the sampled stack and unwind it through `.eh_frame`).
#
# Fails when a run leaves more than 1% unplaced or the split is off. Needs
# python3 and the crates in cargo's registry (fetched if missing). Everything
# goes under target/real-join/.
set -euo pipefail
cpu_ms=${1:-1000}
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$repo/target/real-join"
crates=(regex:1.11.3 regex-automata:0.4.11 regex-syntax:0.8.6 aho-corasick:1.1.3 memchr:2.7.6)
cd "$repo"

registry_src() {
  local dir
  for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$1-$2"; do
    [ -f "$dir/Cargo.toml" ] && { echo "$dir"; return 0; }
  done
  return 1
}

rm -rf "$out/src" "$out/traced" "$out/traces"
mkdir -p "$out/src" "$out/traced/src" "$out/traces"
deps=""
patch=""
for c in "${crates[@]}"; do
  deps+="${c%%:*} = \"=${c##*:}\""$'\n'
done
# Fetch what the registry lacks (a manifest with the published crates only).
mkdir -p "$out/fetch/src"
echo 'fn main() {}' >"$out/fetch/src/main.rs"
printf '[package]\nname = "real-join-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s\n[workspace]\n' \
  "$deps" >"$out/fetch/Cargo.toml"
(cd "$out/fetch" && cargo fetch -q)

instrument_dir="$repo/checks/real-crates/instrument"
CARGO_TARGET_DIR="$out/target" cargo build -q --locked --manifest-path "$instrument_dir/Cargo.toml"
for c in "${crates[@]}"; do
  name=${c%%:*} version=${c##*:}
  src=$(registry_src "$name" "$version") || { echo "real-join: $name $version is not in the registry" >&2; exit 1; }
  cp -R "$src" "$out/src/$name"
  chmod -R u+w "$out/src/$name"
  printf '\n[dependencies.fgtrace]\npath = "%s"\n' "$repo" >>"$out/src/$name/Cargo.toml"
  "$out/target/debug/fgtrace-real-crates-instrument" "$out/src/$name" "$name $version" >/dev/null
  patch+="$name = { path = \"../src/$name\" }"$'\n'
done
cp "$here/driver.rs" "$out/traced/src/main.rs"
mkdir -p "$out/tests/support"
cp "$repo/tests/support/split.rs" "$out/tests/support/split.rs"
printf '[package]\nname = "real-join"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%sfgtrace = { path = "%s" }\nlibc = "0.2"\n\n[patch.crates-io]\n%s\n[workspace]\n' \
  "$deps" "$repo" "$patch" >"$out/traced/Cargo.toml"
cargo build -q --release -p fgtrace-cli
fgtrace="$repo/target/release/fgtrace"

status=0
for profile in default line-tables-only default-no-fp line-tables-only-no-fp; do
  unset CARGO_PROFILE_RELEASE_DEBUG RUSTFLAGS
  target="$out/target" gate=1 features=()
  case $profile in
    line-tables-only*) export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only ;;
  esac
  case $profile in
    *-no-fp) export RUSTFLAGS="" target="$out/target-no-fp" features=(--features fgtrace/unwind) ;;
  esac
  # The crates' own warnings (newer lints than they were published with) go to a log.
  (cd "$out/traced" && CARGO_TARGET_DIR="$target" cargo build -q --release "${features[@]}") >"$out/build-$profile.log" 2>&1 || {
    cat "$out/build-$profile.log"; echo "real-join: the traced build ($profile) failed" >&2; exit 1; }
  for sampler in timer:999 timer-signal:999; do
    rm -rf "$out/traces"
    FGTRACE_RECORD="$out/traces" FGTRACE_SAMPLE="$sampler" "$target/release/real-join" "$cpu_ms" >/dev/null
    trace=$(ls "$out/traces"/*.fgt)
    "$fgtrace" flame "$trace" --combined -o "$out/$profile-${sampler%%:*}.svg" 2>"$out/$profile-${sampler%%:*}.err"
    python3 - "$out/$profile-${sampler%%:*}.svg" "$profile" "${sampler%%:*}" "$out/$profile-${sampler%%:*}.err" "$gate" <<'PY' || status=1
import html, math, re, sys
svg, profile, sampler, err, gate = sys.argv[1:6]
text = open(svg).read()
sub = html.unescape(re.search(r'<text id="subtitle"[^>]*>([^<]*)<', text).group(1))
samples = int(re.search(r"(\d+) samples \(", sub).group(1))
m = re.search(r"(\d+) samples? placed under", sub)
unplaced = int(m.group(1)) if m else 0
m = re.search(r"(\d+) shadow-depth mismatches", sub)
mismatches = int(m.group(1)) if m else 0
# Frames: title, depth (y) and extent in the count's units (fg:x, fg:w).
frames = []
for g in re.finditer(r'<g><title>([^<]*)</title><rect x="[^"]*" y="([^"]*)"[^>]*fg:x="(\d+)" fg:w="(\d+)"', text):
    frames.append((html.unescape(g.group(1)), float(g.group(2)), int(g.group(3)), int(g.group(4))))
def ancestors(f):
    return [a for a in frames if a[1] > f[1] and a[2] <= f[2] < a[2] + a[3]]
under = {"a": 0, "b": 0}
for f in frames:
    if not f[0].startswith("real_join::split::helper "):
        continue
    m = re.search(r"sampled: (\d+) sample", f[0])
    n = int(m.group(1)) if m else 0
    names = [a[0].split(" (")[0] for a in ancestors(f)]
    if "real_join::split::parent_a" in names:
        under["a"] += n
    elif "real_join::split::parent_b" in names:
        under["b"] += n
a, b = under["a"], under["b"]
share = a / max(a + b, 1)
sigma4 = 4 * math.sqrt(0.75 * 0.25 / max(a + b, 1))
notes = [l.strip() for l in open(err) if l.strip()]
ok = unplaced <= 0.01 * samples and abs(share - 0.75) <= max(sigma4, 0.03) and a + b > 0
print(f"{profile:22} {sampler:13} {samples:6} samples  unplaced {unplaced:4} ({100 * unplaced / max(samples, 1):.2f}%)  "
      f"depth mismatches {mismatches:4}  helper under a:b {a}:{b} = {share:.3f} (0.75 +- {sigma4:.3f})  "
      f"{('ok' if ok else 'FAIL') if gate == '1' else 'not gated'}")
for n in notes:
    print(f"  stderr: {n}")
sys.exit(0 if ok or gate != '1' else 1)
PY
    rm -rf "$out/traces"
  done
done
exit $status
