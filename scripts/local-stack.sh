#!/usr/bin/env bash
# Local Kafka + Schema Registry for Vigil, without Docker.
#
# Runs real Apache Kafka 4.x brokers (KRaft; one by default, VIGIL_BROKERS of them,
# each broker and controller at once) and Apicurio Registry (which speaks Confluent's
# Schema Registry API under /apis/ccompat/v7), all as plain JVMs bound to 127.0.0.1.
# Needs only Java 17+, Maven and curl: the jars come from Maven Central through
# deploy/local-stack/pom.xml.
#
#   scripts/local-stack.sh start    fetch (once), start them, write .cache/local-stack/env
#                                   (also a SASL_SSL listener: VIGIL_SECURE_* in the env file)
#   scripts/local-stack.sh stop     stop them, delete their data
#   scripts/local-stack.sh restart-kafka [crash]   stop (or kill -9) the broker (node 1)
#                                   and start it again on its data (a fault to survive)
#   scripts/local-stack.sh status
#   scripts/local-stack.sh fetch    only fetch the jars into .cache/local-stack (once)
#   scripts/local-stack.sh kafka-class <main-class> [args...]   run any Kafka class
#
# One node of several (N = 1..VIGIL_BROKERS, its KRaft node id; node 1 is the one
# broker's `kafka`, node N>1 `kafka-N`: its pid file, run/ folder and log):
#   node-kill N            kill -9 node N (it stays down)
#   node-start N           start node N again on its data; returns once it answers
#   node-restart N [crash] stop (SIGTERM, or kill -9) node N and start it again
#   node-freeze N | node-thaw N    SIGSTOP / SIGCONT node N
#   node-wipe N            kill -9 node N, delete its log directory (not its KRaft
#                          metadata log), format it again and start it: it rejoins and
#                          re-replicates its partitions from the others
#   node-pid N
# Which node (its id) is:
#   leader TOPIC PARTITION         the leader of a partition
#   txn-coordinator ID             the transaction coordinator of a transactional id
#   group-coordinator GROUP        the coordinator of a consumer group
#   under-replicated               the number of partitions not fully in sync
#
# Env: KAFKA_PORT, SECURE_PORT, CONTROLLER_PORT, REGISTRY_PORT (default: free ports),
#      VIGIL_BROKERS (1; 3 for a three-voter quorum, where the offsets and transaction
#      state topics get replication 3 and min ISR 2), KAFKA_PORT_N, SECURE_PORT_N,
#      CONTROLLER_PORT_N (node N>1's ports; default: free ports). The env file also
#      lists VIGIL_BROKERS and each node's ports (VIGIL_BROKER_N_PORT,
#      VIGIL_BROKER_N_SECURE_PORT, VIGIL_BROKER_N_CONTROLLER_PORT);
#      VIGIL_BOOTSTRAP_SERVERS and VIGIL_SECURE_BOOTSTRAP_SERVERS name every node.
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

# Node $1 (default 1) answers on its own port; the port from the env file when
# KAFKA_PORT is not set (start sets it for node 1, and KAFKA_PORT_N for node N).
kafka_ready() {
  local n="${1:-1}" port
  port="$(node_port "$n")"
  port_open "$port" &&
    timeout 30 "$0" kafka-class org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "127.0.0.1:$port" --list
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

# Node n's name: `kafka` for node 1 (the one broker's name), `kafka-n` for the others.
node_name() { if (($1 == 1)); then echo kafka; else echo "kafka-$1"; fi; }

# A variable of the env file ($1), empty when it has none.
env_var() { sed -n "s/^$1=//p" "$ENV_FILE" 2>/dev/null || true; }

# Node n's plaintext port: KAFKA_PORT (node 1) or KAFKA_PORT_n while starting, else
# from the env file.
node_port() {
  local var=KAFKA_PORT
  (($1 == 1)) || var="KAFKA_PORT_$1"
  if [[ -n "${!var:-}" ]]; then echo "${!var}"; else env_var "VIGIL_BROKER_$1_PORT"; fi
}

# The number of nodes of the running stack.
node_count() {
  local n
  n="$(env_var VIGIL_BROKERS)"
  echo "${n:-1}"
}

# Checks a node number given on the command line.
node_arg() {
  if ! [[ "${1:-}" =~ ^[1-9][0-9]*$ ]] || (($1 > $(node_count))); then
    die "no node '${1:-}': nodes are 1..$(node_count)"
  fi
  [[ -d "$RUN/$(node_name "$1")" ]] || die "node $1 was never started (no $RUN/$(node_name "$1"))"
}

# Console logging at INFO via log4j2's default config: no config file needed.
# Node $1 (default 1).
launch_kafka() {
  local name
  name="$(node_name "${1:-1}")"
  # shellcheck disable=SC2086
  nohup "$JAVA" ${KAFKA_HEAP_OPTS:--Xmx512m} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20} \
    ${KAFKA_GC_LOG:+"-Xlog:gc:file=$KAFKA_GC_LOG:timemillis"} \
    -Djava.awt.headless=true -Dlog4j2.level=INFO -cp "$LIBS/*" \
    kafka.Kafka "$RUN/$name/server.properties" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}

# Node $1 killed with SIGKILL; returns once it is gone.
kill_node() {
  local name
  name="$(node_name "$1")"
  alive "$name" || return 0
  kill -KILL "$(pid_of "$name")"
  while alive "$name"; do sleep 0.2; done
}

# How many times node $1's log says it started: once a broker is unfenced (it has
# caught up with the metadata), which is when Kafka prints it.
started_count() { grep -c 'Kafka Server started' "$LOGS/$(node_name "$1").log" 2>/dev/null || true; }
# Node $1 started since its log said so $2 times, and its port takes connections: a
# check without a JVM, as a node restarted under load wants (a tool's JVM a second
# costs a core).
node_started() { (($(started_count "$1") > $2)) && port_open "$(node_port "$1")"; }

# Node $1 started on its data; returns once it answers.
start_node() {
  local name t0=$SECONDS before
  name="$(node_name "$1")"
  ! alive "$name" || die "$name is running already"
  before="$(started_count "$1")"
  launch_kafka "$1"
  wait_for "$name" node_started "$1" "$before"
  log "$name (node $1) ready after $((SECONDS - t0)) s"
}

# The broker (node $2, default 1) stopped (SIGTERM, or SIGKILL with `crash`) and started
# again on the same data and port: a broker restart as a deployment meets it.
restart_kafka() {
  local n="${2:-1}" name before
  name="$(node_name "$n")"
  alive "$name" || die "$name is not running"
  if [[ "${1:-}" == crash ]]; then
    kill_node "$n"
  else
    stop_one "$name"
  fi
  local t0=$SECONDS
  before="$(started_count "$n")"
  launch_kafka "$n"
  wait_for "$name" node_started "$n" "$before"
  if [[ "$name" == kafka ]]; then
    log "Kafka restarted, ready after $((SECONDS - t0)) s"
  else
    log "$name (node $n) restarted, ready after $((SECONDS - t0)) s"
  fi
}

# Node $1 killed, its log directory deleted and formatted again (Kafka wants every log
# directory formatted; the KRaft metadata log, kept, still holds the node's place in
# the quorum), and started: it rejoins empty and fetches its replicas from the others.
wipe_node() {
  local name dir
  name="$(node_name "$1")"
  dir="$RUN/$name"
  kill_node "$1"
  rm -rf "$dir/data"
  mkdir -p "$dir/data"
  "$0" kafka-class kafka.tools.StorageTool format --ignore-formatted --no-initial-controllers \
    -t "$(cat "$dir/cluster-id")" -c "$dir/server.properties" >>"$LOGS/$name-format.log" 2>&1 \
    || { tail -n 20 "$LOGS/$name-format.log" >&2; die "formatting $name's wiped log directory failed"; }
  log "$name (node $1): log directory wiped and formatted again"
  start_node "$1"
}

# shellcheck source=scripts/lib/stack-lookups.sh
. "$ROOT/scripts/lib/stack-lookups.sh"

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
  local n nodes="${VIGIL_BROKERS:-1}"
  [[ "$nodes" =~ ^[1-9]$ ]] || die "VIGIL_BROKERS=$nodes: a number of nodes from 1 to 9"
  local all_alive=yes
  for ((n = 1; n <= nodes; n++)); do alive "$(node_name "$n")" || all_alive=no; done
  [[ "$all_alive" == yes && "$(node_count)" == "$nodes" ]] && alive registry && alive registry-secure \
    && [[ -f "$ENV_FILE" ]] && { log "already running"; show_env; return 0; }
  stop_all quiet  # clear a half-started or crashed stack
  # Never leave half a stack running when start fails (logs are kept).
  trap 'rc=$?; ((rc == 0)) || stop_all quiet; exit "$rc"' EXIT
  command -v "$JAVA" >/dev/null || die "java not found (Java 17+ required)"
  command -v curl >/dev/null || die "curl not found"
  fetch

  # Ports given in the environment stay; the others are picked apart from them all.
  local name ports=(KAFKA_PORT SECURE_PORT CONTROLLER_PORT) taken=()
  for ((n = 2; n <= nodes; n++)); do ports+=("KAFKA_PORT_$n" "SECURE_PORT_$n" "CONTROLLER_PORT_$n"); done
  ports+=(REGISTRY_PORT SECURE_REGISTRY_PORT)
  for name in "${ports[@]}"; do taken+=("${!name:-}"); done
  for name in "${ports[@]}"; do
    [[ -n "${!name:-}" ]] || printf -v "$name" '%s' "$(free_port "${taken[@]}")"
    taken+=("${!name}")
  done
  [[ $(for name in "${ports[@]}"; do echo "${!name}"; done | sort -u | wc -l) -eq ${#ports[@]} ]] \
    || die "the ports must differ: ${ports[*]}"
  REGISTRY_URL="http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
  SECURE_REGISTRY_URL="https://127.0.0.1:$SECURE_REGISTRY_PORT/apis/ccompat/v7"
  for name in "${ports[@]}"; do
    ! port_open "${!name}" || die "port ${!name} is already in use"
  done
  # Node n's ports, and the lists of them all.
  local kport=() sport=() cport=() bootstrap=() secure_bootstrap=() controllers=()
  for ((n = 1; n <= nodes; n++)); do
    if ((n == 1)); then
      kport[n]=$KAFKA_PORT sport[n]=$SECURE_PORT cport[n]=$CONTROLLER_PORT
    else
      name="KAFKA_PORT_$n"; kport[n]=${!name}
      name="SECURE_PORT_$n"; sport[n]=${!name}
      name="CONTROLLER_PORT_$n"; cport[n]=${!name}
    fi
    bootstrap+=("127.0.0.1:${kport[n]}") secure_bootstrap+=("127.0.0.1:${sport[n]}")
    controllers+=("127.0.0.1:${cport[n]}")
  done
  mkdir -p "$LOGS"

  # Fresh secrets for each start: the user of the SECURE listener and the secured
  # registry, and the keystore's password. Each starts with a letter: keytool hands
  # an argument starting with -J to the JVM (a password "-J..." failed a start).
  SECURE_USER=vigil
  secure_password="p$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')"
  TLS_PASSWORD="p$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')"
  make_tls >"$LOGS/tls.log" 2>&1 || { cat "$LOGS/tls.log" >&2; die "making the TLS certificates failed"; }

  # A KRaft id (the cluster's, a directory's) is 16 random bytes in unpadded URL-safe
  # base64 (what `kafka-storage.sh random-uuid` prints); Kafka rejects ids starting
  # with '-'.
  kraft_id() { local id; id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"; echo "A${id:1}"; }
  local cluster_id t0=$SECONDS quorum=(--standalone) voters=() formats=() pid replication=$((nodes < 3 ? nodes : 3))
  cluster_id="$(kraft_id)"
  # Several nodes: each a voter of the first quorum, named with its metadata log
  # directory's id.
  if ((nodes > 1)); then
    for ((n = 1; n <= nodes; n++)); do voters+=("$n@127.0.0.1:${cport[n]}:$(kraft_id)"); done
    quorum=(--initial-controllers "$(IFS=,; echo "${voters[*]}")")
  fi
  log "formatting KRaft storage (cluster $cluster_id, $nodes node(s))..."
  for ((n = 1; n <= nodes; n++)); do
    name="$(node_name "$n")"
    mkdir -p "$RUN/$name/data" "$RUN/$name/meta"
    echo "$cluster_id" >"$RUN/$name/cluster-id"
    sed -e "s|@NODE_ID@|$n|g" -e "s|@CONTROLLER_BOOTSTRAP@|$(IFS=,; echo "${controllers[*]}")|g" \
        -e "s|@KAFKA_PORT@|${kport[n]}|g" -e "s|@CONTROLLER_PORT@|${cport[n]}|g" \
        -e "s|@SECURE_PORT@|${sport[n]}|g" -e "s|@TLS_DIR@|$RUN/tls|g" -e "s|@TLS_PASSWORD@|$TLS_PASSWORD|g" \
        -e "s|@SASL_USER@|$SECURE_USER|g" -e "s|@SASL_PASSWORD@|$secure_password|g" \
        -e "s|@DATA_DIR@|$RUN/$name/data|g" -e "s|@METADATA_DIR@|$RUN/$name/meta|g" \
        -e "s|@INTERNAL_REPLICATION@|$replication|g" -e "s|@INTERNAL_MIN_ISR@|$((replication == 3 ? 2 : 1))|g" \
        "$DEPLOY/server.properties" >"$RUN/$name/server.properties"
    [[ -z "${KAFKA_EXTRA_PROPERTIES:-}" ]] || tr ' ' '\n' <<<"$KAFKA_EXTRA_PROPERTIES" >>"$RUN/$name/server.properties"
    "$0" kafka-class kafka.tools.StorageTool format "${quorum[@]}" -t "$cluster_id" \
      -c "$RUN/$name/server.properties" --add-scram "SCRAM-SHA-512=[name=$SECURE_USER,password=$secure_password]" \
      >"$LOGS/$name-format.log" 2>&1 &
    formats+=($!)
  done
  # Each format by its pid: `wait -n` also returns for an earlier process
  # substitution, and a node started before its format ends finds no meta.properties.
  for pid in "${formats[@]}"; do
    wait "$pid" || { cat "$LOGS"/kafka*-format.log >&2; die "formatting Kafka storage failed"; }
  done

  # The JVMs start together (they don't depend on each other) to save time.
  for ((n = 1; n <= nodes; n++)); do
    name="$(node_name "$n")"
    log "starting Kafka node $n on 127.0.0.1:${kport[n]} (controller :${cport[n]})..."
    : >"$LOGS/$name.log"
    launch_kafka "$n"
  done

  log "starting Apicurio Registry on 127.0.0.1:$REGISTRY_PORT, and one on https://127.0.0.1:$SECURE_REGISTRY_PORT..."
  launch_registry registry -Dquarkus.http.port="$REGISTRY_PORT"
  # The secured registry: https only (the stack's CA), HTTP basic auth for every call.
  launch_registry registry-secure -Dquarkus.http.port=0 -Dquarkus.http.ssl-port="$SECURE_REGISTRY_PORT" \
    -Dquarkus.http.insecure-requests=disabled -Dquarkus.http.ssl.certificate.key-store-file="$RUN/tls/broker.p12" \
    -Dquarkus.http.ssl.certificate.key-store-password="$TLS_PASSWORD" -Dquarkus.http.auth.basic=true \
    -Dquarkus.security.users.embedded.enabled=true -Dquarkus.security.users.embedded.plain-text=true \
    -Dquarkus.security.users.embedded.users."$SECURE_USER"="$secure_password" \
    -Dquarkus.http.auth.permission.all.paths='/*' -Dquarkus.http.auth.permission.all.policy=authenticated

  for ((n = 1; n <= nodes; n++)); do wait_for "$(node_name "$n")" kafka_ready "$n"; done
  log "Kafka ready after $((SECONDS - t0)) s"
  wait_for registry registry_ready
  wait_for registry-secure secure_registry_ready
  log "Apicurio Registry ready after $((SECONDS - t0)) s"

  {
    printf 'VIGIL_BOOTSTRAP_SERVERS=%s\nVIGIL_SCHEMA_REGISTRY_URL=%s\n' \
      "$(IFS=,; echo "${bootstrap[*]}")" "$REGISTRY_URL"
    # The SECURE listener (SASL_SSL), the secured registry, and what a client needs.
    printf 'VIGIL_SECURE_BOOTSTRAP_SERVERS=%s\nVIGIL_SECURE_REGISTRY_URL=%s\n' \
      "$(IFS=,; echo "${secure_bootstrap[*]}")" "$SECURE_REGISTRY_URL"
    printf 'VIGIL_SECURE_CA_LOCATION=%s\nVIGIL_SECURE_USERNAME=%s\nVIGIL_SECURE_PASSWORD=%s\n' \
      "$RUN/tls/ca.pem" "$SECURE_USER" "$secure_password"
    # The nodes, for the node commands and for tests that fault one of them.
    printf 'VIGIL_BROKERS=%s\n' "$nodes"
    for ((n = 1; n <= nodes; n++)); do
      printf 'VIGIL_BROKER_%s_PORT=%s\nVIGIL_BROKER_%s_SECURE_PORT=%s\nVIGIL_BROKER_%s_CONTROLLER_PORT=%s\n' \
        "$n" "${kport[n]}" "$n" "${sport[n]}" "$n" "${cport[n]}"
    done
  } >"$ENV_FILE"
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
  kill -CONT "$pid" 2>/dev/null || true  # a frozen node must run to stop
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  log "$name did not stop within 30 s, killing it"
  kill -KILL "$pid" 2>/dev/null || true
}

# Every node's name that has a pid file, node 1 first.
node_names() {
  local f
  for f in "$RUN"/kafka.pid "$RUN"/kafka-*.pid; do [[ -f "$f" ]] && basename "$f" .pid; done
  true
}

stop_all() {
  local name
  stop_one registry "${1:-}" & stop_one registry-secure "${1:-}" &
  for name in $(node_names); do stop_one "$name" "${1:-}" & done
  wait
  rm -rf "$RUN" "$ENV_FILE"
}

status() {
  local rc=0 name
  for name in $(node_names) registry registry-secure; do
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
  node-kill) node_arg "${2:-}"; kill_node "$2"; log "$(node_name "$2") (node $2) killed" ;;
  node-start) node_arg "${2:-}"; start_node "$2" ;;
  node-restart) node_arg "${2:-}"; restart_kafka "${3:-}" "$2" ;;
  node-freeze) node_arg "${2:-}"; alive "$(node_name "$2")" || die "node $2 is not running"; kill -STOP "$(pid_of "$(node_name "$2")")" ;;
  node-thaw) node_arg "${2:-}"; alive "$(node_name "$2")" || die "node $2 is not running"; kill -CONT "$(pid_of "$(node_name "$2")")" ;;
  node-wipe) node_arg "${2:-}"; wipe_node "$2" ;;
  node-pid) node_arg "${2:-}"; alive "$(node_name "$2")" || die "node $2 is not running"; pid_of "$(node_name "$2")" ;;
  leader) shift; leader "$@" ;;
  txn-coordinator) shift; txn_coordinator "$@" ;;
  group-coordinator) shift; group_coordinator "$@" ;;
  under-replicated) under_replicated ;;
  *) echo "usage: $0 {start|stop|restart-kafka [crash]|status|fetch|kafka-class <main-class> [args...]" >&2
     echo "       |node-kill N|node-start N|node-restart N [crash]|node-freeze N|node-thaw N|node-wipe N|node-pid N" >&2
     echo "       |leader TOPIC PARTITION|txn-coordinator ID|group-coordinator GROUP|under-replicated}" >&2
     exit 2 ;;
esac
