# shellcheck shell=bash
# The chaos suite's target `local` (scripts/chaos.sh): a local stack of its own (one
# broker, or BROKERS of them) and the six services as release binaries, one instance
# each. Defines the hooks the suite calls: chaos_up, chaos_down, inject, healthy,
# committed_since, ledger, restarts, and restore (after a fault's recovery: a killed
# broker started again, every partition back in sync).

export VIGIL_STACK_STATE="$WORK/stack"
export VIGIL_BROKERS="${BROKERS:-1}"
# shellcheck source=scripts/lib/stack.sh
. scripts/lib/stack.sh
KEYED=(join-enrich payment-anomalies device-router device-analytics)
INPUTS=(orders payments device-events)

stack_pid() { cat "$VIGIL_STACK_STATE/run/$1.pid"; }

# scripts/local-stack.sh's node commands and look-ups, their messages in the suite's logs.
stack() { scripts/local-stack.sh "$@" 2>>"$LOGS/stack.log"; }

chaos_up() {
  stack_up
  # On three brokers, `vigil provision` gives every topic three replicas and
  # min.insync.replicas 2, as a production cluster has them.
  target/release/vigil provision >"$LOGS/provision.log"
  # The topics whose partitions' leaders the broker faults pick from.
  mapfile -t CHANGELOGS < <(sed -n 's/^topic \([^ ]*-changelog\): .*/\1/p' "$LOGS/provision.log")
  PARTITIONS=$(sed -n 's/^topic orders: created (\([0-9]*\) partitions.*/\1/p' "$LOGS/provision.log")
  for s in "${SERVICES[@]}"; do svc_start "$s"; done
  sleep 5
}

# KEEP_STACK=1 leaves the broker and registry running, for a post-mortem of their
# topics (`VIGIL_STACK_STATE=.cache/chaos-local/stack scripts/local-stack.sh stop` ends them).
chaos_down() {
  local f
  for f in "$VIGIL_STACK_STATE"/run/kafka*.pid; do kill -CONT "$(cat "$f" 2>/dev/null)" 2>/dev/null || true; done
  kill -CONT "$(stack_pid registry 2>/dev/null)" 2>/dev/null || true
  svc_stop_all
  if [[ "${KEEP_STACK:-}" == 1 ]]; then
    log "the stack keeps running (KEEP_STACK=1): its env is $VIGIL_STACK_STATE/env"
  else
    scripts/local-stack.sh stop >/dev/null 2>&1 || true
  fi
}

# A broker node killed by a fault, to start again once the stages have recovered
# without it (restore), and what the fault chose, for the log.
DOWN=""

# Kills broker node $1 (SIGKILL), chosen as $2 (what it was: a leader, a coordinator).
kill_node() {
  [[ "$1" =~ ^[0-9]+$ && "$1" -ge 1 ]] || { log "no node to kill for $2 (got '$1')"; return 0; }
  log "  node $1 killed: $2"
  stack node-kill "$1"
  DOWN="$1"
}

# The transactional id a running instance logged as it started (its last start).
transactional_id() {
  sed 's/\x1b\[[0-9;]*m//g' "$LOGS/$1-0.log" | sed -n 's/.*transactional_id=\([^ ]*\).*/\1/p' | tail -n 1
}

# Waits (up to 300 s) until no partition is under-replicated; prints the seconds.
in_sync() {
  local t0=$SECONDS
  until [[ "$(stack under-replicated)" == 0 ]]; do
    ((SECONDS - t0 < 300)) || { log "partitions still under-replicated after 300 s"; break; }
    sleep 1
  done
  echo $((SECONDS - t0))
}

# After a fault's recovery: its killed node started again on its data, then every
# partition back in sync; prints the seconds that took (empty when the fault left
# every node up and in sync).
restore() {
  ((VIGIL_BROKERS > 1)) || return 0
  local t0=$SECONDS
  if [[ -n "$DOWN" ]]; then
    stack node-start "$DOWN" >/dev/null
    DOWN=""
  fi
  in_sync >/dev/null
  echo $((SECONDS - t0))
}

# shellcheck disable=SC2034  # HIT is read by chaos.sh
# One fault; HIT is set to the instances that must commit again to count as
# recovered. (Not in a subshell: it starts instances this shell keeps track of.)
inject() {
  local s t p n id
  case "$1" in
    leader-kill)
      t=${INPUTS[RANDOM % ${#INPUTS[@]}]} p=$((RANDOM % PARTITIONS))
      kill_node "$(stack leader "$t" "$p")" "the leader of $t-$p"; HIT=("${SERVICES[@]}") ;;
    changelog-leader-kill)
      t=${CHANGELOGS[RANDOM % ${#CHANGELOGS[@]}]} p=$((RANDOM % PARTITIONS))
      kill_node "$(stack leader "$t" "$p")" "the leader of $t-$p"; HIT=("${SERVICES[@]}") ;;
    txn-coordinator-kill)
      s=${SERVICES[RANDOM % ${#SERVICES[@]}]}
      id=$(transactional_id "$s")
      kill_node "$(stack txn-coordinator "$id")" "the transaction coordinator of $id"; HIT=("${SERVICES[@]}") ;;
    group-coordinator-kill)
      s=${SERVICES[RANDOM % ${#SERVICES[@]}]}
      kill_node "$(stack group-coordinator "vigil-$s")" "the group coordinator of vigil-$s"; HIT=("${SERVICES[@]}") ;;
    rolling-restart)
      # Each node in turn stopped (SIGTERM) and started again, the next one only once
      # every partition is back in sync, as an upgrade goes.
      for ((n = 1; n <= VIGIL_BROKERS; n++)); do
        stack node-restart "$n" >/dev/null
        in_sync >/dev/null
      done
      HIT=("${SERVICES[@]}") ;;
    node-freeze)
      # Past the broker's session with the controller (9 s), the groups' sessions and
      # the transaction timeout (10 s).
      n=$((1 + RANDOM % VIGIL_BROKERS))
      log "  node $n frozen for 20 s"
      stack node-freeze "$n"; sleep 20; stack node-thaw "$n"; HIT=("${SERVICES[@]}") ;;
    node-wipe)
      n=$((1 + RANDOM % VIGIL_BROKERS))
      log "  node $n wiped"
      stack node-wipe "$n" >/dev/null; HIT=("${SERVICES[@]}") ;;
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

# Every running instance answers ok on /healthz.
healthy() {
  local key
  for key in "${!PIDS[@]}"; do [[ "$(svc_health "$key")" == 200 ]] || return 1; done
}

# Each of the given instances has committed after $1 (unix seconds).
committed_since() {
  local since="$1" key
  shift
  for key in "$@"; do
    (($(svc_metric "$key" vigil_last_commit_timestamp_seconds) >= since)) || return 1
  done
}

# Why recovery is late: each instance's /healthz answer and its last commit.
stall_report() {
  local key
  for key in "${!PIDS[@]}"; do
    printf 'chaos:   %s: last commit %s s after the fault; /healthz: %s\n' "$key" \
      "$(($(svc_metric "$key" vigil_last_commit_timestamp_seconds) - $1))" \
      "$(curl -s --max-time 5 "127.0.0.1:${PORTS[$key]}/healthz" 2>/dev/null | tr '\n' ' ' || echo 'no answer')"
  done
}

# A stage's committed ledger ($2: read, on_time, late, dead_letters), summed over
# its running instances.
ledger() {
  local key sum=0
  for key in "${!PIDS[@]}"; do
    [[ "${key%%/*}" == "$1" ]] && sum=$((sum + $(svc_metric "$key" vigil_member_ledger_records "outcome=\"$2\"")))
  done
  echo "$sum"
}

# Stage members restarted in-process after a fault, over the running instances.
restarts() {
  local key sum=0
  for key in "${!PIDS[@]}"; do sum=$((sum + $(svc_metric "$key" vigil_member_restarts_total))); done
  echo "$sum"
}
