# shellcheck shell=bash
# Sourced by the scripts that run on a local stack of their own (bench-state.sh,
# chaos.sh, fuzz.sh).

# Starts the local stack kept under $VIGIL_STACK_STATE and exports its env
# (VIGIL_BOOTSTRAP_SERVERS, VIGIL_SCHEMA_REGISTRY_URL).
stack_up() {
  scripts/local-stack.sh start >/dev/null
  set -a
  # shellcheck disable=SC1091
  . "$VIGIL_STACK_STATE/env"
  set +a
}
