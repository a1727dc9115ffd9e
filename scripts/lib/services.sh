# shellcheck shell=bash disable=SC2034
# Sourced by the scripts that run the six services as release binaries on a local
# stack (bench-state.sh, chaos.sh). Needs LOGS (a folder for the logs) and the stack's
# env (VIGIL_BOOTSTRAP_SERVERS, VIGIL_SCHEMA_REGISTRY_URL) exported.

# The stages, and every output topic as `vigil tail` takes them, as the binary
# declares them.
mapfile -t SERVICES < <(target/release/vigil stages)
mapfile -t OUTPUT_TOPICS < <(target/release/vigil outputs)
declare -A PIDS PORTS

# Starts instance $2 (default 0) of service $1; its key in PIDS and PORTS is
# `service` for instance 0, `service/instance` otherwise.
svc_start() {
  local name="$1" instance="${2:-0}" key port
  key=$([[ "$instance" == 0 ]] && echo "$name" || echo "$name/$instance")
  svc_port
  VIGIL_INSTANCE="$instance" VIGIL_METRICS_ADDR="127.0.0.1:$port" RUST_LOG=info,rdkafka=warn \
    target/release/vigil "$name" >>"$LOGS/$name-$instance.log" 2>&1 &
  PIDS[$key]=$!
  PORTS[$key]=$port
}

# Sets `port` to one for an instance's /metrics: below the kernel's ephemeral range
# (outgoing connections take their local ports from it), not listened on, and not
# handed to another instance here, which may not have bound it yet (seen in a chaos
# run: an extra instance exiting with "Address already in use" on a port picked at
# random from the ephemeral range).
svc_port() {
  while :; do
    port=$((20000 + RANDOM % 12000))
    [[ " ${PORTS[*]} " == *" $port "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
    return 0
  done
}

# A metric of a running instance, summed over its series whose labels contain $3
# (all when not given; 0 while the instance does not answer).
svc_metric() {
  curl -s --max-time 5 "127.0.0.1:${PORTS[$1]}/metrics" 2>/dev/null |
    awk -v m="$2" -v f="${3:-}" '$1 ~ "^"m"({|$)" && index($1, f) {s += $2} END {printf "%.0f", s}'
}

# The HTTP status of an instance's /healthz (000 while it does not answer).
svc_health() {
  curl -s --max-time 5 -o /dev/null -w '%{http_code}' "127.0.0.1:${PORTS[$1]}/healthz" 2>/dev/null || true
}

svc_stop_all() {
  local key
  for key in "${!PIDS[@]}"; do kill -9 "${PIDS[$key]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
}

# The committed output (read_committed) as tagged lines, into file $1.
committed_output() {
  target/release/vigil tail --idle-exit-secs 10 "${OUTPUT_TOPICS[@]}" >"$1"
}
