#!/usr/bin/env bash
# Linux on AArch64, run: examples/pipeline.rs built for aarch64-unknown-linux-gnu
# (Debian's cross linker) and run under qemu-aarch64 (user mode), with the
# sampler on (qemu has no perf_event_open: the POSIX-timer fallback samples).
# Its trace is then read back on this host by the `fgtrace` command: the same
# calls, the expected functions with their exact call counts, samples.
#
# Needs: rustup's aarch64-unknown-linux-gnu standard library,
# gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
for tool in aarch64-linux-gnu-gcc qemu-aarch64; do
  command -v "$tool" >/dev/null ||
    { echo "qemu-aarch64.sh: no $tool (apt-get install gcc-aarch64-linux-gnu qemu-user)" >&2; exit 1; }
done
rustup target add aarch64-unknown-linux-gnu >/dev/null

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
cargo build -q --example pipeline --target aarch64-unknown-linux-gnu --target-dir target/cross
cargo build -q -p fgtrace-cli
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

n=20000
FGTRACE_OUT="$out" qemu-aarch64 -L /usr/aarch64-linux-gnu \
  target/cross/aarch64-unknown-linux-gnu/debug/examples/pipeline "$n" >"$out/stdout" 2>"$out/stderr" ||
  { cat "$out/stdout" "$out/stderr" >&2; echo "qemu-aarch64.sh: the pipeline failed" >&2; exit 1; }

fail() { echo "qemu-aarch64.sh: $*" >&2; echo "--- its output:" >&2; cat "$out/stdout" "$out/stderr" >&2; exit 1; }
grep -qx "pipeline: $n requests parsed, 1 malformed line(s)" "$out/stdout" || fail "not the pipeline's result"
# "recorded C calls and S samples on T threads in ..."
read -r calls samples < <(sed -n 's/^recorded \([0-9]*\) calls and \([0-9]*\) samples on .*/\1 \2/p' "$out/stdout")
[ -n "${calls:-}" ] || fail "no 'recorded ...' line"
[ "$samples" -gt 0 ] || fail "the sampler took no samples"

# Read back on this host (x86_64): the same number of calls, and each
# function's count as the pipeline makes them (n lines and a malformed one,
# in batches of 250, on 4 workers).
target/debug/fgtrace report "$out/pipeline.fgt" >"$out/report"
grep -q "^# $calls calls on " "$out/report" || fail "the host reads another number of calls than $calls: $(head -2 "$out/report" | tail -1)"
batches=$(( (n + 1 + 249) / 250 ))
for expect in "1 run_pipeline" "1 generate_logs" "4 worker" "$batches process_batch" \
              "$((n + 1)) LineParser::parse_line" "$n LineParser::parse_request" \
              "$n aggregate" "$((batches + 4)) merge"; do
  set -- $expect
  got=$(awk -v f="$2" '$NF == f { print $1 }' "$out/report")
  [ "$got" = "$1" ] || fail "$2: $got calls in the host's report, expected $1"
done
echo "qemu-aarch64.sh: the pipeline on aarch64-unknown-linux-gnu recorded $calls calls and $samples samples; read back on $(uname -m) with the expected calls"
