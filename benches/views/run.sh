#!/bin/bash
# Times the views on one core (FGTRACE_THREADS=1) and on all (the default: 2
# here) and checks that every output is byte-identical between the two, on
# traces of about 100M calls each:
#   two    recorded with FGTRACE_RECORD, 2 threads
#   one    recorded with FGTRACE_RECORD, 1 thread
#   saved  the same workload as `two` under a Session, each thread's loop in
#          one traced call, written by Trace::save (a version-1 file)
#   sampled  `two` with the sampler on (FGTRACE_SAMPLE=timer:999), for the
#          combined and the sampled flamegraphs
# Usage: benches/views/run.sh [ROUNDS] (default 1400000: 103.6M calls).
# Needs about 2 GB in the temporary directory. Run it on an idle machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rounds=${1:-1400000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release --quiet --locked --manifest-path "$here/Cargo.toml" --target-dir "$root/target/views-bench"
cargo build --release --quiet --locked --manifest-path "$root/Cargo.toml" -p fgtrace-cli
bin="$root/target/views-bench/release/fgtrace-views-bench"
fg="$root/target/release/fgtrace"
FGTRACE_RECORD="$work/two" "$bin" "$rounds" 2
FGTRACE_RECORD="$work/one" "$bin" $((rounds * 2)) 1
FGTRACE_RECORD="$work/sampled" FGTRACE_SAMPLE=timer:999 "$bin" "$rounds" 2
"$bin" "$rounds" 2 "$work/saved.fgt"
two=$(ls "$work"/two/*.fgt)
one=$(ls "$work"/one/*.fgt)
sampled=$(ls "$work"/sampled/*.fgt)
saved="$work/saved.fgt"
for f in "$two" "$one" "$sampled" "$saved"; do
    echo "$(basename "$(dirname "$f")")/$(basename "$f"): $("$fg" info "$f" | grep -E '^(calls|samples)' | tr '\n' ' ')"
done
time_view() { # name threads args...
    local name=$1 t=$2
    shift 2
    local start end
    start=$(date +%s.%N)
    FGTRACE_THREADS=$t "$fg" "$@" > "$work/out.$name.$t" 2>/dev/null
    end=$(date +%s.%N)
    printf '%-15s threads=%s %6.2f s\n' "$name" "$t" "$(echo "$end - $start" | bc)"
}
for round in 1 2; do
    for t in 1 2; do
        time_view report "$t" report "$two"
        time_view flame "$t" flame "$two" -o /dev/stdout
        time_view folded "$t" flame --folded "$two"
        time_view diff "$t" diff "$two" "$one"
        time_view report1 "$t" report "$one"
        time_view saved-report "$t" report "$saved"
        time_view saved-folded "$t" flame --folded "$saved"
        time_view saved-diff "$t" diff "$saved" "$two"
        time_view combined "$t" flame --combined --folded "$sampled"
        time_view sampled "$t" flame --sampled --folded "$sampled"
    done
done
status=0
for n in report flame folded diff report1 saved-report saved-folded saved-diff combined sampled; do
    if cmp -s "$work/out.$n.1" "$work/out.$n.2"; then
        echo "$n: identical on 1 and 2 threads"
    else
        echo "$n: OUTPUT DIFFERS between 1 and 2 threads"
        status=1
    fi
done
exit $status
