#!/usr/bin/env bash
# Windows, run: the recording core's and the trace model's tests, and
# checks/portable's (a session on two threads saved, loaded and rendered;
# what needs Linux or Unix saying so), built for x86_64-pc-windows-gnu with
# Debian's MinGW-w64 and run under Wine.
#
# Needs: rustup's x86_64-pc-windows-gnu standard library, gcc-mingw-w64-x86-64,
# wine64. Debian 12's Wine 8 lacks bcryptprimitives.dll, which Rust's standard
# library imports on Windows (ProcessPrng, since Rust 1.78): a program that
# imports it does not start there. wine/bcryptprimitives.c supplies it
# (ProcessPrng over RtlGenRandom) in the Wine prefix, for Wine only.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"

wine=$(command -v wine64 || echo /usr/lib/wine/wine64)
[ -x "$wine" ] || { echo "wine.sh: no wine64 (apt-get install wine64)" >&2; exit 1; }
command -v x86_64-w64-mingw32-gcc >/dev/null ||
  { echo "wine.sh: no x86_64-w64-mingw32-gcc (apt-get install gcc-mingw-w64-x86-64)" >&2; exit 1; }
rustup target add x86_64-pc-windows-gnu >/dev/null

export WINEPREFIX="$root/target/wine" WINEDEBUG=-all
if [ ! -d "$WINEPREFIX/drive_c/windows/system32" ]; then
  "$wine" wineboot --init >/dev/null 2>&1
  "$(dirname "$wine")/wineserver" -w 2>/dev/null || true  # waits for the prefix to be written
fi
[ -d "$WINEPREFIX/drive_c/windows/system32" ] || { echo "wine.sh: Wine made no prefix in $WINEPREFIX" >&2; exit 1; }
if ! ls /usr/lib/x86_64-linux-gnu/wine/x86_64-windows/bcryptprimitives.dll >/dev/null 2>&1; then
  x86_64-w64-mingw32-gcc -O2 -shared -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
    checks/portable/wine/bcryptprimitives.c -ladvapi32
fi

export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="$wine"
cargo test -q --target x86_64-pc-windows-gnu --target-dir target/cross \
  -p fgtrace-core -p fgtrace-trace -p fgtrace-portable
echo "wine.sh: fgtrace-core, fgtrace-trace and checks/portable pass on x86_64-pc-windows-gnu under $("$wine" --version)"
