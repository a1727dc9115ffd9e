#!/usr/bin/env bash
# State at scale: N orders from N distinct customers (default 5 000 000), each paid
# once, so the amount rule ends up holding N customers' statistics.
#
#   1. the embedded runtime on the dataset (events/s, peak RSS), next to the 1M-event
#      planted dataset with few customers;
#   2. the six Kafka services (release builds, one instance each, commit interval
#      100 ms) on a local broker: time to process, changelog records and bytes per
#      commit, commit durations, resident memory per live key of payment-anomalies;
#   3. kill -9 of every stateful service and a restart: restore time and changelog
#      records restored per second, per stage;
#   4. the committed output compared with the embedded runtime's (counts per kind and
#      an order-independent digest of every line).
#
#   scripts/bench-state.sh                  CUSTOMERS=5000000 by default
#   CUSTOMERS=500000 scripts/bench-state.sh a smaller run
set -euo pipefail
cd "$(dirname "$0")/.."

N="${CUSTOMERS:-5000000}"
WORK="$PWD/.cache/bench-state"
DATA="$WORK/customers-$N"
FEW="$WORK/planted-1000"
LOGS="$WORK/logs"
STATEFUL=(join-enrich payment-metrics payment-anomalies)
log() { printf 'bench-state: %s\n' "$*" >&2; }
# shellcheck source=scripts/lib/stack.sh
. scripts/lib/stack.sh

cargo build --release --workspace --bins --locked
# shellcheck source=scripts/lib/services.sh
. scripts/lib/services.sh
mkdir -p "$WORK" "$LOGS"
[[ -s "$DATA/orders.ndjson" ]] || target/release/vigil generate --out "$DATA" --distinct-customers "$N"
[[ -s "$FEW/orders.ndjson" ]] || target/release/vigil generate --out "$FEW" --scale 1000

# --- 1. embedded ---------------------------------------------------------------------
embedded() { # dataset label
  local out; out=$( { /usr/bin/time -f 'peak_rss_kib=%M' target/release/vigil-pipeline --input "$1" --quiet; } 2>&1 )
  local rate rss
  rate=$(sed -n 's/.* in [0-9.]* s (\([0-9]*\) events\/s.*/\1/p' <<<"$out" | head -n 1)
  rss=$(sed -n 's/peak_rss_kib=//p' <<<"$out")
  printf '| embedded, %s | %s events/s | %s MiB peak RSS |\n' "$2" "$rate" "$((rss / 1024))"
}
log "embedded runtime"
echo "| run | throughput | memory |"
echo "|---|---|---|"
embedded "$FEW" "1M events, planted + few customers"
embedded "$DATA" "$N customers"

# --- 2. Kafka ------------------------------------------------------------------------
export VIGIL_STACK_STATE="$WORK/stack"
trap 'svc_stop_all; scripts/local-stack.sh stop >/dev/null 2>&1 || true' EXIT
stack_up
target/release/vigil provision >/dev/null

for s in "${SERVICES[@]}"; do svc_start "$s"; done
sleep 5
log "producing $((2 * N)) records"
t0=$(date +%s.%N)
target/release/vigil generate --kafka --input "$DATA" 2>>"$LOGS/generator.log"
produced=$(date +%s.%N)
log "waiting for payment-anomalies and payment-metrics to read every enriched payment"
while (($(svc_metric payment-anomalies vigil_records_in_total) < N || $(svc_metric payment-metrics vigil_records_in_total) < N)); do
  sleep 2
done
done_at=$(date +%s.%N)
sleep 3
echo
echo "| stage | changelog records / commit | changelog bytes / commit | commit p50 ≈ | commits | RSS | live state entries | RSS per entry |"
echo "|---|---|---|---|---|---|---|---|"
for s in "${STATEFUL[@]}"; do
  commits=$(svc_metric "$s" vigil_transaction_commits_total)
  records=$(svc_metric "$s" vigil_changelog_records_total)
  bytes=$(svc_metric "$s" vigil_changelog_bytes_total)
  sum=$(curl -s "127.0.0.1:${PORTS[$s]}/metrics" | awk '$1 ~ /^vigil_transaction_commit_seconds_sum/ {print $2}')
  rss=$(awk '/VmRSS/ {print $2}' "/proc/${PIDS[$s]}/status")
  entries=$(svc_metric "$s" vigil_state_entries)
  printf '| %s | %.0f | %.0f | %.1f ms (mean) | %s | %s MiB | %s | %s B |\n' "$s" \
    "$(bc -l <<<"$records / $commits")" "$(bc -l <<<"$bytes / $commits")" "$(bc -l <<<"$sum * 1000 / $commits")" \
    "$commits" "$((rss / 1024))" "$entries" "$( ((entries > 0)) && echo $((rss * 1024 / entries)) || echo -)"
done
printf '\nKafka: %s records produced in %.1f s; every enriched payment processed %.1f s after production began (%.0f input records/s)\n' \
  "$((2 * N))" "$(bc -l <<<"$produced - $t0")" "$(bc -l <<<"$done_at - $t0")" "$(bc -l <<<"2 * $N / ($done_at - $t0)")"

# --- 3. restore after kill -9 --------------------------------------------------------
echo
echo "| stage | changelog records restored | restore time | records/s | peak RSS after the restore |"
echo "|---|---|---|---|---|"
for s in "${STATEFUL[@]}"; do
  kill -9 "${PIDS[$s]}"
  wait "${PIDS[$s]}" 2>/dev/null || true
  svc_start "$s"
  until grep -q "tasks ready" <(tail -n 20 "$LOGS/$s-0.log") 2>/dev/null && (($(svc_metric "$s" vigil_restored_records_total) > 0)); do
    sleep 1
  done
  restored=$(svc_metric "$s" vigil_restored_records_total)
  seconds=$(curl -s "127.0.0.1:${PORTS[$s]}/metrics" | awk '$1 ~ /^vigil_restore_seconds/ {print $2}')
  peak=$(awk '/VmHWM/ {print $2}' "/proc/${PIDS[$s]}/status")
  printf '| %s | %s | %.2f s | %.0f | %s MiB |\n' "$s" "$restored" "$seconds" "$(bc -l <<<"$restored / $seconds")" "$((peak / 1024))"
done

# --- 4. same output as the embedded runtime -----------------------------------------
log "comparing the committed output with the embedded runtime's"
committed_output "$WORK/kafka.txt"
target/release/vigil-pipeline --input "$DATA" >"$WORK/embedded.txt"
echo
scripts/lib/compare-outputs.py "$WORK/kafka.txt" "$WORK/embedded.txt"
