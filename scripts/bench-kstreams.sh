#!/usr/bin/env bash
# Vigil's join-enrich stage against Kafka Streams on one local broker (a benchmark,
# not a test).
#
#   scripts/bench-kstreams.sh [SCALE] [PEER_THREADS]
#
# One dataset of the generator (the planted scenarios plus SCALE thousand events of
# normal traffic, default 200; its device events are left out, join-enrich reads none)
# goes into the input topics twice: as Avro to `orders` and `payments`, as
# `vigil generate --kafka` sends it, and as JSON to `kstreams-orders` and
# `kstreams-payments` (scripts/kstreams-peer: `load`), both keyed by order_id and
# partitioned alike, each followed by an end-of-input record on every partition. Then,
# one after another from the start of their input:
#   1. target/release/vigil join-enrich;
#   2. the Kafka Streams application of the same join (scripts/kstreams-peer), with
#      in-memory window stores;
#   3. the same with RocksDB window stores.
# Each runs until its consumer group has committed the end of its input and its output
# topic holds one committed enriched record per valid payment (read_committed). For
# each: input records/s (orders + payments over the time from its start to then), CPU
# seconds (utime + stime of its process), peak RSS (VmHWM), the output records and how
# many are unmatched and amount mismatches — compared record by record with Vigil's (a
# WARNING if they differ) — and the ratios Vigil/peer.
#
# PEER_THREADS: Kafka Streams' num.stream.threads (default 1). Env: KSTREAMS_HEAP_OPTS
# (the peer's JVM heap, default -Xmx1g). The broker and its registry run from
# .cache/kstreams-stack and are stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE="${1:-200}"
PEER_THREADS="${2:-1}"
PEER_HEAP="${KSTREAMS_HEAP_OPTS:--Xmx1g}"
export VIGIL_STACK_STATE="$PWD/.cache/kstreams-stack"
STATE="$VIGIL_STACK_STATE"
PARTITIONS="${VIGIL_RUNTIME_PARTITIONS:-4}"
PEER_DIR=scripts/kstreams-peer
PEER_CP="$PEER_DIR/target/kstreams-peer.jar:$PEER_DIR/target/lib/*"
PIDS=()

# shellcheck source=scripts/lib/stack.sh
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

echo "== building (release)"
cargo build --release -p vigil --locked -q
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

scripts/local-stack.sh start >/dev/null
set -a
# shellcheck source=/dev/null  # written by local-stack.sh start
. "$STATE/env"
set +a
target/release/vigil provision >/dev/null
target/release/vigil generate --kafka --input "$DATA" --partitions "$PARTITIONS" 2>>"$STATE/generator.log"
EXPECT=$(peer_tool load --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --dir "$DATA" --partitions "$PARTITIONS" \
  --create kstreams-enriched-memory,kstreams-enriched-rocksdb 2>"$STATE/load.log" | sed -n 's/^valid_payments=//p')
[[ -n "$EXPECT" ]] || { cat "$STATE/load.log" >&2; die "loading the JSON copy failed"; }
for pair in orders:kstreams-orders payments:kstreams-payments; do
  avro=$(topic_size "${pair%%:*}")
  json=$(topic_size "${pair#*:}")
  echo "${pair%%:*}: Vigil's topic ${avro% *} partitions, ${avro#* } records; the peer's ${json% *} partitions, ${json#* } records (end-of-input records included)"
  [[ "$avro" == "$json" ]] || die "the two copies of ${pair%%:*} differ"
done
echo "input: $ORDERS orders + $PAYMENTS payments = $INPUT records; $EXPECT valid payments, so $EXPECT enriched records expected"

RESULTS=()
# contend NAME GROUP INPUT_TOPICS OUTPUT_TOPIC COMMAND...: runs the command until it is
# done (see Tools.await), then stops it; appends "name wall cpu rss output" to RESULTS.
contend() {
  local name="$1" group="$2" topics="$3" output="$4" pid t0 done_line wall cpu rss count
  shift 4
  echo "== $name"
  t0=$(now_ms)
  "$@" >"$STATE/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  done_line=$(peer_tool await --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --group "$group" --topics "$topics" \
    --output "$output" --expect "$EXPECT" --since-ms "$t0" --pid "$pid" --timeout-s 1800) ||
    { tail -n 30 "$STATE/$name.log" >&2; die "$name did not finish (log: $STATE/$name.log)"; }
  cpu=$(cpu_seconds "$pid")
  rss=$(peak_rss_mb "$pid")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  wall=$(sed -n 's/^done_s=\([0-9.]*\) .*/\1/p' <<<"$done_line")
  count=$(sed -n 's/.*output=\([0-9]*\)$/\1/p' <<<"$done_line")
  echo "done in $wall s: $count committed output records, $cpu CPU s, peak RSS $rss MB"
  RESULTS+=("$name $wall $cpu $rss $count")
}

contend vigil-join-enrich vigil-join-enrich orders,payments enriched-payments \
  env RUST_LOG=warn target/release/vigil join-enrich
for store in memory rocksdb; do
  rm -rf "$STATE/kstreams-state"
  # shellcheck disable=SC2086  # PEER_HEAP is deliberately word-split
  contend "kstreams-$store" "kstreams-join-$store" kstreams-orders,kstreams-payments "kstreams-enriched-$store" \
    java $PEER_HEAP -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$PEER_CP" dev.vigil.kstreams.Main run \
    --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --store "$store" --threads "$PEER_THREADS" --state-dir "$STATE/kstreams-state"
done

echo "== outputs, record by record (payment_id, unmatched, amount_mismatch)"
target/release/vigil tail enriched-payments --idle-exit-secs 5 >"$STATE/out-vigil-join-enrich.ndjson" 2>/dev/null
essentials "$STATE/out-vigil-join-enrich.ndjson" >"$STATE/essentials-vigil-join-enrich.txt"
for store in memory rocksdb; do
  peer_tool dump --bootstrap "$VIGIL_BOOTSTRAP_SERVERS" --topic "kstreams-enriched-$store" >"$STATE/out-kstreams-$store.ndjson"
  essentials "$STATE/out-kstreams-$store.ndjson" >"$STATE/essentials-kstreams-$store.txt"
done
FLAGS=()
for r in "${RESULTS[@]}"; do
  name="${r%% *}"
  file="$STATE/essentials-$name.txt"
  FLAGS+=("$(wc -l <"$file") $(grep -c ' true [a-z]*$' "$file" || true) $(grep -c ' true$' "$file" || true)")
  if [[ "$name" != vigil-join-enrich ]]; then
    differ=$(LC_ALL=C comm -3 "$STATE/essentials-vigil-join-enrich.txt" "$file" | wc -l)
    if ((differ == 0)); then
      echo "$name: the same $(wc -l <"$file") records as Vigil's"
    else
      echo "WARNING: $name and Vigil differ in $differ lines (comm -3 $STATE/essentials-vigil-join-enrich.txt $file)"
    fi
  fi
done

echo "== results: planted + ${SCALE}k events, $INPUT input records (orders + payments), $PARTITIONS partitions, exactly-once, commit every 100 ms; Kafka Streams $KS_VERSION: $PEER_THREADS stream thread(s), $PEER_HEAP"
printf '%-18s %9s %12s %8s %12s %13s %8s %10s %9s\n' contender "wall s" "input rec/s" "CPU s" "CPU us/rec" "peak RSS MB" output unmatched mismatch
for i in "${!RESULTS[@]}"; do
  read -r name wall cpu rss count <<<"${RESULTS[$i]}"
  read -r lines unmatched mismatch <<<"${FLAGS[$i]}"
  awk -v n="$name" -v w="$wall" -v c="$cpu" -v r="$rss" -v o="$count" -v inp="$INPUT" -v u="$unmatched" -v m="$mismatch" \
    'BEGIN { printf "%-18s %9.1f %12.0f %8.2f %12.1f %13d %8d %10d %9d\n", n, w, inp / w, c, c * 1e6 / inp, r, o, u, m }'
  [[ "$count" == "$EXPECT" && "$lines" == "$count" ]] ||
    echo "WARNING: $name committed $count output records ($lines read back), $EXPECT expected"
done
read -r _ vwall vcpu vrss _ <<<"${RESULTS[0]}"
for i in 1 2; do
  read -r name wall cpu rss _ <<<"${RESULTS[$i]}"
  awk -v n="$name" -v vw="$vwall" -v vc="$vcpu" -v vr="$vrss" -v w="$wall" -v c="$cpu" -v r="$rss" 'BEGIN {
    printf "Vigil/%s: input rec/s %.2fx, CPU s %.2fx, peak RSS %.2fx\n", n, w / vw, vc / c, vr / r }'
done
