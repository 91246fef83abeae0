#!/usr/bin/env bash
# The lock files of the projects that build fgtrace from outside the workspace
# (their own workspaces, built with --locked in CI). Run after fgtrace's own
# dependencies or crates change: each lock gains or drops what changed and
# keeps every other version.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in checks/probe-cost checks/inference checks/real-crates/instrument fuzz \
         boards/qemu-riscv boards/qemu-x86_64 boards/qemu-cortex-m benches/views benches/peers; do
  [ -f "$d/Cargo.lock" ] || continue
  cargo metadata -q --format-version 1 --manifest-path "$d/Cargo.toml" >/dev/null
  echo "update-locks: $d/Cargo.lock"
done
checks/real-crates/run.sh --update-locks
