#!/usr/bin/env bash
# The compose cluster, tested as a user meets it: docker-compose.yml brought up with
# `docker compose` (under Podman where there is no Docker engine, from local images
# where no registry is reachable: deploy/local-images/compose.override.yml changes
# only where images come from), three taskmanagers, then the checks of
# services/jobmanager/tests/cluster.rs against the published ports.
#
#   scripts/compose-test.sh            everything, then `down -v`
#   KEEP_CLUSTER=1 scripts/compose-test.sh   leave the cluster running afterwards
#
# Artifacts (dashboard screenshots, container logs on failure): target/compose-test/.
set -euo pipefail
cd "$(dirname "$0")/.."

ART="$PWD/target/compose-test"
TASKMANAGERS=3
SOURCE_PARTITIONS=12 # orders, payments, device-events: runtime.partitions (4) each
log() { printf 'compose-test: %s\n' "$*" >&2; }
t0=$SECONDS

log "container host (Podman, Compose v2, healthcheck driver)"
eval "$(scripts/container-host.sh start)"
log "local base and stand-in images"
scripts/local-images.sh

files=(-f "$PWD/docker-compose.yml" -f "$PWD/deploy/local-images/compose.override.yml")
compose() { docker compose "${files[@]}" "$@"; }

log "static checks: compose file, Dockerfiles, Prometheus rules, Grafana dashboard"
docker compose -f "$PWD/docker-compose.yml" config -q
compose config -q
hadolint deploy/Dockerfile deploy/local-images/*/Dockerfile
promtool check rules deploy/prometheus/rules/vigil.yml
promtool test rules deploy/prometheus/tests/vigil_test.yml
python3 -m json.tool deploy/grafana/dashboards/vigil.json >/dev/null

log "building Vigil's image and the host's binaries"
compose build jobmanager
cargo build --workspace --bins --locked

rm -rf "$ART" && mkdir -p "$ART"
finish() {
  rc=$?
  if ((rc != 0)); then
    log "failed; container logs in $ART/logs.txt"
    compose logs --no-color --tail 300 >"$ART/logs.txt" 2>&1 || true
  fi
  if [[ -z "${KEEP_CLUSTER:-}" ]]; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  log "done in $((SECONDS - t0)) s"
  exit "$rc"
}
trap finish EXIT

compose down -v --remove-orphans >/dev/null 2>&1 || true
log "docker compose up -d --scale taskmanager=$TASKMANAGERS, the generator held back"
up_at_ms=$(date +%s%3N)
compose up -d --scale "taskmanager=$TASKMANAGERS" --scale generator=0

# The planted input comes only once the stages have judged their empty source
# partitions idle, as when a user produces a while after `up`: input that resumes
# after a pause must be judged as if it had come at once (docs/kafka.md, "Idleness
# taken back").
idle_partitions() {
  compose logs --no-color taskmanager 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' |
    { grep -o "partition idle: .* topic=$1 partition=[0-9]*" || true; } | sed 's/.*partition=//' | sort -u | wc -l
}
log "waiting until every source partition has been judged idle"
for ((i = 0; ; i++)); do
  idle=$(( $(idle_partitions orders) + $(idle_partitions payments) + $(idle_partitions device-events) ))
  ((idle >= SOURCE_PARTITIONS)) && break
  ((i < 120)) || { log "only $idle of $SOURCE_PARTITIONS source partitions judged idle after 120 s"; exit 1; }
  sleep 1
done
log "all $SOURCE_PARTITIONS judged idle after ${i} s; producing the planted dataset: docker compose up -d generator"
compose up -d --no-recreate generator

export VIGIL_CLUSTER_JOBMANAGER=http://127.0.0.1:8081
export VIGIL_CLUSTER_PROMETHEUS=http://127.0.0.1:9090
export VIGIL_BOOTSTRAP_SERVERS=127.0.0.1:9092
export VIGIL_SCHEMA_REGISTRY_URL=http://127.0.0.1:8085/apis/ccompat/v7
export VIGIL_CLUSTER_UP_AT_MS=$up_at_ms
export VIGIL_CLUSTER_TASKMANAGERS=$TASKMANAGERS
export VIGIL_CLUSTER_ARTIFACTS=$ART
# SIGKILL to one taskmanager (its id is its container's host name, the container id).
export VIGIL_CLUSTER_KILL_TASKMANAGER='docker kill {taskmanager}'
cargo test --locked -p vigil --test cluster -- --ignored --nocapture --test-threads 1
