#!/usr/bin/env bash
# The chaos suite: Vigil's stages on a Kafka of their own, a planted dataset produced
# at a steady rate, and a schedule of faults injected while it flows. Then the
# committed output is compared with the embedded runtime on the same input, record
# by record.
#
#   scripts/chaos.sh                        FAULTS=24 (a few minutes)
#   FAULTS=60 SEED=3 scripts/chaos.sh
#   TARGET=compose scripts/chaos.sh         against the docker-compose.yml cluster
#   BROKERS=3 FAULTS=50 scripts/chaos.sh    three brokers, with the kinds of broker faults below
#
# Targets (scripts/lib/chaos-$TARGET.sh):
#   local    the six services as release binaries, one instance each, on a local
#            stack (scripts/local-stack.sh) of BROKERS nodes (1)
#   compose  the compose cluster: kafka, schema-registry, jobmanager, taskmanagers
#
# Fault kinds, taken in a shuffled round (SEED):
#   kill9          a random service (compose: taskmanager) killed with SIGKILL, started again
#   pause          a random service (compose: taskmanager) frozen for 3-14 s, then resumed
#   broker-restart the broker stopped (SIGTERM) and started again on its data
#   broker-crash   the broker killed (SIGKILL) and started again on its data
#   broker-pause   the broker frozen for 14 s (past the 10 s transaction timeout)
#   registry-outage the schema registry frozen for 20 s (Apicurio keeps its schemas in
#                  memory, so a restart would renumber them), while a service
#                  (compose: taskmanager) restarts and has to fetch its schemas
#   rebalance      local: a keyed stage grows to three instances and back to one;
#                  compose: two taskmanagers join and leave; twice
# On three brokers (BROKERS=3, local; added to the kinds by default), the node that:
#   leader-kill            leads a random input partition, killed (SIGKILL)
#   changelog-leader-kill  leads a random changelog partition, killed
#   txn-coordinator-kill   coordinates a random stage member's transactions, killed
#   group-coordinator-kill coordinates a random stage's consumer group, killed
#   rolling-restart        every node in turn, stopped and started, the next once all
#                          partitions are back in sync
#   node-freeze            a random node, frozen for 20 s (past the session timeouts)
#   node-wipe              a random node, killed, its log directory deleted, started
#                          again: it re-replicates every partition it had
# (the broker-* kinds act on node 1.) A killed node starts again once the stages have
# recovered without it; the next fault waits until every partition is back in sync.
#
# After each fault the suite waits for recovery: every stage healthy and, while the
# input flows, every stage hit has committed again. It prints the faults by kind, the
# recovery times, the comparison (records verified, lost, duplicated) and the books
# (each stage's committed ledger balances; the input stages read every input record).
#
# Env: TARGET (local), FAULTS (24), SEED (1), SCALE (planted dataset, thousands of
#      events; 40), FAULT_GAP seconds between faults (3), KINDS (a subset of the
#      kinds above), KEYS (the generator's --keys: join, none or other; join),
#      BROKERS (local: 1 or 3), FAULT_SECONDS (the time a fault takes, for the input's
#      rate: 12, or 50 on three brokers, whose nodes take longer to come back); the
#      target's own (see its file).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${TARGET:-local}"
FAULTS="${FAULTS:-24}"
SEED="${SEED:-1}"
SCALE="${SCALE:-40}"
FAULT_GAP="${FAULT_GAP:-3}"
WORK="$PWD/.cache/chaos-$TARGET"
DATA="$WORK/planted-$SCALE"
LOGS="$WORK/logs"
BROKERS="${BROKERS:-1}"
BROKER_KINDS="leader-kill changelog-leader-kill txn-coordinator-kill group-coordinator-kill rolling-restart node-freeze node-wipe"
KINDS_DEFAULT="kill9 pause broker-restart broker-crash broker-pause registry-outage rebalance"
((BROKERS < 3)) || KINDS_DEFAULT="$KINDS_DEFAULT $BROKER_KINDS"
read -r -a KINDS <<<"${KINDS:-$KINDS_DEFAULT}"
FAULT_SECONDS="${FAULT_SECONDS:-$((BROKERS < 3 ? 12 : 50))}"
log() { printf 'chaos: %s\n' "$*" >&2; }

cargo build --release --workspace --bins --locked
rm -rf "$LOGS" && mkdir -p "$WORK" "$LOGS"
[[ -s "$DATA/orders.ndjson" ]] || target/release/vigil generate --out "$DATA" --scale "$SCALE"
records=$(cat "$DATA"/*.ndjson | wc -l)

# shellcheck source=scripts/lib/services.sh
. scripts/lib/services.sh
[[ -f "scripts/lib/chaos-$TARGET.sh" ]] || { log "TARGET=$TARGET: no scripts/lib/chaos-$TARGET.sh"; exit 2; }
# shellcheck source=scripts/lib/chaos-local.sh
. "scripts/lib/chaos-$TARGET.sh"
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  kill "${GENERATOR:-}" 2>/dev/null || true
  chaos_down
}
trap cleanup EXIT
chaos_up

# The input flows for about as long as the schedule takes (~FAULT_SECONDS a fault).
rate=$((records / (FAULTS * FAULT_SECONDS) + 1))
log "producing $records records at $rate records/s while $FAULTS faults are injected"
target/release/vigil generate --kafka --input "$DATA" --rate "$rate" --keys "${KEYS:-join}" 2>"$LOGS/generator.log" &
GENERATOR=$!
# Faults start once the generator has its schemas (it fetches each one on first use):
# a producer stalled by a registry outage would make the input itself go idle.
sleep 5

# Waits until the stages are healthy and the given ones (the target's names) have
# committed after $1 (unix seconds); prints the seconds it took.
recover() {
  local since="$1" t0=$SECONDS
  shift
  while ((SECONDS - t0 < 300)); do
    healthy && committed_since "$since" "$@" && { echo $((SECONDS - t0)); return; }
    sleep 1
  done
  log "no recovery within 300 s"
  ! declare -F stall_report >/dev/null || stall_report "$since" >&2
  echo 300
}

RANDOM=$SEED
declare -A COUNT RECOVERY REJOIN
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
  log "  recovered in $took s"
  # The target's own repair after recovery (local, several brokers: a killed node
  # started again, every partition back in sync), timed apart.
  if declare -F restore >/dev/null; then
    back=$(restore)
    [[ -z "$back" ]] || { REJOIN[$kind]="${REJOIN[$kind]:-} $back"; log "  brokers back in sync in $back s"; }
  fi
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

# min / median / max of the numbers in $1.
spread() {
  [[ -n "${1// /}" ]] || { echo -; return; }
  tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -n | awk '{a[NR]=$1} END {print a[1] " / " a[int((NR+1)/2)] " / " a[NR]}'
}
echo
echo "| fault | injected | recovery s (min / median / max) | brokers back in sync s (min / median / max) |"
echo "|---|---|---|---|"
total=0
for kind in "${KINDS[@]}"; do
  n=${COUNT[$kind]:-0}
  total=$((total + n))
  ((n > 0)) || { echo "| $kind | 0 | - | - |"; continue; }
  echo "| $kind | $n | $(spread "${RECOVERY[$kind]}") | $(spread "${REJOIN[$kind]:-}") |"
done
echo "| all | $total | | |"
echo
echo "stage members restarted in-process after a fault (running instances): $(restarts)"
verdict=0
scripts/lib/compare-outputs.py "$WORK/kafka.txt" "$WORK/embedded.txt" || verdict=1

# The books: each stage's committed ledger (summed over its instances) must balance,
# and the stages that read the input topics must account for every input record as
# the embedded runtime does.
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
# A run that failed keeps its broker (or cluster) running, for a post-mortem of its
# topics: the input as the broker holds it tells a producer's duplicate from a stage's.
if ((verdict != 0)) && [[ -z "${KEEP_STACK:-}${KEEP_CLUSTER:-}" ]]; then
  KEEP_STACK=1 KEEP_CLUSTER=1
fi
exit "$verdict"
