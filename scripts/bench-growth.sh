#!/usr/bin/env bash
# How the embedded pipeline's cost grows (a benchmark, not a test): throughput and
# peak memory of `vigil-pipeline --input DIR` with its tagged lines written (to
# /dev/null), as a user runs it, while one thing grows at a time:
#
#   input events   planted + normal traffic: 100 k, 1 M, 10 M events (few customers)
#   live keys      the 1 M-event dataset (56 customers), then one order and one
#                  payment for each of 100 k and 2 M customers, so the amount rule
#                  holds that many customers' statistics
#   partitions     the 1 M-event dataset with runtime.partitions 1, 4, 16
#
#   scripts/bench-growth.sh            prints one Markdown table
#   TASKSET="taskset -c 0" scripts/bench-growth.sh    the same on one core
#
# Datasets are written once to .cache/bench-growth (about 1.6 GB in all). Each row
# is one run: compare rows of one run, not figures of two.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK="$PWD/.cache/bench-growth"
read -r -a PIN <<<"${TASKSET:-}"
log() { printf 'bench-growth: %s\n' "$*" >&2; }

cargo build --release -p vigil-pipeline -p vigil --locked -q
mkdir -p "$WORK"

# dataset folder, then the generator's arguments for it
dataset() {
  local dir="$WORK/$1"
  shift
  if [[ ! -s "$dir/orders.ndjson" ]]; then
    log "writing $dir"
    target/release/vigil generate --out "$dir" "$@" >/dev/null 2>&1
  fi
  echo "$dir"
}

# table row: what grows, its value, dataset folder, partitions
row() {
  local out rate events rss
  out=$( { VIGIL_RUNTIME_PARTITIONS="$4" "${PIN[@]}" /usr/bin/time -f 'peak_rss_kib=%M' \
    target/release/vigil-pipeline --input "$3" >/dev/null; } 2>&1)
  events=$(sed -n 's/.*: \([0-9]*\) input records in .*/\1/p' <<<"$out" | head -n 1)
  rate=$(sed -n 's/.* in [0-9.]* s (\([0-9]*\) events\/s.*/\1/p' <<<"$out" | head -n 1)
  rss=$(sed -n 's/peak_rss_kib=//p' <<<"$out")
  printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "$events" "$4" "$rate" "$((rss / 1024)) MiB"
}

echo "| grows | value | input events | partitions | events/s | peak RSS |"
echo "|---|---|---|---|---|---|"
for scale in 100 1000 10000; do
  row "input events" "scale $scale" "$(dataset "scale-$scale" --scale "$scale")" 4
done
row "live keys" "56 customers" "$WORK/scale-1000" 4
for customers in 100000 2000000; do
  row "live keys" "$customers customers" "$(dataset "customers-$customers" --distinct-customers "$customers")" 4
done
for partitions in 1 4 16; do
  row "partitions" "$partitions" "$WORK/scale-1000" "$partitions"
done
