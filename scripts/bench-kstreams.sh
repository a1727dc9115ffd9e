#!/usr/bin/env bash
# Vigil's join-enrich stage against Kafka Streams on one local broker (a benchmark,
# not a test).
#
#   scripts/bench-kstreams.sh [SCALE] [PEER_THREADS]
#
# One dataset of the generator (the planted scenarios plus SCALE thousand events of
# normal traffic, default 1000: half of them orders and payments, so about 500 000
# input records; its device events are left out, join-enrich reads none) goes into
# the input topics: as Avro to `orders` and `payments`, as `vigil generate --kafka`
# sends it, once for each of Vigil's runs in a namespace of its own (`runN.orders`,
# ...: a fresh consumer group, changelog and output), and once as JSON to
# `kstreams-orders` and `kstreams-payments` (scripts/kstreams-peer: `load`), all keyed
# by order_id and partitioned alike, each followed by an end-of-input record on every
# partition. Then, one after another from the start of their input, RUNS times
# (default 3) alternating:
#   - target/release/vigil join-enrich;
#   - the Kafka Streams application of the same join (scripts/kstreams-peer),
#     exactly_once_v2, commit every 100 ms, in-memory window stores, and Kafka
#     Streams' default emit interval for unmatched (spurious) results;
# and once the same with RocksDB window stores.
#
# Each runs until its consumer group has committed the end of its input, seen by
# polling the group's offsets every 20 ms; under exactly-once its outputs and offsets
# commit together. Its throughput is its input records (orders + payments) over the
# time from its first record read to that commit, so that neither side's start-up
# counts; the start-up (process start to first record read) is reported apart:
#   - Vigil: when its /metrics (polled every 10 ms) last showed
#     vigil_records_in_total at 0 before it counted one (the earlier bound of the
#     first read: Vigil's measured time is, if anything, longer than it was);
#   - the peer: the wall clock when its first input record reached the topology (a
#     `peek` after each source, printed by the application).
# CPU seconds (utime + stime) are counted over the same span, peak RSS (VmHWM) over
# the whole run. Kafka Streams emits unmatched payments only while it processes
# records, at most once a second by default; after its end-of-input record the peer
# sends that record through its join again once a second (PeerJoin.EndTicker), and
# the unmatched payments that this lets out after the commit are counted in the
# outputs, not in the time ("outputs at commit" against "outputs"). The outputs are
# compared with Vigil's first run record by record (a WARNING if they differ). Then
# the median input records/s of each side, the ratio Vigil/peer of each run, and the
# median ratio.
#
# PEER_THREADS: Kafka Streams' num.stream.threads (default 1). Env: RUNS;
# KSTREAMS_HEAP_OPTS (the peer's JVM heap, default -Xmx1g). The broker and its
# registry run from .cache/kstreams-stack and are stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE="${1:-1000}"
PEER_THREADS="${2:-1}"
RUNS="${RUNS:-3}"
PEER_HEAP="${KSTREAMS_HEAP_OPTS:--Xmx1g}"
export VIGIL_STACK_STATE="$PWD/.cache/kstreams-stack"
STATE="$VIGIL_STACK_STATE"
PARTITIONS="${VIGIL_RUNTIME_PARTITIONS:-4}"
PEER_DIR=scripts/kstreams-peer
PEER_CP="$PEER_DIR/target/kstreams-peer.jar:$PEER_DIR/target/lib/*"
# Vigil's /metrics while it runs.
METRICS_PORT=19301
PIDS=()

# shellcheck source=scripts/lib/stack.sh disable=SC1091
. scripts/lib/stack.sh
trap stack_down_with_pids EXIT

die() { echo "bench-kstreams: ERROR: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }

# The peer's tools (load, await, dump): a small JVM, warnings only.
peer_tool() {
  java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$PEER_CP" dev.vigil.kstreams.Main "$@"
}

# "partitions records" of a topic: its partition count and its end offsets summed.
topic_size() {
  scripts/local-stack.sh kafka-class org.apache.kafka.tools.GetOffsetShell \
    --bootstrap-server "$VIGIL_BOOTSTRAP_SERVERS" --topic "$1" |
    awk -F: '{ n++; sum += $3 } END { print n, sum }'
}

# utime + stime of a live process, in seconds.
cpu_seconds() {
  sed 's/^.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
}
peak_rss_mb() { awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }

# Tagged ENRICHED> lines (Vigil's `vigil tail`, or the peer's `dump`) to
# "payment_id unmatched amount_mismatch" lines, sorted: what both must agree on.
essentials() {
  sed -E 's/.*"payment_id": ?"([^"]*)".*"unmatched": ?(true|false).*"amount_mismatch": ?(true|false).*/\1 \2 \3/' "$1" |
    LC_ALL=C sort
}

median() { tr ' ' '\n' | sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== building (release)"
# The workspace, as scripts/bench-kafka.sh builds it: one package alone could unify
# features differently and rebuild.
cargo build --release --workspace --bins --locked -q
mvn -B -ntp -q -f "$PEER_DIR/pom.xml" package
KS_VERSION=unknown
for jar in "$PEER_DIR"/target/lib/kafka-streams-[0-9]*.jar; do
  KS_VERSION="${jar##*/kafka-streams-}"
  KS_VERSION="${KS_VERSION%.jar}"
done

echo "== dataset: planted + ${SCALE}k events (orders and payments only), $PARTITIONS partitions"
scripts/local-stack.sh stop >/dev/null 2>&1 || true
mkdir -p "$STATE"
DATA="$STATE/dataset"
rm -rf "$DATA" "$STATE/kstreams-state"
target/release/vigil generate --out "$DATA" --scale "$SCALE" 2>"$STATE/generator.log"
: >"$DATA/devices.ndjson"
ORDERS=$(grep -c . "$DATA/orders.ndjson")
PAYMENTS=$(grep -c . "$DATA/payments.ndjson")
INPUT=$((ORDERS + PAYMENTS))

stack_up
PEER_OUTPUTS=()
for run in $(seq "$RUNS"); do PEER_OUTPUTS+=("kstreams-enriched-memory-$run"); done
PEER_OUTPUTS+=(kstreams-enriched-rocksdb)
EXPECT=$(peer_tool load --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --dir "$DATA" --partitions "$PARTITIONS" \
  --create "$(IFS=,; echo "${PEER_OUTPUTS[*]}")" 2>"$STATE/load.log" | sed -n 's/^valid_payments=//p')
[[ -n "$EXPECT" ]] || { cat "$STATE/load.log" >&2; die "loading the JSON copy failed"; }
for run in $(seq "$RUNS"); do
  VIGIL_TOPICS_NAMESPACE="run$run" target/release/vigil provision >/dev/null
  VIGIL_TOPICS_NAMESPACE="run$run" target/release/vigil generate --kafka --input "$DATA" --partitions "$PARTITIONS" \
    2>>"$STATE/generator.log"
  for pair in orders:kstreams-orders payments:kstreams-payments; do
    avro=$(topic_size "run$run.${pair%%:*}")
    json=$(topic_size "${pair#*:}")
    ((run > 1)) ||
      echo "${pair%%:*}: Vigil's topic ${avro% *} partitions, ${avro#* } records; the peer's ${json% *} partitions, ${json#* } records (end-of-input records included)"
    [[ "$avro" == "$json" ]] || die "the two copies of ${pair%%:*} differ (run $run)"
  done
done
echo "input: $ORDERS orders + $PAYMENTS payments = $INPUT records; $EXPECT valid payments, so $EXPECT enriched records expected"

# When Vigil (pid $1) read its first record: the last poll of its /metrics that still
# counted none (sets FIRST_MS, and FIRST_CPU, its CPU seconds then).
vigil_first_read() {
  local t cpu n
  while kill -0 "$1" 2>/dev/null; do
    t=$(now_ms)
    cpu=$(cpu_seconds "$1")
    n=$(curl -s --max-time 1 "127.0.0.1:$METRICS_PORT/metrics" |
      awk '/^vigil_records_in_total[{ ]/ { s += $NF } END { print s + 0 }') || n=0
    ((n > 0)) && return 0
    FIRST_MS=$t FIRST_CPU=$cpu
    sleep 0.01
  done
}

# A value of await's line (in done_line): "key=value ...".
field() { sed -n "s/.*\<$1=\([0-9.-]*\).*/\1/p" <<<"$done_line"; }

RESULTS=()
# contend NAME KIND GROUP INPUT_TOPICS OUTPUT_TOPIC COMMAND...: runs the command (KIND
# vigil or peer) until its group has committed the end of its input and its outputs are
# in (see Tools.await), then stops it; appends "name startup_s measured_s cpu_s rss_mb
# outputs_then outputs last_output_s" to RESULTS.
contend() {
  local name="$1" kind="$2" group="$3" topics="$4" output="$5" pid t0 awaiter done_line rss
  shift 5
  echo "== $name"
  rm -f "$STATE/$name.pid"
  # Ready before the contender starts, so that its JVM's start takes nothing from the
  # contender's measured time.
  peer_tool await --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --group "$group" --topics "$topics" --output "$output" \
    --expect "$EXPECT" --pid-file "$STATE/$name.pid" --clk-tck "$(getconf CLK_TCK)" --timeout-s 1800 \
    >"$STATE/$name.await" 2>"$STATE/$name.await.log" &
  awaiter=$!
  PIDS+=("$awaiter")
  until grep -qs 'await ready' "$STATE/$name.await.log"; do
    kill -0 "$awaiter" 2>/dev/null || { cat "$STATE/$name.await.log" >&2; die "await for $name failed"; }
    sleep 0.05
  done
  t0=$(now_ms)
  FIRST_MS=$t0 FIRST_CPU=0
  "$@" >"$STATE/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  echo "$pid" >"$STATE/$name.pid"
  [[ "$kind" != vigil ]] || vigil_first_read "$pid"
  wait "$awaiter" || { tail -n 30 "$STATE/$name.log" >&2; die "$name did not finish (log: $STATE/$name.log)"; }
  rss=$(peak_rss_mb "$pid")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  if [[ "$kind" == peer ]]; then
    read -r FIRST_MS FIRST_CPU < <(sed -n 's/.*first record processed at_ms=\([0-9]*\) cpu_ms=\([0-9]*\).*/\1 \2/p' "$STATE/$name.log" |
      awk '{ printf "%.0f %.2f\n", $1, $2 / 1000 }') || die "$name did not say when it read its first record"
  fi
  done_line=$(cat "$STATE/$name.await")
  RESULTS+=("$(awk -v n="$name" -v t0="$t0" -v f="$FIRST_MS" -v fc="$FIRST_CPU" -v c="$(field committed_ms)" \
    -v cc="$(field cpu_at_commit_s)" -v r="$rss" -v ot="$(field outputs_then)" -v o="$(field output)" \
    -v lo="$(field last_output_ms)" 'BEGIN {
      printf "%s %.3f %.3f %.2f %d %d %d %.3f", n, (f - t0) / 1000, (c - f) / 1000, cc - fc, r, ot, o, (lo - t0) / 1000 }')")
  read -r _ startup measured cpu _ outputs_then outputs _ <<<"${RESULTS[-1]}"
  echo "start-up $startup s; first record read -> end of input committed $measured s ($outputs_then outputs readable then, $outputs in all), $cpu CPU s meanwhile, peak RSS $rss MB"
}

peer() {
  local store="$1" run="$2" suffix
  suffix=$([[ -n "$run" ]] && echo "$store-$run" || echo "$store")
  rm -rf "$STATE/kstreams-state"
  # shellcheck disable=SC2086  # PEER_HEAP is deliberately word-split
  contend "kstreams-$suffix" peer "kstreams-join-$suffix" kstreams-orders,kstreams-payments "kstreams-enriched-$suffix" \
    java $PEER_HEAP -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$PEER_CP" dev.vigil.kstreams.Main run \
    --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --store "$store" --threads "$PEER_THREADS" --state-dir "$STATE/kstreams-state" \
    --app-id "kstreams-join-$suffix" --output "kstreams-enriched-$suffix"
}

for run in $(seq "$RUNS"); do
  contend "vigil-$run" vigil "run$run.vigil-join-enrich" "run$run.orders,run$run.payments" "run$run.enriched-payments" \
    env VIGIL_TOPICS_NAMESPACE="run$run" VIGIL_METRICS_ADDR="127.0.0.1:$METRICS_PORT" RUST_LOG=warn \
    target/release/vigil join-enrich
  peer memory "$run"
done
peer rocksdb ""

echo "== outputs, record by record (payment_id, unmatched, amount_mismatch), against vigil-1's"
FLAGS=()
for r in "${RESULTS[@]}"; do
  name="${r%% *}"
  if [[ "$name" == vigil-* ]]; then
    VIGIL_TOPICS_NAMESPACE="run${name#vigil-}" target/release/vigil tail enriched-payments --idle-exit-secs 5 \
      >"$STATE/out-$name.ndjson" 2>/dev/null
  else
    peer_tool dump --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --topic "kstreams-enriched-${name#kstreams-}" >"$STATE/out-$name.ndjson"
  fi
  file="$STATE/essentials-$name.txt"
  essentials "$STATE/out-$name.ndjson" >"$file"
  FLAGS+=("$(wc -l <"$file") $(grep -c ' true [a-z]*$' "$file" || true) $(grep -c ' true$' "$file" || true)")
  [[ "$name" != vigil-1 ]] || continue
  differ=$(LC_ALL=C comm -3 "$STATE/essentials-vigil-1.txt" "$file" | wc -l)
  if ((differ == 0)); then
    echo "$name: the same $(wc -l <"$file") records as vigil-1's"
  else
    echo "WARNING: $name and vigil-1 differ in $differ lines (comm -3 $STATE/essentials-vigil-1.txt $file)"
  fi
done

echo "== results: planted + ${SCALE}k events, $INPUT input records (orders + payments), $PARTITIONS partitions, exactly-once, commit every 100 ms; Kafka Streams $KS_VERSION: $PEER_THREADS stream thread(s), $PEER_HEAP"
echo "(measured: first record read -> end of input committed; CPU over the same span; outputs at commit / in all)"
printf '%-18s %10s %10s %12s %8s %11s %9s %17s %10s %9s\n' contender "start-up s" "measured s" "input rec/s" "CPU s" \
  "CPU us/rec" "RSS MB" "outputs" unmatched mismatch
declare -A RATE_OF
for i in "${!RESULTS[@]}"; do
  read -r name startup measured cpu rss outputs_then outputs _ <<<"${RESULTS[$i]}"
  read -r lines unmatched mismatch <<<"${FLAGS[$i]}"
  RATE_OF[$name]=$(awk -v n="$INPUT" -v m="$measured" 'BEGIN { printf "%.0f", n / m }')
  awk -v n="$name" -v s="$startup" -v m="$measured" -v c="$cpu" -v r="$rss" -v ot="$outputs_then" -v o="$outputs" \
    -v inp="$INPUT" -v u="$unmatched" -v mm="$mismatch" 'BEGIN {
    printf "%-18s %10.2f %10.2f %12.0f %8.2f %11.1f %9d %17s %10d %9d\n", n, s, m, inp / m, c, c * 1e6 / inp, r, ot " / " o, u, mm }'
  [[ "$outputs" == "$EXPECT" && "$lines" == "$outputs" ]] ||
    echo "WARNING: $name committed $outputs output records ($lines read back), $EXPECT expected"
done
RATIOS=()
for run in $(seq "$RUNS"); do
  RATIOS+=("$(awk -v v="${RATE_OF[vigil-$run]}" -v k="${RATE_OF[kstreams-memory-$run]}" 'BEGIN { printf "%.2f", v / k }')")
done
vigil_median=$(for run in $(seq "$RUNS"); do echo "${RATE_OF[vigil-$run]}"; done | xargs | median)
peer_median=$(for run in $(seq "$RUNS"); do echo "${RATE_OF[kstreams-memory-$run]}"; done | xargs | median)
echo "Vigil/kstreams-memory, input rec/s, run by run: $(IFS=' '; echo "${RATIOS[*]/%/x}")"
awk -v v="$vigil_median" -v k="$peer_median" -v r="$(echo "${RATIOS[*]}" | median)" -v rr="${RATE_OF[kstreams-rocksdb]}" 'BEGIN {
  printf "medians: Vigil %.0f input rec/s, kstreams-memory %.0f; median ratio %.2fx\n", v, k, r
  printf "Vigil (median)/kstreams-rocksdb: %.2fx\n", v / rr }'
