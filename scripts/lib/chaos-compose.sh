# shellcheck shell=bash
# The chaos suite's target `compose` (scripts/chaos.sh): the cluster of
# docker-compose.yml (kafka, schema-registry, jobmanager, $TASKMANAGERS taskmanagers,
# prometheus; not the demo generator), fed from this host through its published
# ports. Faults hit containers: a taskmanager killed or frozen, the broker restarted,
# killed or frozen, the registry frozen, taskmanagers added and removed. Recovery and
# the books are read from the jobmanager's REST API. Defines the hooks the suite
# calls: chaos_up, chaos_down, inject, healthy, committed_since, ledger, restarts.
#
# Env: TASKMANAGERS (2); OFFICIAL_IMAGES=1 on a Docker host that can pull the
# official images (otherwise Podman and local stand-ins, as scripts/compose-test.sh).

TASKMANAGERS="${TASKMANAGERS:-2}"
files=(-f "$PWD/docker-compose.yml")
compose() { docker compose "${files[@]}" "$@"; }
jm() { curl -sf --max-time 5 "http://127.0.0.1:8081$1"; }

chaos_up() {
  if [[ -z "${OFFICIAL_IMAGES:-}" ]]; then
    eval "$(scripts/container-host.sh start)"
    scripts/local-images.sh
    files+=(-f "$PWD/deploy/local-images/compose.override.yml")
  fi
  compose build jobmanager
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  compose up -d --scale "taskmanager=$TASKMANAGERS" kafka schema-registry jobmanager taskmanager prometheus
  # Containers by id: Compose's own pause/unpause miss paused containers under Podman.
  KAFKA=$(compose ps -q kafka) REGISTRY=$(compose ps -q schema-registry)
  export VIGIL_BOOTSTRAP_SERVERS=127.0.0.1:9092 VIGIL_SCHEMA_REGISTRY_URL=http://127.0.0.1:8085/apis/ccompat/v7
  local t0=$SECONDS
  until JOB=$(jm /jobs | jq -er '.jobs[0].id') && healthy; do
    ((SECONDS - t0 < 300)) || { log "the cluster did not come up"; exit 1; }
    sleep 2
  done
}

chaos_down() {
  docker unpause "${KAFKA:-}" "${REGISTRY:-}" >/dev/null 2>&1 || true
  compose logs --no-color --tail 500 >"$LOGS/cluster.log" 2>&1 || true
  [[ -n "${KEEP_CLUSTER:-}" ]] || compose down -v --remove-orphans >/dev/null 2>&1 || true
}

taskmanager() { # a running taskmanager container, at random
  local all
  mapfile -t all < <(compose ps -q --status running taskmanager)
  echo "${all[RANDOM % ${#all[@]}]}"
}

crash() { docker kill -s KILL "$1" && docker start "$1"; }
freeze() { docker pause "$1" && sleep "$2" && docker unpause "$1"; }

# One fault. HIT (read by chaos.sh) names what must commit again: here every stage.
# shellcheck disable=SC2034
inject() {
  HIT=(all)
  case "$1" in
    kill9) crash "$(taskmanager)" ;;
    pause) freeze "$(taskmanager)" $((3 + RANDOM % 12)) ;;
    broker-restart) docker restart "$KAFKA" ;;
    broker-crash) crash "$KAFKA" ;;
    broker-pause) freeze "$KAFKA" 14 ;;
    registry-outage)
      docker pause "$REGISTRY"
      crash "$(taskmanager)"
      sleep 20
      docker unpause "$REGISTRY" ;;
    rebalance)
      for _ in 1 2; do
        compose up -d --no-recreate --scale "taskmanager=$((TASKMANAGERS + 2))" taskmanager
        sleep 8
        compose up -d --no-recreate --scale "taskmanager=$TASKMANAGERS" taskmanager
      done ;;
  esac >>"$LOGS/compose.log" 2>&1
}

# Every stage runs with no member in error, and the jobmanager hears from as many
# taskmanagers as there are running containers.
healthy() {
  local running
  running=$(compose ps -q --status running taskmanager | wc -l)
  jm /taskmanagers | jq -e --argjson n "$running" '[.taskmanagers[] | select(.vigil.state == "alive")] | length == $n' >/dev/null &&
    jm "/jobs/$JOB" | jq -e '[.vertices[] | .status == "RUNNING" and all(.vigil.members[]; .error == null)] | all' >/dev/null
}

# Every stage has committed after $1 (unix seconds), unless no stage was named.
committed_since() {
  (($# > 1)) || return 0
  jm "/jobs/$JOB" | jq -e --argjson t "$(($1 * 1000))" '[.vertices[] | (.vigil.last_commit_ms // 0) >= $t] | all' >/dev/null
}

# A stage's committed ledger ($2: read, on_time, late, dead_letters), as the
# jobmanager sums it over the stage's tasks.
ledger() {
  jm "/jobs/$JOB" | jq -r --arg s "$1" --arg o "$2" '.vertices[] | select(.name == $s) | .vigil.ledger[$o]'
}

# Stage members restarted in-process after a fault, as Prometheus last scraped them.
restarts() {
  curl -sf --max-time 5 http://127.0.0.1:9090/api/v1/query --data-urlencode 'query=sum(vigil_member_restarts_total)' |
    jq -r '.data.result[0].value[1] // "0"'
}
