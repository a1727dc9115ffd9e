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
log "docker compose up -d --scale taskmanager=$TASKMANAGERS"
up_at_ms=$(date +%s%3N)
compose up -d --scale "taskmanager=$TASKMANAGERS"

export VIGIL_CLUSTER_JOBMANAGER=http://127.0.0.1:8081
export VIGIL_CLUSTER_PROMETHEUS=http://127.0.0.1:9090
export VIGIL_BOOTSTRAP_SERVERS=127.0.0.1:9092
export VIGIL_SCHEMA_REGISTRY_URL=http://127.0.0.1:8085/apis/ccompat/v7
export VIGIL_CLUSTER_UP_AT_MS=$up_at_ms
export VIGIL_CLUSTER_TASKMANAGERS=$TASKMANAGERS
export VIGIL_CLUSTER_ARTIFACTS=$ART
# SIGKILL to one taskmanager (its id is its container's host name, the container id).
export VIGIL_CLUSTER_KILL_TASKMANAGER='docker kill {taskmanager}'
cargo test --locked -p vigil-jobmanager --test cluster -- --ignored --nocapture --test-threads 1
