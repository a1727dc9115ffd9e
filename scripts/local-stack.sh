#!/usr/bin/env bash
# Local Kafka + Schema Registry for Vigil, without Docker.
#
# Runs a real single-node Apache Kafka 4.x broker (KRaft) and Apicurio Registry
# (which speaks Confluent's Schema Registry API under /apis/ccompat/v7), both as
# plain JVMs bound to 127.0.0.1. Needs only Java 17+, Maven and curl: the jars
# come from Maven Central through deploy/local-stack/pom.xml.
#
#   scripts/local-stack.sh start    fetch (once), start both, write .cache/local-stack/env
#                                   (also a SASL_SSL listener: VIGIL_SECURE_* in the env file)
#   scripts/local-stack.sh stop     stop both, delete their data
#   scripts/local-stack.sh restart-kafka [crash]   stop (or kill -9) the broker and
#                                   start it again on its data (a fault to survive)
#   scripts/local-stack.sh status
#   scripts/local-stack.sh fetch    only fetch the jars into .cache/local-stack (once)
#   scripts/local-stack.sh kafka-class <main-class> [args...]   run any Kafka class
#
# Env: KAFKA_PORT, SECURE_PORT, CONTROLLER_PORT, REGISTRY_PORT (default: free ports),
#      KAFKA_HEAP_OPTS (-Xmx512m), KAFKA_JVM_PERFORMANCE_OPTS (the collector; as in
#      Kafka's own scripts, -XX:+UseG1GC -XX:MaxGCPauseMillis=20), KAFKA_GC_LOG (a file
#      for the broker's collections, stamped in epoch ms), KAFKA_EXTRA_PROPERTIES (broker
#      settings added to deploy/local-stack/server.properties, space-separated
#      key=value), REGISTRY_HEAP_OPTS (-Xmx384m),
#      KAFKA_TOOL_OPTS (-Xmx512m), START_TIMEOUT seconds (120),
#      VIGIL_STACK_STATE: folder of this stack's data, logs and env file (default
#      .cache/local-stack), so several stacks can share the fetched jars.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPLOY="$ROOT/deploy/local-stack"
CACHE="$ROOT/.cache/local-stack"
LIBS="$CACHE/kafka-libs"     # flat folder of Kafka jars (classpath = LIBS/*)
REGISTRY="$CACHE/registry"   # unpacked Apicurio Registry distribution
STATE="${VIGIL_STACK_STATE:-$CACHE}"
mkdir -p "$STATE" && STATE="$(cd "$STATE" && pwd)"   # absolute: the registry runs from its own folder
RUN="$STATE/run"             # per-start data; deleted by stop
LOGS="$STATE/logs"           # kept after stop, for post-mortems
ENV_FILE="$STATE/env"
START_TIMEOUT="${START_TIMEOUT:-120}"
JAVA="${JAVA:-java}"

log() { echo "local-stack: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Re-fetch only when the pom changed (its hash is stored with the cache), so
# `start` is cheap and offline once the cache exists.
fetch() {
  local stamp="$CACHE/.fetched" want
  want="$(sha256sum "$DEPLOY/pom.xml" | cut -d' ' -f1)"
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (needed once, to fetch the jars)"
  mkdir -p "$CACHE"
  rm -rf "$LIBS" "$REGISTRY"
  local t0=$SECONDS mvn=(mvn -B -ntp -f "$DEPLOY/pom.xml")
  log "fetching Kafka broker + tools jars (~55 MB) from Maven Central..."
  "${mvn[@]}" dependency:copy-dependencies -DoutputDirectory="$LIBS" >"$CACHE/fetch.log" 2>&1 \
    || { tail -n 30 "$CACHE/fetch.log" >&2; die "fetching Kafka failed (see $CACHE/fetch.log)"; }
  log "fetching Apicurio Registry (~160 MB) from Maven Central..."
  "${mvn[@]}" dependency:copy@registry -DoutputDirectory="$CACHE" >>"$CACHE/fetch.log" 2>&1 \
    || { tail -n 30 "$CACHE/fetch.log" >&2; die "fetching Apicurio Registry failed (see $CACHE/fetch.log)"; }
  # The tarball has no top folder; GNU tar (not Maven) handles its pax headers.
  mkdir -p "$REGISTRY"
  tar -xzf "$CACHE/apicurio-registry.tar.gz" -C "$REGISTRY"
  rm -f "$CACHE/apicurio-registry.tar.gz"
  echo "$want" >"$stamp"
  log "fetched in $((SECONDS - t0)) s, cache is $(du -sh "$CACHE" | cut -f1)"
}

# True if something accepts TCP connections on 127.0.0.1:$1 (bash /dev/tcp,
# so no nc/ss is needed).
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A random port that nothing listens on yet, below the kernel's ephemeral range:
# outgoing connections take their local ports from that range, and one could take a
# port picked there before the broker or registry binds it (seen: "Port ... seems to
# be in use"). Not one of the arguments: the ports picked already, which nothing
# listens on yet either (a controller and a registry once drew the same one).
free_port() {
  local p low=32768 rest taken=" $* "
  read -r low rest </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  ((low > 12000)) || low=60000
  for _ in $(seq 50); do
    p=$((10000 + RANDOM % (low - 10000)))
    [[ "$taken" != *" $p "* ]] || continue
    port_open "$p" || { echo "$p"; return 0; }
  done
  die "no free port found"
}

# The env file as shown on the console: without its secrets.
show_env() { grep -v '_PASSWORD=' "$ENV_FILE"; }

pid_of() { cat "$RUN/$1.pid" 2>/dev/null || true; }
# Alive = the pid runs a java whose command line points into our cache, so a
# stale pid file (e.g. after a reboot) can never make us signal another process.
alive() {
  local pid; pid="$(pid_of "$1")"
  [[ -n "$pid" && "$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" == *"$CACHE"* ]]
}

kafka_class() {
  [[ -d "$LIBS" ]] || die "Kafka jars not fetched yet: run '$0 start' first"
  # shellcheck disable=SC2086  # *_OPTS are deliberately word-split
  exec "$JAVA" ${KAFKA_TOOL_OPTS:--Xmx512m} -Dlog4j2.level="${KAFKA_TOOL_LOG_LEVEL:-WARN}" \
    -cp "$LIBS/*" "$@"
}

# Wait until "$@" succeeds; fail with the component's log if its process dies
# or the timeout passes.
wait_for() {
  local name="$1"; shift
  local deadline=$((SECONDS + START_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      tail -n 40 "$LOGS/$name.log" >&2; die "$name exited during start-up (log: $LOGS/$name.log)"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 40 "$LOGS/$name.log" >&2; die "$name not ready after ${START_TIMEOUT}s (log: $LOGS/$name.log)"
    fi
    sleep 1
  done
}

kafka_ready() {
  port_open "$KAFKA_PORT" &&
    timeout 30 "$0" kafka-class org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "127.0.0.1:$KAFKA_PORT" --list
}
registry_ready() {
  [[ "$(curl -s -o /dev/null -w '%{http_code}' "$REGISTRY_URL/subjects")" == 200 ]]
}
secure_registry_ready() {
  [[ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$RUN/tls/ca.pem" -u "$SECURE_USER:$secure_password" \
    "$SECURE_REGISTRY_URL/subjects")" == 200 ]]
}

# One Apicurio Registry, `name`, from its own folder; further -D options as arguments.
launch_registry() {
  local name="$1" jar; shift
  # Apicurio 3.0.x ships a legacy "*-runner.jar", 3.1+ a "quarkus-run.jar".
  jar="$(find "$REGISTRY" -maxdepth 1 \( -name '*-runner.jar' -o -name quarkus-run.jar \) | head -n 1)"
  [[ -n "$jar" ]] || die "no runnable jar in $REGISTRY"
  mkdir -p "$RUN/$name"
  # shellcheck disable=SC2086
  (cd "$RUN/$name" && exec nohup "$JAVA" ${REGISTRY_HEAP_OPTS:--Xmx384m} -Dquarkus.http.host=127.0.0.1 "$@" \
    -jar "$jar" >"$LOGS/$name.log" 2>&1 </dev/null) &
  echo $! >"$RUN/$name.pid"
}

# Console logging at INFO via log4j2's default config: no config file needed.
launch_kafka() {
  # shellcheck disable=SC2086
  nohup "$JAVA" ${KAFKA_HEAP_OPTS:--Xmx512m} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20} \
    ${KAFKA_GC_LOG:+"-Xlog:gc:file=$KAFKA_GC_LOG:timemillis"} \
    -Djava.awt.headless=true -Dlog4j2.level=INFO -cp "$LIBS/*" \
    kafka.Kafka "$RUN/kafka/server.properties" >>"$LOGS/kafka.log" 2>&1 </dev/null &
  echo $! >"$RUN/kafka.pid"
}

# The broker stopped (SIGTERM, or SIGKILL with `crash`) and started again on the same
# data and port: a broker restart as a deployment meets it.
restart_kafka() {
  alive kafka || die "Kafka is not running"
  KAFKA_PORT="$(sed -n 's/^VIGIL_BOOTSTRAP_SERVERS=127.0.0.1://p' "$ENV_FILE")"
  if [[ "${1:-}" == crash ]]; then
    kill -KILL "$(pid_of kafka)"
    while alive kafka; do sleep 0.2; done
  else
    stop_one kafka
  fi
  local t0=$SECONDS
  launch_kafka
  wait_for kafka kafka_ready
  log "Kafka restarted, ready after $((SECONDS - t0)) s"
}

# The SECURE listener's TLS material in $RUN/tls: a CA of this stack (ca.pem, what
# clients trust) and the broker's key and certificate (for 127.0.0.1 and localhost)
# signed by it, in a PKCS12 keystore.
make_tls() {
  local dir="$RUN/tls" keytool
  keytool="$(dirname "$(readlink -f "$(command -v "$JAVA")")")/keytool"
  mkdir -p "$dir"
  local store=(-storetype PKCS12 -storepass "$TLS_PASSWORD" -keypass "$TLS_PASSWORD")
  "$keytool" -genkeypair -alias ca -keyalg RSA -keysize 2048 -validity 30 -dname "CN=Vigil local stack CA" \
    -ext bc:c "${store[@]}" -keystore "$dir/ca.p12"
  "$keytool" -exportcert -rfc -alias ca "${store[@]}" -keystore "$dir/ca.p12" -file "$dir/ca.pem"
  "$keytool" -genkeypair -alias broker -keyalg RSA -keysize 2048 -validity 30 -dname "CN=localhost" \
    "${store[@]}" -keystore "$dir/broker.p12"
  "$keytool" -certreq -alias broker "${store[@]}" -keystore "$dir/broker.p12" -file "$dir/broker.csr"
  "$keytool" -gencert -alias ca -validity 30 -ext SAN=ip:127.0.0.1,dns:localhost -rfc "${store[@]}" \
    -keystore "$dir/ca.p12" -infile "$dir/broker.csr" -outfile "$dir/broker.pem"
  "$keytool" -importcert -noprompt -alias ca "${store[@]}" -keystore "$dir/broker.p12" -file "$dir/ca.pem"
  "$keytool" -importcert -noprompt -alias broker "${store[@]}" -keystore "$dir/broker.p12" -file "$dir/broker.pem"
}

start() {
  alive kafka && alive registry && alive registry-secure && [[ -f "$ENV_FILE" ]] && { log "already running"; show_env; return 0; }
  stop_all quiet  # clear a half-started or crashed stack
  # Never leave half a stack running when start fails (logs are kept).
  trap 'rc=$?; ((rc == 0)) || stop_all quiet; exit "$rc"' EXIT
  command -v "$JAVA" >/dev/null || die "java not found (Java 17+ required)"
  command -v curl >/dev/null || die "curl not found"
  fetch

  # Ports given in the environment stay; the others are picked apart from them all.
  local name ports=(KAFKA_PORT SECURE_PORT CONTROLLER_PORT REGISTRY_PORT SECURE_REGISTRY_PORT) taken=()
  for name in "${ports[@]}"; do taken+=("${!name:-}"); done
  for name in "${ports[@]}"; do
    [[ -n "${!name:-}" ]] || printf -v "$name" '%s' "$(free_port "${taken[@]}")"
    taken+=("${!name}")
  done
  [[ $(for name in "${ports[@]}"; do echo "${!name}"; done | sort -u | wc -l) -eq ${#ports[@]} ]] \
    || die "the ports must differ: ${ports[*]}"
  REGISTRY_URL="http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
  SECURE_REGISTRY_URL="https://127.0.0.1:$SECURE_REGISTRY_PORT/apis/ccompat/v7"
  for p in "$KAFKA_PORT" "$SECURE_PORT" "$CONTROLLER_PORT" "$REGISTRY_PORT" "$SECURE_REGISTRY_PORT"; do
    ! port_open "$p" || die "port $p is already in use"
  done
  mkdir -p "$RUN/kafka/data" "$LOGS"

  # Fresh secrets for each start: the user of the SECURE listener and the secured
  # registry, and the keystore's password. Each starts with a letter: keytool hands
  # an argument starting with -J to the JVM (a password "-J..." failed a start).
  SECURE_USER=vigil
  secure_password="p$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')"
  TLS_PASSWORD="p$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')"
  make_tls >"$LOGS/tls.log" 2>&1 || { cat "$LOGS/tls.log" >&2; die "making the TLS certificates failed"; }

  sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
      -e "s|@SECURE_PORT@|$SECURE_PORT|g" -e "s|@TLS_DIR@|$RUN/tls|g" -e "s|@TLS_PASSWORD@|$TLS_PASSWORD|g" \
      -e "s|@SASL_USER@|$SECURE_USER|g" -e "s|@SASL_PASSWORD@|$secure_password|g" \
      -e "s|@DATA_DIR@|$RUN/kafka/data|g" "$DEPLOY/server.properties" >"$RUN/kafka/server.properties"
  [[ -z "${KAFKA_EXTRA_PROPERTIES:-}" ]] || tr ' ' '\n' <<<"$KAFKA_EXTRA_PROPERTIES" >>"$RUN/kafka/server.properties"

  # A KRaft cluster id is 16 random bytes in unpadded URL-safe base64 (what
  # `kafka-storage.sh random-uuid` prints); Kafka rejects ids starting with '-'.
  local cluster_id t0=$SECONDS
  cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
  cluster_id="A${cluster_id:1}"
  log "formatting KRaft storage (cluster $cluster_id)..."
  "$0" kafka-class kafka.tools.StorageTool format --standalone -t "$cluster_id" \
    -c "$RUN/kafka/server.properties" --add-scram "SCRAM-SHA-512=[name=$SECURE_USER,password=$secure_password]" \
    >"$LOGS/kafka-format.log" 2>&1 \
    || { cat "$LOGS/kafka-format.log" >&2; die "formatting Kafka storage failed"; }

  # Both JVMs start together (they don't depend on each other) to save time.
  log "starting Kafka on 127.0.0.1:$KAFKA_PORT (controller :$CONTROLLER_PORT)..."
  : >"$LOGS/kafka.log"
  launch_kafka

  log "starting Apicurio Registry on 127.0.0.1:$REGISTRY_PORT, and one on https://127.0.0.1:$SECURE_REGISTRY_PORT..."
  launch_registry registry -Dquarkus.http.port="$REGISTRY_PORT"
  # The secured registry: https only (the stack's CA), HTTP basic auth for every call.
  launch_registry registry-secure -Dquarkus.http.port=0 -Dquarkus.http.ssl-port="$SECURE_REGISTRY_PORT" \
    -Dquarkus.http.insecure-requests=disabled -Dquarkus.http.ssl.certificate.key-store-file="$RUN/tls/broker.p12" \
    -Dquarkus.http.ssl.certificate.key-store-password="$TLS_PASSWORD" -Dquarkus.http.auth.basic=true \
    -Dquarkus.security.users.embedded.enabled=true -Dquarkus.security.users.embedded.plain-text=true \
    -Dquarkus.security.users.embedded.users."$SECURE_USER"="$secure_password" \
    -Dquarkus.http.auth.permission.all.paths='/*' -Dquarkus.http.auth.permission.all.policy=authenticated

  wait_for kafka kafka_ready
  log "Kafka ready after $((SECONDS - t0)) s"
  wait_for registry registry_ready
  wait_for registry-secure secure_registry_ready
  log "Apicurio Registry ready after $((SECONDS - t0)) s"

  printf 'VIGIL_BOOTSTRAP_SERVERS=127.0.0.1:%s\nVIGIL_SCHEMA_REGISTRY_URL=%s\n' \
    "$KAFKA_PORT" "$REGISTRY_URL" >"$ENV_FILE"
  # The SECURE listener (SASL_SSL), the secured registry, and what a client needs.
  printf 'VIGIL_SECURE_BOOTSTRAP_SERVERS=127.0.0.1:%s\nVIGIL_SECURE_REGISTRY_URL=%s\n' \
    "$SECURE_PORT" "$SECURE_REGISTRY_URL" >>"$ENV_FILE"
  printf 'VIGIL_SECURE_CA_LOCATION=%s\nVIGIL_SECURE_USERNAME=%s\nVIGIL_SECURE_PASSWORD=%s\n' \
    "$RUN/tls/ca.pem" "$SECURE_USER" "$secure_password" >>"$ENV_FILE"
  chmod 600 "$ENV_FILE"
  log "stack is up; env written to $ENV_FILE"
  show_env
}

# SIGTERM lets Kafka shut down cleanly; SIGKILL only if it hangs.
stop_one() {
  local name="$1" pid
  pid="$(pid_of "$name")"
  alive "$name" || return 0
  [[ "${2:-}" == quiet ]] || log "stopping $name (pid $pid)..."
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  log "$name did not stop within 30 s, killing it"
  kill -KILL "$pid" 2>/dev/null || true
}

stop_all() {
  stop_one registry "${1:-}" & stop_one registry-secure "${1:-}" & stop_one kafka "${1:-}" & wait
  rm -rf "$RUN" "$ENV_FILE"
}

status() {
  local rc=0 name
  for name in kafka registry registry-secure; do
    if alive "$name"; then echo "$name: running (pid $(pid_of "$name"))"; else echo "$name: stopped"; rc=3; fi
  done
  [[ -f "$ENV_FILE" ]] && show_env
  return "$rc"
}

case "${1:-}" in
  start) start ;;
  stop) stop_all; log "stopped" ;;
  restart-kafka) restart_kafka "${2:-}" ;;
  status) status ;;
  fetch) fetch ;;
  kafka-class) shift; [[ $# -ge 1 ]] || die "usage: $0 kafka-class <main-class> [args...]"; kafka_class "$@" ;;
  *) echo "usage: $0 {start|stop|restart-kafka [crash]|status|fetch|kafka-class <main-class> [args...]}" >&2; exit 2 ;;
esac
