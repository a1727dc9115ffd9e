#!/usr/bin/env bash
# The embedded pipeline's throughput on one core, and the ratio to another build run
# alternately in the same session (this machine is shared and noisy: compare within a
# pair, not across sessions).
#
#   scripts/bench-embedded.sh                    this tree's build, RUNS times
#   scripts/bench-embedded.sh OTHER/vigil-pipeline   this tree's and OTHER's, alternating
#
# Env: RUNS (7), SCALE (1000: the planted dataset with SCALE × 1 000 events of normal
# traffic, about a million events), MIX (equal: the seed's, its three streams at one
# rate; half-devices: half device events, the mix of figures before 2026-12-07), CORE
# (0: the core both runs are pinned to).
# The dataset is written once into target/bench-embedded/. Tagged lines go to
# /dev/null, as the performance target says.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-7}"
SCALE="${SCALE:-1000}"
MIX="${MIX:-equal}"
CORE="${CORE:-0}"
OTHER="${1:-}"
DATA="target/bench-embedded/scale-$SCALE-$MIX"

cargo build --release --locked -q -p vigil-pipeline -p vigil
[[ -s "$DATA/devices.ndjson" ]] || target/release/vigil generate --out "$DATA" --scale "$SCALE" --mix "$MIX" >/dev/null 2>&1

# Events a second of one run of binary $1.
rate() {
  taskset -c "$CORE" "$1" --input "$DATA" 2>&1 >/dev/null | sed -n 's/.*s (\([0-9]*\) events\/s.*/\1/p'
}

echo "dataset $DATA, core $CORE, $RUNS runs"
ratios=()
for ((i = 1; i <= RUNS; i++)); do
  if [[ -z "$OTHER" ]]; then
    echo "run $i: $(rate target/release/vigil-pipeline) events/s"
    continue
  fi
  # Which build goes first alternates too: a pair's second run may find the machine
  # otherwise.
  if ((i % 2)); then
    new=$(rate target/release/vigil-pipeline)
    old=$(rate "$OTHER")
  else
    old=$(rate "$OTHER")
    new=$(rate target/release/vigil-pipeline)
  fi
  ratio=$(awk -v n="$new" -v o="$old" 'BEGIN { printf "%.3f", n / o }')
  ratios+=("$ratio")
  echo "pair $i: this $new, other $old events/s: $ratio"
done
if [[ -n "$OTHER" ]]; then
  median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  echo "median ratio (this / other): $median"
fi
