# shellcheck shell=bash
# The chaos suite's target `local` (scripts/chaos.sh): a local stack of its own and
# the six services as release binaries, one instance each. Defines the hooks the
# suite calls: chaos_up, chaos_down, inject, healthy, committed_since, ledger,
# restarts.

export VIGIL_STACK_STATE="$WORK/stack"
# shellcheck source=scripts/lib/stack.sh
. scripts/lib/stack.sh
KEYED=(join-enrich payment-anomalies device-router device-analytics)

stack_pid() { cat "$VIGIL_STACK_STATE/run/$1.pid"; }

chaos_up() {
  stack_up
  target/release/vigil provision >/dev/null
  for s in "${SERVICES[@]}"; do svc_start "$s"; done
  sleep 5
}

# KEEP_STACK=1 leaves the broker and registry running, for a post-mortem of their
# topics (`VIGIL_STACK_STATE=.cache/chaos-local/stack scripts/local-stack.sh stop` ends them).
chaos_down() {
  kill -CONT "$(stack_pid kafka 2>/dev/null)" "$(stack_pid registry 2>/dev/null)" 2>/dev/null || true
  svc_stop_all
  if [[ "${KEEP_STACK:-}" == 1 ]]; then
    log "the stack keeps running (KEEP_STACK=1): its env is $VIGIL_STACK_STATE/env"
  else
    scripts/local-stack.sh stop >/dev/null 2>&1 || true
  fi
}

# shellcheck disable=SC2034  # HIT is read by chaos.sh
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
