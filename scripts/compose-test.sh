#!/usr/bin/env bash
# The compose cluster, tested as a user meets it: docker-compose.yml brought up with
# `docker compose` (under Podman where there is no Docker engine, from local images
# where no registry is reachable: deploy/local-images/compose.override.yml changes
# only where images come from), three taskmanagers, then the checks of
# services/jobmanager/tests/cluster.rs against the published ports.
#
#   scripts/compose-test.sh            everything, then `down -v`
#   KEEP_CLUSTER=1 scripts/compose-test.sh   leave the cluster running afterwards
#   VIGIL_COMPOSE_BROKERS=3 scripts/compose-test.sh   the same test on three brokers
#
# VIGIL_COMPOSE_BROKERS=3 adds docker-compose.brokers.yml (a three-node KRaft cluster,
# replication 3, min ISR 2), reaches the cluster through this machine's non-loopback
# address as another machine would (VIGIL_BIND and VIGIL_ADVERTISED_HOST, unless set),
# and while the planted dataset flows kills (SIGKILL) the broker that leads
# payments/0, as `kafka-topics.sh --describe` inside a broker names it, then starts it
# again; the test's checks must pass all the same, and the broker must be back in
# every ISR. "1 3" runs both forms, one after the other (docs/compose-brokers.md).
#
# Artifacts (dashboard screenshots, container logs on failure, the leader kill's
# record): target/compose-test/, target/compose-test-3-brokers/.
set -euo pipefail
cd "$(dirname "$0")/.."

FORMS="${VIGIL_COMPOSE_BROKERS:-1}"
for form in $FORMS; do
  [[ "$form" == 1 || "$form" == 3 ]] || { printf 'compose-test: VIGIL_COMPOSE_BROKERS: 1, 3 or "1 3", not %s\n' "$FORMS" >&2; exit 2; }
done
TASKMANAGERS=3
SOURCE_PARTITIONS=12 # orders, payments, device-events: runtime.partitions (4) each
log() { printf 'compose-test: %s\n' "$*" >&2; }
t0=$SECONDS

log "container host (Podman, Compose v2, healthcheck driver)"
eval "$(scripts/container-host.sh start)"
log "local base and stand-in images"
scripts/local-images.sh

one=(-f "$PWD/docker-compose.yml")
three=(-f "$PWD/docker-compose.yml" -f "$PWD/docker-compose.brokers.yml")
local_one=(-f "$PWD/deploy/local-images/compose.override.yml")
local_three=("${local_one[@]}" -f "$PWD/deploy/local-images/compose.brokers.yml")
files=("${one[@]}" "${local_one[@]}")
compose() { docker compose "${files[@]}" "$@"; }

log "static checks: compose files (one and three brokers), Dockerfiles, Prometheus and Alertmanager, Grafana dashboard"
docker compose "${one[@]}" config -q
docker compose "${three[@]}" config -q
docker compose "${one[@]}" "${local_one[@]}" config -q
docker compose "${three[@]}" "${local_three[@]}" config -q
hadolint deploy/Dockerfile deploy/local-images/*/Dockerfile
promtool check rules deploy/prometheus/rules/vigil.yml
promtool test rules deploy/prometheus/tests/vigil_test.yml
amtool check-config deploy/alertmanager/alertmanager.yml
python3 -m json.tool deploy/grafana/dashboards/vigil.json >/dev/null

log "building Vigil's image and the host's binaries"
compose build jobmanager
cargo build --workspace --bins --locked

idle_partitions() {
  compose logs --no-color taskmanager 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' |
    { grep -o "partition idle: .* topic=$1 partition=[0-9]*" || true; } | sed 's/.*partition=//' | sort -u | wc -l
}
# The cluster of one form, up, tested, and down (unless KEEP_CLUSTER is set and it is
# the last form).
FORM="" ART="" KILLER=""
finish() {
  rc=$?
  if [[ -n "$KILLER" ]]; then kill "$KILLER" 2>/dev/null || true; fi
  if ((rc != 0)) && [[ -n "$FORM" ]]; then
    log "failed; container logs in $ART/logs.txt"
    compose logs --no-color --tail 300 >"$ART/logs.txt" 2>&1 || true
  fi
  if [[ -n "$FORM" && -z "${KEEP_CLUSTER:-}" ]]; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  log "done in $((SECONDS - t0)) s"
  exit "$rc"
}
trap finish EXIT

# This machine's first non-loopback IPv4 address, or nothing.
own_address() {
  { ip -4 -o addr show scope global 2>/dev/null || true; } | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

# The leader of a partition ($1 topic, $2 partition) as broker service $3 sees it
# (Kafka's own tool, inside the broker's container): a node id, -1 or nothing.
leader_of() {
  compose exec -T "$3" /opt/kafka/bin/kafka-topics.sh --bootstrap-server localhost:19092 \
    --describe --topic "$1" 2>/dev/null |
    awk -v p="$2" '{ for (i = 1; i < NF; i++) if ($i == "Partition:" && $(i + 1) == p)
      for (j = i; j < NF; j++) if ($j == "Leader:") { print $(j + 1); exit } }'
}
broker_service() { if (($1 == 1)); then echo kafka; else echo "kafka-$1"; fi; }
join_enrich_read() {
  local job
  job=$(curl -sf --max-time 5 "$HTTP/jobs" | jq -er '.jobs[0].id') &&
    curl -sf --max-time 5 "$HTTP/jobs/$job" | jq -er '.vertices[] | select(.name == "join-enrich") | .vigil.ledger.read'
}

# Three brokers: once records flow through join-enrich, SIGKILL the broker leading
# payments/0 ($1, its node id), keep it down $BROKER_DOWN_SECS, start it again, and
# wait until every partition has its three replicas in sync again. Its record goes to
# $ART/broker-kill.txt; a failure is its exit status.
BROKER_DOWN_SECS=20
kill_input_leader() {
  local node="$1" svc cid survivor t_kill now n_read="" new="" out under="?"
  svc=$(broker_service "$node")
  cid=$(compose ps -q "$svc")
  survivor=$(broker_service $((node % 3 + 1)))
  for ((i = 0; ; i++)); do
    n_read=$(join_enrich_read || true)
    [[ -n "$n_read" && "$n_read" != 0 ]] && break
    ((i < 240)) || { log "broker kill: no record through join-enrich after 240 s"; return 1; }
    sleep 0.5
  done
  log "broker kill: $n_read records through join-enrich, generator $(docker inspect -f '{{.State.Status}}' \
    "$(compose ps -aq generator)" 2>/dev/null); SIGKILL to $svc (node $node), leader of payments/0"
  t_kill=$SECONDS
  docker kill -s KILL "$cid" >/dev/null
  for ((i = 0; ; i++)); do
    new=$(leader_of payments 0 "$survivor" || true)
    [[ -n "$new" && "$new" != -1 && "$new" != "$node" ]] && break
    ((SECONDS - t_kill < 120)) || { log "broker kill: payments/0 has no new leader after 120 s ($new)"; return 1; }
    sleep 1
  done
  log "broker kill: payments/0 led by node $new, seen $((SECONDS - t_kill)) s after the kill"
  now=$((SECONDS - t_kill))
  ((now >= BROKER_DOWN_SECS)) || sleep $((BROKER_DOWN_SECS - now))
  docker start "$cid" >/dev/null
  log "broker kill: $svc started again, $((SECONDS - t_kill)) s after the kill"
  for ((i = 0; ; i++)); do
    if out=$(compose exec -T "$survivor" /opt/kafka/bin/kafka-topics.sh --bootstrap-server localhost:19092 \
      --describe --under-replicated-partitions 2>/dev/null); then
      under=$(grep -c 'Partition:' <<<"$out" || true)
      [[ "$under" == 0 ]] && break
    fi
    ((SECONDS - t_kill < 300)) || { log "broker kill: $under partitions under-replicated 300 s after the kill"; return 1; }
    sleep 2
  done
  log "broker kill: every partition has its 3 replicas in sync again, $((SECONDS - t_kill)) s after the kill"
  compose exec -T "$survivor" /opt/kafka/bin/kafka-topics.sh --bootstrap-server localhost:19092 \
    --describe --topic payments 2>/dev/null | grep 'Partition:' || true
}

run_form() {
  FORM=$1
  local addr
  if ((FORM == 3)); then
    ART="$PWD/target/compose-test-3-brokers"
    files=("${three[@]}" "${local_three[@]}")
    # Reached as from another machine: through this machine's own address, which the
    # brokers advertise (the caller's VIGIL_BIND and VIGIL_ADVERTISED_HOST win).
    addr=$(own_address)
    export VIGIL_BIND="${VIGIL_BIND:-${addr:-127.0.0.1}}"
    export VIGIL_ADVERTISED_HOST="${VIGIL_ADVERTISED_HOST:-${addr:-localhost}}"
    KAFKA_HOST=$VIGIL_ADVERTISED_HOST
    BOOTSTRAP="$KAFKA_HOST:9092,$KAFKA_HOST:9094,$KAFKA_HOST:9095"
  else
    ART="$PWD/target/compose-test"
    files=("${one[@]}" "${local_one[@]}")
    KAFKA_HOST=${VIGIL_ADVERTISED_HOST:-127.0.0.1}
    BOOTSTRAP="$KAFKA_HOST:9092"
  fi
  local host=${VIGIL_BIND:-127.0.0.1}
  [[ "$host" != 0.0.0.0 ]] || host=127.0.0.1
  HTTP="http://$host:8081"
  local f0=$SECONDS
  rm -rf "$ART" && mkdir -p "$ART"

  compose down -v --remove-orphans >/dev/null 2>&1 || true
  log "$FORM broker(s): docker compose up -d --scale taskmanager=$TASKMANAGERS, the generator held back"
  if ((FORM == 3)); then log "host clients use Kafka at $BOOTSTRAP, the rest at $host"; fi
  up_at_ms=$(date +%s%3N)
  compose up -d --scale "taskmanager=$TASKMANAGERS" --scale generator=0

  # The planted input comes only once the stages have judged their empty source
  # partitions idle, as when a user produces a while after `up`: input that resumes
  # after a pause must be judged as if it had come at once (docs/kafka.md, "Idleness
  # taken back").
  log "waiting until every source partition has been judged idle"
  for ((i = 0; ; i++)); do
    idle=$(( $(idle_partitions orders) + $(idle_partitions payments) + $(idle_partitions device-events) ))
    ((idle >= SOURCE_PARTITIONS)) && break
    ((i < 120)) || { log "only $idle of $SOURCE_PARTITIONS source partitions judged idle after 120 s"; exit 1; }
    sleep 1
  done
  local node=""
  if ((FORM == 3)); then
    node=$(leader_of payments 0 kafka || true)
    [[ "$node" =~ ^[123]$ ]] || { log "no leader of payments/0 from kafka-topics.sh ($node)"; exit 1; }
    compose exec -T kafka /opt/kafka/bin/kafka-topics.sh --bootstrap-server localhost:19092 \
      --describe --topic payments >"$ART/payments-before.txt" 2>/dev/null || true
    log "payments/0 is led by node $node: $(head -n1 "$ART/payments-before.txt")"
  fi
  log "all $SOURCE_PARTITIONS judged idle after ${i} s; producing the planted dataset: docker compose up -d generator"
  compose up -d --no-recreate generator
  if ((FORM == 3)); then
    kill_input_leader "$node" > >(tee "$ART/broker-kill.txt" >&2) 2>&1 &
    KILLER=$!
  fi

  export VIGIL_CLUSTER_JOBMANAGER=$HTTP
  export VIGIL_CLUSTER_PROMETHEUS=http://$host:9090
  export VIGIL_CLUSTER_RECEIVER=http://$host:9097
  export VIGIL_BOOTSTRAP_SERVERS=$BOOTSTRAP
  export VIGIL_SCHEMA_REGISTRY_URL=http://$host:8085/apis/ccompat/v7
  export VIGIL_CLUSTER_UP_AT_MS=$up_at_ms
  export VIGIL_CLUSTER_TASKMANAGERS=$TASKMANAGERS
  export VIGIL_CLUSTER_ARTIFACTS=$ART
  # SIGKILL to one taskmanager (its id is its container's host name, the container id).
  export VIGIL_CLUSTER_KILL_TASKMANAGER='docker kill {taskmanager}'
  cargo test --locked -p vigil --test cluster -- --ignored --nocapture --test-threads 1
  if [[ -n "$KILLER" ]]; then
    wait "$KILLER" || { KILLER=""; log "the broker kill failed (its record: $ART/broker-kill.txt)"; exit 1; }
    KILLER=""
  fi
  log "$FORM broker(s): passed in $((SECONDS - f0)) s"
  # Ports are shared between the forms: the next one needs this one down.
  if [[ -z "${KEEP_CLUSTER:-}" || "$FORM" != "${FORMS##* }" ]]; then
    compose down -v --remove-orphans >/dev/null 2>&1 || true
  fi
}

for form in $FORMS; do run_form "$form"; done
FORM=""
