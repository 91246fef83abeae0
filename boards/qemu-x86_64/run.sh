#!/usr/bin/env bash
# Builds the x86_64 example firmware, boots it under qemu (`-kernel` with its
# PVH entry, no OS), decodes its stream from COM1 into OUT.fgt with
# `fgtrace board`, and prints the firmware's console, its ground truth
# (`truth NAME CALLS`, one line per traced function) among it, on stdout.
#
#   boards/qemu-x86_64/run.sh run.fgt [RATE_HZ]
#
# With LOSSES=1 the firmware is built with its `losses` feature (a test's build:
# three sessions that lose calls in known ways, counted and shown), in a target
# directory of its own.
#
# Needs Debian's rustc-web, cargo-web, rust-web-src, lld and qemu-system-x86
# (see docs/src/boards.md). The fgtrace command comes from this repository.
set -euo pipefail
out=${1:?usage: run.sh OUT.fgt [RATE_HZ]}
rate=${2:-10000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
triple=x86_64-unknown-none
for tool in /usr/bin/rustc /usr/bin/cargo ld.lld qemu-system-x86_64; do
  command -v "$tool" >/dev/null || {
    echo "run.sh: $tool is missing: apt-get install rustc-web cargo-web rust-web-src lld qemu-system-x86" >&2
    exit 3
  }
done
features=() tdir="$here/target"
if [ "${LOSSES:-0}" = 1 ]; then
  features+=(--features losses) tdir="$tdir/losses"
fi
# Debian's toolchain builds `core` for the bare-metal target (-Zbuild-std).
(cd "$here" && PATH=/usr/bin:$PATH RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 /usr/bin/cargo build -q --release \
  -Zbuild-std=core -Zbuild-std-features=compiler-builtins-mem --target "$triple" \
  --target-dir "$tdir" ${features[@]+"${features[@]}"}) >&2
fw="$tdir/$triple/release/fgtrace-board-demo"
# The host side: the workspace's own fgtrace command.
fgtrace=${FGTRACE_BIN:-}
if [ -z "$fgtrace" ]; then
  (cd "$root" && cargo build -q -p fgtrace-cli) >&2
  fgtrace="$root/target/debug/fgtrace"
fi
# -icount shift=0: one instruction per virtual nanosecond, so the run (and the
# PIT's interrupts) is the same every time and the TSC counts instructions.
# The firmware ends through isa-debug-exit, which makes qemu exit with 33.
"$fgtrace" board -o "$out" --elf "$fw" --command "record 0 $rate" -- \
  qemu-system-x86_64 -machine q35 -display none -monitor none -no-reboot -icount shift=0 \
  -device isa-debug-exit,iobase=0xf4,iosize=0x04 -serial stdio -kernel "$fw"
