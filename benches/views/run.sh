#!/bin/bash
# Times the views on one core (FGTRACE_THREADS=1) and on all (the default)
# on two recorded traces of about 100M calls each (2 threads and 1 thread),
# alternating, and checks that every output is byte-identical between the
# two. Usage: benches/views/run.sh [ROUNDS] (default 1400000: 103.6M calls).
# Needs about 1 GB in the temporary directory. Run it on an idle machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${1:-1400000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet --manifest-path "$here/Cargo.toml" --target-dir "$root/target/views-bench"
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p fgtrace-cli
bin="$root/target/views-bench/release/fgtrace-views-bench"
fg="$root/target/release/fgtrace"
FGTRACE_RECORD="$work/two" "$bin" "$rounds" 2
FGTRACE_RECORD="$work/one" "$bin" $((rounds * 2)) 1
two=$(ls "$work"/two/*.fgt)
one=$(ls "$work"/one/*.fgt)
"$fg" info "$two" | grep -E '^(calls|threads)'
time_view() { # name threads args...
    local name=$1 t=$2
    shift 2
    local start end
    start=$(date +%s.%N)
    FGTRACE_THREADS=$t "$fg" "$@" > "$work/out.$name.$t" 2>/dev/null
    end=$(date +%s.%N)
    printf '%-8s threads=%s %6.2f s\n' "$name" "$t" "$(echo "$end - $start" | bc)"
}
for round in 1 2; do
    for t in 1 2; do
        time_view report "$t" report "$two"
        time_view flame "$t" flame "$two" -o /dev/stdout
        time_view folded "$t" flame --folded "$two"
        time_view diff "$t" diff "$two" "$one"
        time_view report1 "$t" report "$one"
    done
done
status=0
for n in report flame folded diff report1; do
    if cmp -s "$work/out.$n.1" "$work/out.$n.2"; then
        echo "$n: identical on 1 and 2 threads"
    else
        echo "$n: OUTPUT DIFFERS between 1 and 2 threads"
        status=1
    fi
done
exit $status
