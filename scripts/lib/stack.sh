# shellcheck shell=bash
# Sourced by the scripts that run on a local stack of their own (bench-kafka.sh,
# bench-kstreams.sh, bench-state.sh, chaos.sh, fuzz.sh).

# Starts the local stack kept under $VIGIL_STACK_STATE and exports its env
# (VIGIL_BOOTSTRAP_SERVERS, VIGIL_SCHEMA_REGISTRY_URL).
stack_up() {
  scripts/local-stack.sh start >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$VIGIL_STACK_STATE/env"
  set +a
}

# For a trap on EXIT: kills the processes in PIDS (the sourcing script's array),
# then stops the stack.
stack_down_with_pids() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/local-stack.sh stop >/dev/null 2>&1 || true
}
