#!/usr/bin/env bash
# Builds the Cortex-M example firmware, runs it under qemu (mps2-an385 for
# the Cortex-M3, thumbv7m-none-eabi; mps2-an386 for the Cortex-M4F,
# thumbv7em-none-eabihf), decodes its stream from the CMSDK UART into
# OUT.fgt with `fgtrace board`, and prints the firmware's console, its
# ground truth (`truth NAME CALLS`, one line per traced function) among it,
# on stdout.
#
#   boards/qemu-cortex-m/run.sh m3|m4f OUT.fgt [RATE_HZ]
#
# With LOSSES=1 the firmware is built with its `losses` feature (a test's
# build: three sessions that lose calls in known ways, counted and shown);
# with CLOCK=dwt it runs the `dwt` binary, the same firmware with DWT CYCCNT
# as its clock, which qemu does not count: it gets the runtime's refusal and
# exits with status 4. With TRANSPORT=rtt it runs the `rtt` binary, the same
# firmware with its stream on an RTT up-channel and its commands on the
# down-channel: qemu serves its GDB stub on a free local port (`-gdb`,
# stopped until the host attaches: `-S`), and `fgtrace board --gdb` reads the
# channel through it.
#
# Needs Debian's rustc-web, cargo-web, rust-web-src, lld and qemu-system-arm
# (see docs/src/boards.md); TRANSPORT=rtt, python3 too (to pick a free port). The fgtrace command comes from this repository.
set -euo pipefail
cpu=${1:?usage: run.sh m3|m4f OUT.fgt [RATE_HZ]}
out=${2:?usage: run.sh m3|m4f OUT.fgt [RATE_HZ]}
rate=${3:-10000}
case "$cpu" in
  m3) triple=thumbv7m-none-eabi machine=(-M mps2-an385 -cpu cortex-m3) ;;
  m4f) triple=thumbv7em-none-eabihf machine=(-M mps2-an386 -cpu cortex-m4) ;;
  *) echo "run.sh: unknown core '$cpu' (m3 or m4f)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tools=(/usr/bin/rustc /usr/bin/cargo ld.lld qemu-system-arm)
[ "${TRANSPORT:-uart}" = rtt ] && tools+=(python3)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || {
    echo "run.sh: $tool is missing: apt-get install rustc-web cargo-web rust-web-src lld qemu-system-arm python3" >&2
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
if [ "${CLOCK:-timer0}" = dwt ]; then
  fw="$tdir/$triple/release/dwt"
fi
transport=${TRANSPORT:-uart}
case "$transport" in
  uart) ;;
  # With CLOCK=dwt too, the dwt binary, which sets no control block up
  # (the host's error when it ends).
  rtt) [ "${CLOCK:-timer0}" = dwt ] || fw="$tdir/$triple/release/rtt" ;;
  *) echo "run.sh: unknown TRANSPORT '$transport' (uart or rtt)" >&2; exit 2 ;;
esac
# The host side: the workspace's own fgtrace command.
fgtrace=${FGTRACE_BIN:-}
if [ -z "$fgtrace" ]; then
  (cd "$root" && cargo build -q -p fgtrace-cli) >&2
  fgtrace="$root/target/debug/fgtrace"
fi
# -icount shift=0: one instruction per virtual nanosecond, so the run (and
# SysTick's interrupts) is the same every time, and the 25 MHz timer the
# probe reads ticks once per 40 instructions. The firmware ends through
# semihosting's SYS_EXIT_EXTENDED, which makes qemu exit with its status.
qemu=(qemu-system-arm "${machine[@]}" -display none -monitor none -icount shift=0
  -semihosting-config enable=on,target=native -kernel "$fw")
if [ "$transport" = rtt ]; then
  # A port free now (the kernel's pick); qemu listens on it at start-up and
  # `fgtrace board` waits a few seconds for it to.
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${qemu[@]}" -serial null -S -gdb "tcp:127.0.0.1:$port" </dev/null >&2 &
  qemu_pid=$!
  status=0
  # RTT_MODE=skip|trim: the host sets the channel's mode (the firmware's is block).
  mode=()
  [ -n "${RTT_MODE:-}" ] && mode=(--rtt-mode "$RTT_MODE")
  "$fgtrace" board -o "$out" --elf "$fw" --command "record 0 $rate" --gdb "127.0.0.1:$port" \
    ${mode[@]+"${mode[@]}"} || status=$?
  # qemu has exited if the firmware ran to its end; if not, it is stopped.
  if [ "$status" != 0 ]; then kill "$qemu_pid" 2>/dev/null || true; fi
  qemu_status=0
  wait "$qemu_pid" || qemu_status=$?
  [ "$status" != 0 ] && exit "$status"
  exit "$qemu_status"
fi
"$fgtrace" board -o "$out" --elf "$fw" --command "record 0 $rate" -- "${qemu[@]}" -serial stdio
