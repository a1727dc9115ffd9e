#!/usr/bin/env bash
# Benchmark of the six Kafka services on one local broker (not a test).
#
#   scripts/bench-kafka.sh [SCALE] [RATE] [SECONDS]
#
# 1. Throughput: the planted dataset plus SCALE thousand events (default 1000, about
#    a million) produced as fast as the generator can, then end-of-input markers; the
#    figure is input events over the time until every service's watermark reached the
#    end, i.e. everything was processed and committed. Twice: keyed as the stages
#    join, then unkeyed (the cost of the repartition path).
# 2. Latency: a fresh stack, normal traffic at RATE events/s (default 2000) for
#    SECONDS (default 30); p50/p99 from an input record's production to its output
#    becoming readable under read_committed (see shared/kafka/examples/latency_probe.rs).
# 3. The raw broker on the same machine in the same run: Kafka's own producer and
#    consumer perf tools, one million 100-byte records.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE="${1:-1000}"
RATE="${2:-2000}"
SECONDS_LATENCY="${3:-30}"
export VIGIL_STACK_STATE="$PWD/.cache/bench-stack"
SERVICES=(join-enrich payment-metrics payment-anomalies device-router device-analytics health-monitor)
PIDS=()

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/local-stack.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

fresh_stack() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  PIDS=()
  scripts/local-stack.sh stop >/dev/null 2>&1 || true
  scripts/local-stack.sh start >/dev/null
  set -a; . "$VIGIL_STACK_STATE/env"; set +a
  target/release/vigil-admin provision >/dev/null
  local port=19100
  for s in "${SERVICES[@]}"; do
    port=$((port + 1))
    VIGIL_METRICS_ADDR="127.0.0.1:$port" RUST_LOG=warn target/release/vigil-"$s" 2>"$VIGIL_STACK_STATE/$s.log" &
    PIDS+=($!)
  done
  sleep 5
}

# Every service's lowest task watermark at the end of time (the gauge is clamped).
all_done() {
  local port
  for port in $(seq 19101 19106); do
    curl -s "127.0.0.1:$port/metrics" | grep -q '^vigil_watermark_ms{[^}]*} 4611686018427388' || return 1
  done
}

now() { date +%s.%N; }

echo "== building (release)"
cargo build --release --workspace --bins --locked -q
cargo build --release -p vigil-kafka --example latency_probe --locked -q

# Planted + SCALE thousand events keyed as $1 (join: as the stages join them; none:
# unkeyed, so the join and the device router re-key most through their repartition
# topics), processed and committed by all six services.
throughput() {
  echo "== 1. throughput: planted + ${SCALE}k events, keyed: $1"
  fresh_stack
  local t0 t_produced t1 events
  t0=$(now)
  target/release/vigil-generator --kafka --scale "$SCALE" --keys "$1" 2>"$VIGIL_STACK_STATE/generator.log"
  t_produced=$(now)
  until all_done; do sleep 0.5; done
  t1=$(now)
  events=$(grep -o 'produced [0-9]*' "$VIGIL_STACK_STATE/generator.log" | grep -o '[0-9]*')
  awk -v n="$events" -v a="$t0" -v p="$t_produced" -v b="$t1" 'BEGIN {
    printf "input events: %d\nproduced in %.1f s (%.0f events/s)\nprocessed and committed by all six services in %.1f s: %.0f events/s sustained\n",
      n, p - a, n / (p - a), b - a, n / (b - a) }'
  for port in $(seq 19101 19106); do
    curl -s "127.0.0.1:$port/metrics" |
      grep -E '^vigil_(transaction_commits_total|transaction_aborts_total|rerouted_records_total)' | tr '\n' ' '
    echo
  done
}
throughput join
throughput none

echo "== 2. latency at ${RATE} events/s for ${SECONDS_LATENCY} s"
fresh_stack
target/release/examples/latency_probe "$((SECONDS_LATENCY + 10))" &
probe=$!
sleep 3
target/release/vigil-generator --kafka --no-finish --rate "$RATE" --scale "$((RATE * SECONDS_LATENCY / 1000))" \
  2>>"$VIGIL_STACK_STATE/generator.log"
wait "$probe"

echo "== 3. the raw broker: Kafka's perf tools, 1 000 000 records of 100 bytes"
target/release/vigil-admin provision >/dev/null
scripts/local-stack.sh kafka-class org.apache.kafka.tools.TopicCommand --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" \
  --create --topic perf-test --partitions 4 --replication-factor 1 >/dev/null
scripts/local-stack.sh kafka-class org.apache.kafka.tools.ProducerPerformance --topic perf-test \
  --num-records 1000000 --record-size 100 --throughput -1 \
  --command-property bootstrap.servers="$VIGIL_BOOTSTRAP_SERVERS" acks=all | tail -n 1
scripts/local-stack.sh kafka-class org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" \
  --topic perf-test --messages 1000000 --group "perf-$$" | tail -n 2
