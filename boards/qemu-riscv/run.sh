#!/usr/bin/env bash
# Builds the example firmware for TARGET (riscv32imac or riscv64gc), runs it
# under qemu's `virt` machine, decodes its stream into OUT.fgt with
# `fgtrace board`, and prints the firmware's console, its ground truth
# (`truth NAME CALLS`, one line per traced function) among it, on stdout.
#
#   boards/qemu-riscv/run.sh riscv64gc run.fgt [RATE_HZ]
#
# With COUNT_INSTRUCTIONS=1 the firmware is built with its `instructions`
# feature (each call records its minstret delta; `fgtrace report` shows
# instructions and IPC per function); with CLOCK=rdtime, with `rdtime` as the
# probe's clock instead of `mcycle`; with LOSSES=1, with its `losses` feature (a
# test's build: three sessions that lose calls in known ways, counted and shown);
# with SINGLE_HART=1, built for one hart (the probe asks no hart index); with
# HARTS=2, with its `harts2` feature on two harts (qemu -smp 2: a test's
# build, hart 1 runs a workload of its own and parks before the stop); each
# variant in a target directory of its own.
#
# Needs Debian's rustc-web, cargo-web, rust-web-src, lld and qemu-system-misc
# (see docs/src/boards.md). The fgtrace command comes from this repository.
set -euo pipefail
target=${1:?usage: run.sh riscv32imac|riscv64gc OUT.fgt [RATE_HZ]}
out=${2:?usage: run.sh riscv32imac|riscv64gc OUT.fgt [RATE_HZ]}
rate=${3:-10000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
case "$target" in
  riscv32imac) qemu=qemu-system-riscv32 ;;
  riscv64gc) qemu=qemu-system-riscv64 ;;
  *) echo "run.sh: TARGET is riscv32imac or riscv64gc, not $target" >&2; exit 2 ;;
esac
triple="$target-unknown-none-elf"
for tool in /usr/bin/rustc /usr/bin/cargo ld.lld "$qemu"; do
  command -v "$tool" >/dev/null || {
    echo "run.sh: $tool is missing: apt-get install rustc-web cargo-web rust-web-src lld qemu-system-misc" >&2
    exit 3
  }
done
features=() tdir="$here/target"
if [ "${CLOCK:-mcycle}" = rdtime ]; then
  features+=(--no-default-features) tdir="$tdir/rdtime"
fi
if [ "${SINGLE_HART:-0}" = 1 ]; then
  features+=(--features single-hart) tdir="$tdir/single-hart"
fi
if [ "${COUNT_INSTRUCTIONS:-0}" = 1 ]; then
  features+=(--features instructions) tdir="$tdir/instructions"
fi
smp=()
if [ "${HARTS:-1}" = 2 ]; then
  features+=(--features harts2) tdir="$tdir/harts2" smp=(-smp 2)
fi
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
# sampler's timer) is the same every time and minstret counts instructions.
"$fgtrace" board -o "$out" --elf "$fw" --command "record 0 $rate" -- \
  "$qemu" -machine virt ${smp[@]+"${smp[@]}"} -bios none -display none -monitor none -icount shift=0 \
  -serial stdio -kernel "$fw"
