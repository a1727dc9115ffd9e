#!/usr/bin/env bash
# Benchmark of the six Kafka services on one local broker (not a test).
#
#   scripts/bench-kafka.sh [SCALE] [RATE] [SECONDS]
#
# 1. Throughput: the planted dataset plus SCALE thousand events (default 1000, about
#    a million) and end-of-input markers pre-loaded onto the input topics, then the six
#    services started together; the figure is input events over the time from their
#    start until every service has read the end of its input (everything processed
#    and committed), with the CPU seconds each service and the broker spent. Twice:
#    keyed as the stages join, then unkeyed (the cost of the repartition path). Each
#    on a broker warmed first by the same pipeline over planted + WARM_SCALE thousand
#    events (default 300; 0 measures a new broker): a new JVM spends much of its first
#    CPU seconds compiling, which a broker in service has long done.
# 2. Latency: a fresh stack, normal traffic at RATE events/s (default 2000); after
#    WARMUP seconds of it (default 60: past a new stage's first idle judgements and
#    the new broker's compiling), for SECONDS (default 30), p50/p99 from an input
#    record's production to its output becoming readable under read_committed
#    (shared/kafka/examples/latency_probe.rs; it also measures the amount rule's
#    event-time wait apart, and how much of each hop's tail was produced just before
#    one of the broker's collector pauses). The CPU seconds every process spent
#    meanwhile, and where the time goes in join-enrich, the device router and
#    payment-anomalies from their vigil_record_hop_seconds histograms (queued in
#    Kafka, processing, read to commit). WARMUP=0 measures from the start.
# 3. The raw broker on the same machine in the same run: Kafka's own producer and
#    consumer perf tools, one million 100-byte records.
# 5. Ratios (not in the default PARTS): on one broker, warmed once, RUNS times (default
#    5) alternating Kafka's own producer perf tool (1 000 000 records of 100 bytes,
#    acks=all) and the throughput run of each keying in KEYS: each run's services
#    figure over its own producer figure, and the medians. What decides a slow host's
#    figure is the broker, so the ratio to what the broker takes from its own producer
#    in the same minute is what carries over between hosts.
# 4. Start-up: with the planted dataset plus 10 thousand events waiting on the input
#    topics, each stateful service is started alone on empty changelogs: the time from
#    its start to its first commit with output (polled from /metrics every 10 ms).
#    Then it is killed (SIGKILL) and started again on what it committed: the time
#    until its tasks are restored and reading, and what the restore read. (A health
#    monitor runs first, so the broker's own first-transaction set-up is not counted.)
#
# The broker runs with the JVM arguments Kafka's documentation gives as typical for
# production (a 6 GiB G1 heap) and a 4 GiB young generation, not the local stack's
# 512 MiB development heap: in the small heap it stops to collect far more often, and
# a hop's tail follows those stops (docs/decisions.md, "The broker as Kafka's
# documentation runs it").
#
# Every throughput run also prints the broker's requests (its RequestsPerSec counters
# over JMX, by request type: a second, and per input event) and the broker's CPU
# seconds per thousand input events.
#
# A slow host on purpose: BROKER_CPU_PERCENT (e.g. 35) runs the broker under a CPU
# quota of that share of one core (a cgroup, scripts/lib/cpu-quota.sh), from its
# start, in every part.
#
# Env: PARTS (default "throughput latency raw startup"; also "ratios") runs only those parts;
# RUNS the pairs of the ratios part (default 5); KEYS (default
# "join none") the keyings of the throughput part; SIGMA the amount rule's multiplier
# in the latency part (see there); BIN (default
# target/release) takes the Vigil binaries from another build, to compare two builds
# side by side (only the latency probe is built then); KAFKA_HEAP_OPTS and
# KAFKA_JVM_PERFORMANCE_OPTS replace the broker's JVM arguments (e.g.
# KAFKA_HEAP_OPTS=-Xmx512m for the local stack's, or on a machine without 6 GiB to
# spare); VIGIL_TOPICS_COMPRESSION the codec the services write with (default zstd).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE="${1:-1000}"
RATE="${2:-2000}"
SECONDS_LATENCY="${3:-30}"
WARMUP="${WARMUP:-60}"
PARTS="${PARTS:-throughput latency raw startup}"
RUNS="${RUNS:-5}"
KEYS="${KEYS:-join none}"
WARM_SCALE="${WARM_SCALE:-300}"
BIN="${BIN:-target/release}"
export VIGIL_STACK_STATE="$PWD/.cache/bench-stack"
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS--Xms6g -Xmx6g -Xmn4g}"
export KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS--XX:MetaspaceSize=96m -XX:+UseG1GC \
-XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:G1HeapRegionSize=16M \
-XX:MinMetaspaceFreeRatio=50 -XX:MaxMetaspaceFreeRatio=80 -XX:+ExplicitGCInvokesConcurrent}"
PIDS=()

# shellcheck source=scripts/lib/stack.sh
. scripts/lib/stack.sh
# shellcheck source=scripts/lib/hops.sh
. scripts/lib/hops.sh
# shellcheck source=scripts/lib/cpu-quota.sh
. scripts/lib/cpu-quota.sh
trap 'cpu_quota_release; stack_down_with_pids' EXIT

# The broker's request counters, read over JMX (Kafka's JmxTool) from a port of its own.
JMX_PORT=$((20000 + RANDOM % 10000))
KAFKA_JVM_PERFORMANCE_OPTS+=" -Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.port=$JMX_PORT \
-Dcom.sun.management.jmxremote.rmi.port=$JMX_PORT -Dcom.sun.management.jmxremote.authenticate=false \
-Dcom.sun.management.jmxremote.ssl=false -Djava.rmi.server.hostname=127.0.0.1"

# A new broker and registry with Vigil's topics; the six services too unless told
# "bare".
fresh_stack() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  PIDS=()
  scripts/local-stack.sh stop >/dev/null 2>&1 || true
  scripts/local-stack.sh start >/dev/null
  if [[ -n "${BROKER_CPU_PERCENT:-}" ]]; then
    cpu_quota_release
    cpu_quota_apply "$(cat "$VIGIL_STACK_STATE/run/kafka.pid")" "$BROKER_CPU_PERCENT"
  fi
  set -a
  # shellcheck disable=SC1091
  . "$VIGIL_STACK_STATE/env"
  set +a
  "$BIN"/vigil provision >/dev/null
  [[ "${1:-}" != bare ]] || return 0
  start_services
  sleep 5
}

start_services() {
  local port=19100
  for s in "${SERVICES[@]}"; do
    port=$((port + 1))
    VIGIL_METRICS_ADDR="127.0.0.1:$port" RUST_LOG=warn "$BIN"/vigil "$s" 2>"$VIGIL_STACK_STATE/$s.log" &
    PIDS+=($!)
  done
}

# Every task of a service has read the end-of-input markers.
# shellcheck disable=SC2016
AT_END='/^vigil_input_ended[{ ]/ && $NF == 1 { done = 1 } END { exit !done }'
all_done() {
  local port
  for port in $(seq 19101 19106); do
    awk "$AT_END" <<<"$(curl -s "127.0.0.1:$port/metrics")" || return 1
  done
}

now() { date +%s.%N; }

echo "== building (release)"
[[ "$BIN" != target/release ]] || cargo build --release --workspace --bins --locked -q
# The probe is the instrument, not the subject: always this tree's.
cargo build --release -p vigil-kafka --example latency_probe --locked -q
mapfile -t SERVICES < <("$BIN"/vigil stages)
echo "== the broker's JVM: $KAFKA_HEAP_OPTS $KAFKA_JVM_PERFORMANCE_OPTS"
[[ -z "${BROKER_CPU_PERCENT:-}" ]] || echo "== the broker under a CPU quota of ${BROKER_CPU_PERCENT} % of one core"

# CPU seconds (user + system) a process has spent so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$1/stat"
}

# Planted + $2 thousand events keyed as $1 (join: as the stages join them; none:
# unkeyed, so the join and the device router re-key most through their repartition
# topics), pre-loaded, then processed and committed by all six services.
process_preloaded() {
  local t0 t1 events broker broker_cpu
  "$BIN"/vigil generate --kafka --scale "$2" --keys "$1" 2>"$VIGIL_STACK_STATE/generator.log"
  events=$(grep -o 'produced [0-9]*' "$VIGIL_STACK_STATE/generator.log" | grep -o '[0-9]*')
  broker=$(cat "$VIGIL_STACK_STATE/run/kafka.pid")
  broker_cpu=$(cpu_seconds "$broker")
  broker_requests >"$VIGIL_STACK_STATE/requests.before"
  t0=$(now)
  start_services
  until all_done; do sleep 0.2; done
  t1=$(now)
  broker_requests >"$VIGIL_STACK_STATE/requests.after"
  LAST_RATE=$(awk -v n="$events" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')
  awk -v n="$events" -v a="$t0" -v b="$t1" 'BEGIN {
    printf "input events: %d\nprocessed and committed by all six services in %.1f s from their start: %.0f events/s sustained\n",
      n, b - a, n / (b - a) }'
  local i
  for i in "${!SERVICES[@]}"; do
    printf '%s: CPU %s s, peak RSS %s, %s\n' "${SERVICES[i]}" "$(cpu_seconds "${PIDS[i]}")" \
      "$(awk '/^VmHWM/ {print $2, $3}' "/proc/${PIDS[i]}/status")" \
      "$(curl -s "127.0.0.1:$((19101 + i))/metrics" | awk '
        /^vigil_transaction_commits_total[{ ]/ { c += $NF } /^vigil_transaction_aborts_total[{ ]/ { a += $NF }
        /^vigil_transaction_commit_seconds_sum[{ ]/ { s += $NF } /^vigil_rerouted_records_total[{ ]/ { r += $NF }
        /^vigil_changelog_records_total[{ ]/ { l += $NF }
        END { printf "%d commits (mean %.0f ms), %d aborts, %d rerouted, %d changelog records",
          c, c ? 1000 * s / c : 0, a, r, l }')"
  done
  awk -v a="$broker_cpu" -v b="$(cpu_seconds "$broker")" -v n="$events" \
    'BEGIN { printf "broker: CPU %.1f s, %.3f s per thousand input events\n", b - a, 1000 * (b - a) / n }'
  [[ -z "$CPU_QUOTA_GROUP" ]] || echo "broker: throttled by its quota for $(cpu_quota_throttled_seconds) s in all so far"
  request_rates "$VIGIL_STACK_STATE/requests.before" "$VIGIL_STACK_STATE/requests.after" "$events" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
  echo "broker: $(log_bytes) (Vigil's written with compression ${VIGIL_TOPICS_COMPRESSION:-zstd})"
}

# The bytes the broker's logs hold (Kafka's LogDirs tool): the input topics' (as the
# generator wrote them, uncompressed) and the rest's (what the stages wrote).
log_bytes() {
  scripts/local-stack.sh kafka-class org.apache.kafka.tools.LogDirsCommand \
    --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" --describe 2>/dev/null | grep '^{' | python3 -c '
import json, sys
sizes = {"input": 0, "vigil": 0}
for b in json.load(sys.stdin)["brokers"]:
    for d in b["logDirs"]:
        for p in d["partitions"]:
            topic = p["partition"].rsplit("-", 1)[0]
            if not topic.startswith("__"):
                sizes["input" if topic in ("orders", "payments", "device-events") else "vigil"] += p["size"]
print(sizes["input"], "bytes in the input topics,", sizes["vigil"], "in the topics Vigil writes")'
}

# "type count" lines: the broker's requests handled so far, by type (all versions),
# the KRaft controller's own (heartbeats, registration) left out, and FetchConsumer and
# FetchFollower too (the Fetch requests again, by who sent them).
broker_requests() {
  scripts/local-stack.sh kafka-class org.apache.kafka.tools.JmxTool --one-time true --report-format tsv \
    --jmx-url "service:jmx:rmi:///jndi/rmi://127.0.0.1:$JMX_PORT/jmxrmi" --attributes Count \
    --object-name 'kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*' 2>/dev/null |
    awk -F'\t' '/request=/ { match($1, /request=[A-Za-z]*/); t = substr($1, RSTART + 8, RLENGTH - 8)
      if (t !~ /^(Broker|Controller|FetchConsumer|FetchFollower)/) n[t] += $2 } END { for (t in n) print t, n[t] }'
}

# The requests between two broker_requests readings ($1, $2) for $3 input events
# over $4 seconds: in all, and the types with at least 1 % of them.
request_rates() {
  awk -v n="$3" -v s="$4" 'FNR == NR { before[$1] = $2; next } { d[$1] = $2 - before[$1]; total += d[$1] }
    END {
      printf "broker: %d requests, %.0f a second, %.3f per input event;", total, total / s, total / n
      for (t in d) if (d[t] >= total / 100) printf " %s %.0f/s", t, d[t] / s
      print ""
    }' "$1" "$2"
}

# Stops the services and deletes every topic they and the generator use (and with
# them the groups' offsets there), then provisions them again: the broker as it was
# before the first run, but warm.
clear_topics() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait "${PIDS[@]}" 2>/dev/null || true
  PIDS=()
  scripts/local-stack.sh kafka-class org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" --delete --topic '[^_].*' >/dev/null
  # Their files go a second later (`file.delete.delay.ms`): not during what follows.
  local waited=0
  while compgen -G "$VIGIL_STACK_STATE/run/kafka/data/*-delete" >/dev/null && ((waited++ < 300)); do sleep 0.1; done
  until "$BIN"/vigil provision >/dev/null 2>&1; do sleep 0.5; done
}

throughput() {
  echo "== 1. throughput: planted + ${SCALE}k events pre-loaded, keyed: $1"
  fresh_stack bare
  if ((WARM_SCALE > 0)); then
    echo "-- warm-up on the new broker (not a figure): planted + ${WARM_SCALE}k events"
    process_preloaded "$1" "$WARM_SCALE"
    clear_topics
    echo "-- measured, on the warm broker"
  fi
  process_preloaded "$1" "$SCALE"
}


if [[ " $PARTS " == *" throughput "* ]]; then
  for keys in $KEYS; do throughput "$keys"; done
fi

if [[ " $PARTS " == *" latency "* ]]; then
  echo "== 2. latency at ${RATE} events/s for ${SECONDS_LATENCY} s, after ${WARMUP} s of it"
  # The seed's multiplier (3) flagged none of the normal traffic in the probe's
  # window; a lower SIGMA flags more, for samples of the two hops (it changes only
  # what is flagged, not the path a payment takes).
  [[ -z "${SIGMA:-}" ]] || export VIGIL_PAYMENTS_AMOUNT_SIGMA_MULTIPLIER="$SIGMA"
  # The broker logs its collections, for the probe to line the hops' tails up with.
  gc_log="$VIGIL_STACK_STATE/broker-gc.log"
  KAFKA_GC_LOG="$gc_log" fresh_stack
  "$BIN"/vigil generate --kafka --no-finish --rate "$RATE" \
    --scale "$((RATE * (WARMUP + SECONDS_LATENCY) / 1000))" 2>>"$VIGIL_STACK_STATE/generator.log" &
  generator=$!
  sleep "$WARMUP"
  curl -s 127.0.0.1:19101/metrics >"$VIGIL_STACK_STATE/join-enrich.metrics"
  curl -s 127.0.0.1:19104/metrics >"$VIGIL_STACK_STATE/device-router.metrics"
  curl -s 127.0.0.1:19103/metrics >"$VIGIL_STACK_STATE/payment-anomalies.metrics"
  # Ten seconds past the input's end, to see the outputs of its last records.
  target/release/examples/latency_probe "$((SECONDS_LATENCY + 10))" "$gc_log" &
  probe=$!
  # Where the two cores went meanwhile: every process's CPU seconds over the probe's
  # run, read each second (a process that ends, the generator say, keeps its last).
  run="$VIGIL_STACK_STATE/run"
  names=("${SERVICES[@]}" broker registry generator probe)
  watched=("${PIDS[@]}" "$(cat "$run/kafka.pid")" "$(cat "$run/registry.pid")" "$generator" "$probe")
  cpu_before=() cpu_after=()
  for i in "${!watched[@]}"; do cpu_before[i]=$(cpu_seconds "${watched[i]}"); done
  cpu_after=("${cpu_before[@]}")
  while kill -0 "$probe" 2>/dev/null; do
    for i in "${!watched[@]}"; do
      cpu_after[i]=$(cpu_seconds "${watched[i]}" 2>/dev/null || echo "${cpu_after[i]}")
    done
    sleep 1
  done
  wait "$probe"
  line="CPU seconds over the probe's $((SECONDS_LATENCY + 10)) s (two cores: $((2 * (SECONDS_LATENCY + 10))) s):"
  for i in "${!names[@]}"; do
    line+=$(awk -v n="${names[i]}" -v a="${cpu_before[i]}" -v b="${cpu_after[i]}" 'BEGIN { printf " %s %.1f", n, b - a }')
  done
  echo "$line"
  hops join-enrich 19101 "$VIGIL_STACK_STATE/join-enrich.metrics"
  hops device-router 19104 "$VIGIL_STACK_STATE/device-router.metrics"
  hops payment-anomalies 19103 "$VIGIL_STACK_STATE/payment-anomalies.metrics"
  wait "$generator"
fi

# Starts one service alone ($STARTED) and prints how long it took until $2 held
# in its metrics (an awk program over them), and what its restore read.
time_to() {
  local service=$1 until=$2 what=$3 port=19120 t0 metrics log
  STARTS=$((STARTS + 1))
  log="$VIGIL_STACK_STATE/$service-$STARTS.log"
  t0=$(now)
  VIGIL_METRICS_ADDR="127.0.0.1:$port" RUST_LOG=info NO_COLOR=1 "$BIN"/vigil "$service" 2>"$log" &
  STARTED=$!
  until metrics=$(curl -s "127.0.0.1:$port/metrics") && awk "$until" <<<"$metrics"; do
    sleep 0.01
  done
  awk -v a="$t0" -v b="$(now)" -v s="$service" -v what="$what" 'BEGIN { printf "%s: %s %.2f s after start", s, what, b - a }'
  grep -o 'records=[0-9]* seconds=[0-9.]*' "$log" | head -n 1 | sed 's/^/; restore: /' || true
  echo
}
STARTS=0
# shellcheck disable=SC2016 # awk programs
FIRST_OUTPUT='/^vigil_transaction_commits_total[{ ]/ { c += $NF } /^vigil_records_out_total[{ ]/ { o += $NF }
  END { exit !(c > 0 && o > 0) }'
# shellcheck disable=SC2016
READY='/^vigil_tasks[{ ]/ { t += $NF } END { exit !(t > 0) }'

if [[ " $PARTS " == *" startup "* ]]; then
  echo "== 4. start-up on empty, then on committed changelogs"
  fresh_stack bare
  "$BIN"/vigil generate --kafka --scale 10 2>"$VIGIL_STACK_STATE/generator.log"
  # A new broker's first transactional producer waits while it creates its
  # transaction log: a health monitor run first takes that out of the figures.
  time_to health-monitor "$READY" "warm-up (not a figure):"
  kill "$STARTED"
  wait "$STARTED" 2>/dev/null || true
  # In pipeline order, so that each stage finds its input complete.
  for service in join-enrich device-router payment-anomalies device-analytics; do
    time_to "$service" "$FIRST_OUTPUT" "empty changelogs, first output committed"
    kill -9 "$STARTED"
    wait "$STARTED" 2>/dev/null || true
    time_to "$service" "$READY" "after kill -9, tasks restored and reading"
    until awk "$AT_END" <<<"$(curl -s 127.0.0.1:19120/metrics)"; do sleep 0.2; done
    kill "$STARTED"
    wait "$STARTED" 2>/dev/null || true
  done
fi

# Kafka's own producer perf tool on the broker as it is: its records/s (1 000 000
# records of 100 bytes, acks=all, into a new topic of four partitions).
producer_perf() {
  local topic="perf-test-$RANDOM"
  scripts/local-stack.sh kafka-class org.apache.kafka.tools.TopicCommand --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" \
    --create --topic "$topic" --partitions 4 --replication-factor 1 >/dev/null
  scripts/local-stack.sh kafka-class org.apache.kafka.tools.ProducerPerformance --topic "$topic" \
    --num-records 1000000 --record-size 100 --throughput -1 \
    --command-property bootstrap.servers="$VIGIL_BOOTSTRAP_SERVERS" acks=all | tail -n 1 | tee "$VIGIL_STACK_STATE/perf.out"
  PERF_TOPIC=$topic
  PERF_RATE=$(sed -n 's/^[0-9]* records sent, \([0-9.]*\) records\/sec.*/\1/p' "$VIGIL_STACK_STATE/perf.out")
}

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

if [[ " $PARTS " == *" ratios "* ]]; then
  echo "== 5. ratios to Kafka's own producer: $RUNS runs alternating, planted + ${SCALE}k events, keyed: $KEYS"
  fresh_stack bare
  for keys in $KEYS; do
    echo "-- warm-up on the new broker (not a figure): planted + ${WARM_SCALE}k events, keyed: $keys"
    process_preloaded "$keys" "$WARM_SCALE" >/dev/null
    clear_topics
  done
  # The producer's path through the broker is compiled too before it counts (under
  # a quota, the broker's compiler threads are throttled with the rest).
  echo "-- warm-up of the producer (not a figure)"
  producer_perf >/dev/null
  producer_perf >/dev/null
  clear_topics
  declare -A ratios=() rates=()
  for ((run = 1; run <= RUNS; run++)); do
    # Which goes first alternates: the two halves of a run may find the host otherwise.
    ((run % 2)) || producer_perf
    for keys in $KEYS; do
      echo "-- run $run, keyed: $keys"
      process_preloaded "$keys" "$SCALE"
      rates[$keys]=$LAST_RATE
      clear_topics
    done
    ((run % 2 == 0)) || producer_perf
    scripts/local-stack.sh kafka-class org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" --delete --if-exists --topic "$PERF_TOPIC" >/dev/null
    for keys in $KEYS; do
      ratio=$(awk -v v="${rates[$keys]}" -v p="$PERF_RATE" 'BEGIN { printf "%.3f", v / p }')
      ratios[$keys]+="$ratio "
      echo "run $run, keyed $keys: services ${rates[$keys]} events/s, producer $PERF_RATE records/s: ratio $ratio"
    done
  done
  for keys in $KEYS; do
    # shellcheck disable=SC2086 # the list of ratios, split
    echo "median ratio, keyed $keys, over $RUNS runs: $(printf '%s\n' ${ratios[$keys]} | median) (runs: ${ratios[$keys]% })"
  done
fi

[[ " $PARTS " == *" raw "* ]] || exit 0
echo "== 3. the raw broker: Kafka's perf tools, 1 000 000 records of 100 bytes"
"$BIN"/vigil provision >/dev/null
producer_perf
scripts/local-stack.sh kafka-class org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" \
  --topic "$PERF_TOPIC" --messages 1000000 --group "perf-$$" | tail -n 2
