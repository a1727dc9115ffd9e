#!/usr/bin/env bash
# One hop's latency, Vigil's join-enrich against the same join in Kafka Streams, at one
# rate on one broker (a benchmark, not a test).
#
#   scripts/bench-latency.sh [RATE] [SECONDS]
#
# One fresh local stack (the broker with the JVM arguments of scripts/bench-kafka.sh),
# then one after the other on it, each fed the same dataset (`vigil generate --out`,
# the planted dataset plus normal traffic for WARMUP + SECONDS at RATE) at RATE
# events/s counting its three streams, as `vigil generate --kafka --no-finish --rate`
# sends it:
#   0. Kafka's own producer perf tool, 300 000 records of 100 bytes, so that the
#      host's (and the quota's) speed is on record;
#   1. Vigil's six services (`vigil stages`, or STAGES; metrics on 127.0.0.1:19201..), the
#      generator replaying the dataset, and after WARMUP seconds
#      target/release/examples/latency_probe for SECONDS + 10: p50/p99 from a
#      payment's production (its Kafka timestamp) to its enriched record being
#      readable under read_committed; and where join-enrich's time went meanwhile, from
#      its vigil_record_hop_seconds histograms (queued: produced -> read; processing:
#      read -> its batch's outputs sent; commit_wait: read -> committed), read as the
#      upper bounds of the buckets the percentiles fall in;
#   2. the Kafka Streams peer (scripts/kstreams-peer: exactly_once_v2, its default
#      commit interval of 100 ms, PEER_STORE window stores) on JSON copies of the
#      orders and payments, fed and measured by the peer's `latency` tool the same way
#      (the device events are paced but not sent: the peer reads none), its hops split
#      by the wall-clock stamps the peer leaves in its outputs' headers (the parts of a
#      sample's own record, so over outputs rather than every input record).
# Then the ratio of the two p99s, and PASS if Vigil's p99 is at most the peer's and at
# most 100 ms. The broker's CPU seconds over each window show what each side cost it.
# Vigil runs first, on the newer broker.
#
# RATE defaults to 40 % of THROUGHPUT (input events/s that scripts/bench-kafka.sh
# measured on this host, its keyed figure) when that is set, else 20 000.
# Env: THROUGHPUT; WARMUP seconds before each window (default 40); BROKER_CPU_PERCENT
# (unset: unconstrained) puts the broker under a CPU quota of that % of one core as
# soon as it runs (scripts/lib/cpu-quota.sh: root or a delegated cgroup), for the
# whole run, perf tool included; PEER_STORE memory (default) or rocksdb;
# KSTREAMS_HEAP_OPTS (the peer's JVM heap, default -Xmx1g); KAFKA_HEAP_OPTS and
# KAFKA_JVM_PERFORMANCE_OPTS as in scripts/bench-kafka.sh; STAGES (default: all six,
# as deployed) the Vigil stages to run, join-enrich first (`STAGES=join-enrich`: the
# broker serves the one join on both sides). The stack runs from
# .cache/latency-stack and is stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
THROUGHPUT="${THROUGHPUT:-}"
RATE="${1:-$([[ -n "$THROUGHPUT" ]] && echo $((THROUGHPUT * 40 / 100)) || echo 20000)}"
SECONDS_LATENCY="${2:-30}"
WARMUP="${WARMUP:-40}"
# Past the window, to see the outputs of its last records (as bench-kafka.sh's probe).
TAIL=10
PEER_STORE="${PEER_STORE:-memory}"
PEER_HEAP="${KSTREAMS_HEAP_OPTS:--Xmx1g}"
export VIGIL_STACK_STATE="$PWD/.cache/latency-stack"
STATE="$VIGIL_STACK_STATE"
export KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS--Xms6g -Xmx6g -Xmn4g}"
export KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS--XX:MetaspaceSize=96m -XX:+UseG1GC \
-XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:G1HeapRegionSize=16M \
-XX:MinMetaspaceFreeRatio=50 -XX:MaxMetaspaceFreeRatio=80 -XX:+ExplicitGCInvokesConcurrent}"
PEER_DIR=scripts/kstreams-peer
PEER_CP="$PEER_DIR/target/kstreams-peer.jar:$PEER_DIR/target/lib/*"
PIDS=()

# shellcheck source=scripts/lib/stack.sh disable=SC1091
. scripts/lib/stack.sh
# shellcheck source=scripts/lib/hops.sh
. scripts/lib/hops.sh
# shellcheck source=scripts/lib/cpu-quota.sh disable=SC1091
. scripts/lib/cpu-quota.sh
trap 'stack_down_with_pids; cpu_quota_release' EXIT

die() { echo "bench-latency: ERROR: $*" >&2; exit 1; }

peer_tool() {
  java -Xmx512m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$PEER_CP" dev.vigil.kstreams.Main "$@"
}

# CPU seconds (user + system) a process has spent so far.
cpu_seconds() {
  sed 's/^.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($12 + $13) / hz }'
}


# "p50 p99 samples" from a latency line: "NAME: N samples, latency p50 X ms, p99 Y ms, ...".
figures() {
  sed -n 's/.*: \([0-9]*\) samples, latency p50 \([0-9]*\) ms, p99 \([0-9]*\) ms.*/\2 \3 \1/p' <<<"$1"
}

echo "== building (release)"
cargo build --release --workspace --bins --locked -q
cargo build --release -p vigil-kafka --example latency_probe --locked -q
mvn -B -ntp -q -f "$PEER_DIR/pom.xml" package
mapfile -t SERVICES < <(target/release/vigil stages)
# shellcheck disable=SC2206  # a list of names
[[ -z "${STAGES:-}" ]] || SERVICES=($STAGES)
[[ "${SERVICES[0]}" == join-enrich ]] || die "expected join-enrich first among the stages, got ${SERVICES[0]}"

SCALE=$((RATE * (WARMUP + SECONDS_LATENCY) / 1000))
echo "== dataset: planted + ${SCALE}k events, for ${WARMUP} + ${SECONDS_LATENCY} s at ${RATE} events/s"
scripts/local-stack.sh stop >/dev/null 2>&1 || true
mkdir -p "$STATE"
DATA="$STATE/dataset"
rm -rf "$DATA" "$STATE/kstreams-state"
target/release/vigil generate --out "$DATA" --scale "$SCALE" 2>"$STATE/generator.log"

echo "== the broker's JVM: $KAFKA_HEAP_OPTS $KAFKA_JVM_PERFORMANCE_OPTS"
stack_up
BROKER=$(cat "$STATE/run/kafka.pid")
QUOTA="unconstrained"
if [[ -n "${BROKER_CPU_PERCENT:-}" ]]; then
  cpu_quota_apply "$BROKER" "$BROKER_CPU_PERCENT" || die "no CPU quota for the broker"
  QUOTA="under a CPU quota of $BROKER_CPU_PERCENT % of one core"
fi
echo "the broker: $QUOTA"

echo "== 0. Kafka's producer perf tool on this broker: 300 000 records of 100 bytes"
scripts/local-stack.sh kafka-class org.apache.kafka.tools.TopicCommand --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" \
  --create --topic perf-test --partitions 4 --replication-factor 1 >/dev/null
PERF=$(scripts/local-stack.sh kafka-class org.apache.kafka.tools.ProducerPerformance --topic perf-test \
  --num-records 300000 --record-size 100 --throughput -1 \
  --command-property bootstrap.servers="$VIGIL_BOOTSTRAP_SERVERS" acks=all | tail -n 1)
echo "$PERF"
PERF_RATE=$(sed -n 's/^[0-9]* records sent, \([0-9.]*\) records\/sec.*/\1/p' <<<"$PERF")
PERF_RATE=$(printf "%.0f" "${PERF_RATE:-0}")

WINDOW=$((SECONDS_LATENCY + TAIL))
echo "== 1. Vigil: ${SERVICES[*]} at ${RATE} events/s; ${SECONDS_LATENCY} s (+ ${TAIL}) measured after ${WARMUP} s"
target/release/vigil provision >/dev/null
port=19200
for s in "${SERVICES[@]}"; do
  port=$((port + 1))
  VIGIL_METRICS_ADDR="127.0.0.1:$port" RUST_LOG=warn target/release/vigil "$s" 2>"$STATE/$s.log" &
  PIDS+=($!)
done
SERVICE_PIDS=("${PIDS[@]}")
sleep 5
target/release/vigil generate --kafka --input "$DATA" --no-finish --rate "$RATE" 2>>"$STATE/generator.log" &
generator=$!
PIDS+=("$generator")
sleep "$WARMUP"
curl -s 127.0.0.1:19201/metrics >"$STATE/join-enrich.metrics"
throttled_before=$(cpu_quota_throttled_seconds)
target/release/examples/latency_probe "$WINDOW" >"$STATE/probe.out" &
probe=$!
# Every process's CPU seconds over the probe's run, read each second (one that ends,
# the generator say, keeps its last).
names=(broker join-enrich other-services generator probe)
others=("${SERVICE_PIDS[@]:1}")
cpu_now() {
  local sum=0 pid
  for pid in "$@"; do sum=$(awk -v a="$sum" -v b="$(cpu_seconds "$pid" 2>/dev/null || echo 0)" 'BEGIN { print a + b }'); done
  echo "$sum"
}
read_cpu() {
  echo "$(cpu_now "$BROKER") $(cpu_now "${SERVICE_PIDS[0]}") $(cpu_now "${others[@]}") $(cpu_now "$generator") $(cpu_now "$probe")"
}
read -r -a cpu_before <<<"$(read_cpu)"
cpu_after=("${cpu_before[@]}")
while kill -0 "$probe" 2>/dev/null; do
  read -r -a now <<<"$(read_cpu)"
  for i in "${!now[@]}"; do
    # A process gone reads 0: keep its last figure.
    awk -v a="${now[i]}" -v b="${cpu_after[i]}" 'BEGIN { exit !(a >= b) }' && cpu_after[i]=${now[i]}
  done
  sleep 1
done
wait "$probe" || die "the latency probe failed"
throttled_vigil=$(awk -v a="$throttled_before" -v b="$(cpu_quota_throttled_seconds)" 'BEGIN { printf "%.1f", b - a }')
VIGIL_LINE=$(grep '^payment -> enriched payment (join-enrich)' "$STATE/probe.out") || die "no join-enrich line from the probe"
echo "$VIGIL_LINE"
line="CPU seconds over the window's $WINDOW s (two cores: $((2 * WINDOW)) s):"
for i in "${!names[@]}"; do
  line+=$(awk -v n="${names[i]}" -v a="${cpu_before[i]}" -v b="${cpu_after[i]}" 'BEGIN { printf " %s %.1f", n, b - a }')
done
echo "$line"
VIGIL_BROKER_CPU=$(awk -v a="${cpu_before[0]}" -v b="${cpu_after[0]}" 'BEGIN { printf "%.1f", b - a }')
VIGIL_HOPS=$(hops join-enrich 19201 "$STATE/join-enrich.metrics")
echo "$VIGIL_HOPS"
wait "$generator" || true
for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
wait "${PIDS[@]}" 2>/dev/null || true
PIDS=()

echo "== 2. Kafka Streams (exactly_once_v2, commit every 100 ms, $PEER_STORE stores) at ${RATE} events/s; the same window"
peer_tool topics --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --names kstreams-orders,kstreams-payments,kstreams-enriched-latency
# shellcheck disable=SC2086  # PEER_HEAP is deliberately word-split
java $PEER_HEAP -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$PEER_CP" dev.vigil.kstreams.Main run \
  --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --store "$PEER_STORE" --app-id kstreams-latency \
  --output kstreams-enriched-latency --state-dir "$STATE/kstreams-state" --stamp true >"$STATE/kstreams.log" 2>&1 &
peer=$!
PIDS+=("$peer")
sleep 5
peer_tool latency --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --dir "$DATA" --rate "$RATE" --warmup-s "$WARMUP" \
  --seconds "$SECONDS_LATENCY" --tail-s "$TAIL" --output kstreams-enriched-latency \
  --watch "broker:$BROKER,kstreams:$peer" --clk-tck "$(getconf CLK_TCK)" ${CPU_QUOTA_GROUP:+--cpu-stat "$CPU_QUOTA_GROUP/cpu.stat"} \
  >"$STATE/peer-latency.out" 2>"$STATE/peer-latency.log" ||
  { cat "$STATE/peer-latency.log" >&2; die "the peer's latency tool failed"; }
kill -0 "$peer" 2>/dev/null || { tail -n 30 "$STATE/kstreams.log" >&2; die "the peer stopped (log: $STATE/kstreams.log)"; }
cat "$STATE/peer-latency.log" "$STATE/peer-latency.out"
PEER_LINE=$(grep '^payment -> enriched payment (kstreams peer)' "$STATE/peer-latency.out") || die "no line from the peer's tool"
PEER_BROKER_CPU=$(sed -n 's/^CPU seconds.* broker \([0-9.]*\).*/\1/p' "$STATE/peer-latency.out")
throttled_peer=$(sed -n 's/^CPU seconds.* quota-waits \([0-9.]*\).*/\1/p' "$STATE/peer-latency.out")

read -r v50 v99 vn <<<"$(figures "$VIGIL_LINE")"
read -r k50 k99 kn <<<"$(figures "$PEER_LINE")"
[[ -n "$v99" && -n "$k99" ]] || die "a side has no samples"
echo "== results: ${RATE} events/s (orders, payments and device events; the peer is sent the orders and payments), ${SECONDS_LATENCY} s after ${WARMUP} s; the broker $QUOTA; Kafka's producer perf ${PERF_RATE:-?} records/s"
printf '%-24s %8s %8s %8s %28s %16s\n' "payment -> enriched" samples "p50 ms" "p99 ms" "broker CPU s (of $((2 * WINDOW)))" "quota waits s"
printf '%-24s %8s %8s %8s %28s %16s\n' "  Vigil join-enrich" "$vn" "$v50" "$v99" "$VIGIL_BROKER_CPU" "$throttled_vigil"
printf '%-24s %8s %8s %8s %28s %16s\n' "  Kafka Streams" "$kn" "$k50" "$k99" "$PEER_BROKER_CPU" "${throttled_peer:-0.0}"
echo "hops, Vigil ($VIGIL_HOPS)"
echo "hops, peer ($(grep '^kstreams-peer:' "$STATE/peer-latency.out" | sed 's/^kstreams-peer: //'))"
awk -v v="$v99" -v k="$k99" 'BEGIN {
  printf "Vigil p99 / peer p99: %.2f\n", v / k
  pass = v <= k && v <= 100
  printf "%s: Vigil one-hop p99 %d ms %s the peer'"'"'s %d ms and %s 100 ms\n", pass ? "PASS" : "FAIL", v, v <= k ? "<=" : ">", k, v <= 100 ? "<=" : ">"
}'
