#!/usr/bin/env bash
# The chaos suite: the six services (release builds, one instance each) on a local
# stack of their own, a planted dataset produced at a steady rate, and a schedule of
# faults injected while it flows. Then the committed output is compared with the
# embedded runtime on the same input, record by record.
#
#   scripts/chaos.sh                 FAULTS=24 (a few minutes)
#   FAULTS=60 SEED=3 scripts/chaos.sh
#
# Fault kinds, taken in a shuffled round (SEED):
#   kill9          a random service killed with SIGKILL, started again
#   pause          a random service stopped (SIGSTOP) for 3-14 s, then SIGCONT
#   broker-restart the broker stopped (SIGTERM) and started again on its data
#   broker-crash   the broker killed (SIGKILL) and started again on its data
#   broker-pause   the broker stopped for 14 s (past the 10 s transaction timeout)
#   registry-outage the schema registry stopped for 20 s (SIGSTOP: Apicurio keeps its
#                  schemas in memory, so a restart would renumber them), while a
#                  service restarts and has to fetch its schemas
#   rebalance      a keyed stage grows to three instances and back to one, twice
#
# After each fault the suite waits for recovery: every service's /healthz says ok and
# every instance that was hit has committed again. It prints the faults by kind, the
# recovery times, the comparison (records verified, lost, duplicated) and the books
# (each stage's committed ledger balances; the input stages read every input record).
#
# Env: FAULTS (24), SEED (1), SCALE (planted dataset, thousands of events; 40),
#      FAULT_GAP seconds between faults (3), KINDS (a subset of the kinds above).
set -euo pipefail
cd "$(dirname "$0")/.."

FAULTS="${FAULTS:-24}"
SEED="${SEED:-1}"
SCALE="${SCALE:-40}"
FAULT_GAP="${FAULT_GAP:-3}"
WORK="$PWD/.cache/chaos"
DATA="$WORK/planted-$SCALE"
LOGS="$WORK/logs"
read -r -a KINDS <<<"${KINDS:-kill9 pause broker-restart broker-crash broker-pause registry-outage rebalance}"
KEYED=(join-enrich payment-anomalies device-router device-analytics)
log() { printf 'chaos: %s\n' "$*" >&2; }

cargo build --release --workspace --bins --locked
rm -rf "$LOGS" && mkdir -p "$WORK" "$LOGS"
[[ -s "$DATA/orders.ndjson" ]] || target/release/vigil-generator --out "$DATA" --scale "$SCALE"
records=$(cat "$DATA"/*.ndjson | wc -l)

export VIGIL_STACK_STATE="$WORK/stack"
# shellcheck source=scripts/lib/services.sh
. scripts/lib/services.sh
# shellcheck source=scripts/lib/stack.sh
. scripts/lib/stack.sh
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  kill -CONT "$(cat "$VIGIL_STACK_STATE/run/kafka.pid" 2>/dev/null)" "$(cat "$VIGIL_STACK_STATE/run/registry.pid" 2>/dev/null)" 2>/dev/null || true
  svc_stop_all
  scripts/local-stack.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
stack_up
stack_pid() { cat "$VIGIL_STACK_STATE/run/$1.pid"; }
target/release/vigil-admin provision >/dev/null
for s in "${SERVICES[@]}"; do svc_start "$s"; done
sleep 5

# The input flows for about as long as the schedule takes (~12 s a fault).
rate=$((records / (FAULTS * 12) + 1))
log "producing $records records at $rate records/s while $FAULTS faults are injected"
target/release/vigil-generator --kafka --input "$DATA" --rate "$rate" 2>"$LOGS/generator.log" &
GENERATOR=$!
# Faults start once the generator has its schemas (it fetches each one on first use):
# a producer stalled by a registry outage would make the input itself go idle.
sleep 5

# Waits until every running instance answers ok on /healthz and each of the given
# instances has committed after $since (unix seconds); prints the seconds it took.
recover() {
  local since="$1" t0=$SECONDS key ok
  shift
  while ((SECONDS - t0 < 300)); do
    ok=1
    for key in "${!PIDS[@]}"; do [[ "$(svc_health "$key")" == 200 ]] || ok=0; done
    for key in "$@"; do
      (($(svc_metric "$key" vigil_last_commit_timestamp_seconds) >= since)) || ok=0
    done
    ((ok)) && { echo $((SECONDS - t0)); return; }
    sleep 1
  done
  log "no recovery within 300 s"
  echo 300
}


# One fault; HIT is set to the instances that must commit again to count as
# recovered. (Not in a subshell: it starts instances this shell keeps track of.)
inject() {
  local s
  case "$1" in
    kill9)
      s=${SERVICES[RANDOM % ${#SERVICES[@]}]}
      kill -9 "${PIDS[$s]}"; wait "${PIDS[$s]}" 2>/dev/null || true
      svc_start "$s"; HIT=("$s") ;;
    pause)
      s=${SERVICES[RANDOM % ${#SERVICES[@]}]}
      kill -STOP "${PIDS[$s]}"; sleep $((3 + RANDOM % 12)); kill -CONT "${PIDS[$s]}"; HIT=("$s") ;;
    broker-restart) scripts/local-stack.sh restart-kafka >>"$LOGS/stack.log" 2>&1; HIT=("${SERVICES[@]}") ;;
    broker-crash) scripts/local-stack.sh restart-kafka crash >>"$LOGS/stack.log" 2>&1; HIT=("${SERVICES[@]}") ;;
    broker-pause)
      kill -STOP "$(stack_pid kafka)"; sleep 14; kill -CONT "$(stack_pid kafka)"; HIT=("${SERVICES[@]}") ;;
    registry-outage)
      s=${SERVICES[RANDOM % ${#SERVICES[@]}]}
      kill -STOP "$(stack_pid registry)"
      kill -9 "${PIDS[$s]}"; wait "${PIDS[$s]}" 2>/dev/null || true
      svc_start "$s"
      sleep 20
      kill -CONT "$(stack_pid registry)"; HIT=("$s") ;;
    rebalance)
      s=${KEYED[RANDOM % ${#KEYED[@]}]}
      for _ in 1 2; do
        svc_start "$s" 1; svc_start "$s" 2
        sleep 8
        kill -TERM "${PIDS[$s/1]}"; kill -9 "${PIDS[$s/2]}"
        wait "${PIDS[$s/1]}" "${PIDS[$s/2]}" 2>/dev/null || true
        unset "PIDS[$s/1]" "PIDS[$s/2]"
      done
      HIT=("$s") ;;
  esac
}

RANDOM=$SEED
declare -A COUNT RECOVERY
order=()
for ((i = 0; i < FAULTS; i++)); do
  if ((i % ${#KINDS[@]} == 0)); then # a new round, shuffled
    mapfile -t order < <(printf '%s\n' "${KINDS[@]}" | awk -v seed="$((SEED + i))" 'BEGIN {srand(seed)} {print rand() "\t" $0}' | sort | cut -f2)
  fi
  kind=${order[i % ${#KINDS[@]}]}
  log "fault $((i + 1))/$FAULTS: $kind"
  inject "$kind"
  since=$(date +%s)
  # Once the input has ended nothing commits any more: then only the health counts.
  kill -0 "$GENERATOR" 2>/dev/null || HIT=()
  took=$(recover "$since" "${HIT[@]}")
  COUNT[$kind]=$((${COUNT[$kind]:-0} + 1))
  RECOVERY[$kind]="${RECOVERY[$kind]:-} $took"
  sleep "$FAULT_GAP"
done

log "faults done; waiting for the generator to finish"
wait "$GENERATOR" || { log "the generator failed (see $LOGS/generator.log)"; exit 1; }
log "waiting for the output to settle"
committed_output "$WORK/kafka.txt"
prev=-1
while (($(wc -l <"$WORK/kafka.txt") != prev)); do
  prev=$(wc -l <"$WORK/kafka.txt")
  sleep 10
  committed_output "$WORK/kafka.txt"
done
target/release/vigil-pipeline --input "$DATA" >"$WORK/embedded.txt" 2>"$LOGS/embedded.log"

echo
echo "| fault | injected | recovery s (min / median / max) |"
echo "|---|---|---|"
total=0
for kind in "${KINDS[@]}"; do
  n=${COUNT[$kind]:-0}
  total=$((total + n))
  ((n > 0)) || { echo "| $kind | 0 | - |"; continue; }
  read -r lo mid hi < <(tr ' ' '\n' <<<"${RECOVERY[$kind]}" | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[1], a[int((NR+1)/2)], a[NR]}')
  echo "| $kind | $n | $lo / $mid / $hi |"
done
echo "| all | $total | |"
echo
restarts=0
for key in "${!PIDS[@]}"; do restarts=$((restarts + $(svc_metric "$key" vigil_member_restarts_total))); done
echo "stage members restarted in-process after a fault (running instances): $restarts"
verdict=0
scripts/lib/compare-outputs.py "$WORK/kafka.txt" "$WORK/embedded.txt" || verdict=1

# The books: each stage's committed ledger (summed over its instances) must balance,
# and the stages that read the input topics must account for every input record as
# the embedded runtime does.
ledger() { # stage outcome
  local key sum=0
  for key in "${!PIDS[@]}"; do
    [[ "${key%%/*}" == "$1" ]] && sum=$((sum + $(svc_metric "$key" vigil_member_ledger_records "outcome=\"$2\"")))
  done
  echo "$sum"
}
echo
echo "| stage | read | on time | late | dead letters | balanced |"
echo "|---|---|---|---|---|---|"
declare -A SOURCE
for s in "${SERVICES[@]}"; do
  read -r r o l d < <(echo "$(ledger "$s" read) $(ledger "$s" on_time) $(ledger "$s" late) $(ledger "$s" dead_letters)")
  ok=yes
  ((r == o + l + d)) || { ok=NO; verdict=1; }
  echo "| $s | $r | $o | $l | $d | $ok |"
  if [[ "$s" == join-enrich || "$s" == device-router ]]; then
    SOURCE[read]=$((${SOURCE[read]:-0} + r)) SOURCE[dead]=$((${SOURCE[dead]:-0} + d))
  fi
done
read -r e_read e_dead < <(sed -n 's/.*ledger: read \([0-9]*\) = .* dead letters \([0-9]*\):.*/\1 \2/p' "$LOGS/embedded.log")
if [[ "${SOURCE[read]} ${SOURCE[dead]}" == "$e_read $e_dead" ]]; then
  echo "input accounted for: $e_read records read, $e_dead dead letters, as in the embedded run"
else
  echo "INPUT NOT ACCOUNTED FOR: the input stages read ${SOURCE[read]} (dead letters ${SOURCE[dead]}), the embedded run $e_read ($e_dead)"
  verdict=1
fi
exit "$verdict"
