#!/usr/bin/env bash
# Fuzzes the input decoders with cargo fuzz (libFuzzer; nightly toolchain and
# cargo-fuzz are installed once if missing):
#   ndjson_lines  any bytes as an input file of each stream (the embedded runtime)
#   avro_values   any bytes as a record value on each stage's input topics, decoded
#                 as the Kafka services decode them, against a real schema registry
# Each target runs FUZZ_SECONDS (300). A single allocation over 64 MiB counts as a
# finding (-malloc_limit_mb), as does a panic. Findings land in
# shared/fuzz/artifacts/<target>/; the corpus grows in shared/fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh                      both targets
#   FUZZ_SECONDS=60 scripts/fuzz.sh avro_values
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-300}"
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(ndjson_lines avro_values)
log() { printf 'fuzz: %s\n' "$*" >&2; }

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

# Seeds: the lines of a small planted dataset, one file each.
seeds="$PWD/.cache/fuzz-seeds"
if [[ ! -d "$seeds/lines" ]]; then
  cargo run --quiet --release -p vigil -- generate --out "$seeds/dataset" --scale 1 >/dev/null
  mkdir -p "$seeds/lines"
  cat "$seeds"/dataset/*.ndjson | split -l 1 -a 5 - "$seeds/lines/line-"
fi

if [[ " ${TARGETS[*]} " == *" avro_values "* ]]; then
  export VIGIL_STACK_STATE="$PWD/.cache/fuzz-stack"
  trap 'scripts/local-stack.sh stop >/dev/null 2>&1 || true' EXIT
  # shellcheck source=scripts/lib/stack.sh
  . scripts/lib/stack.sh
  stack_up
fi

corpus=shared/fuzz/corpus
for target in "${TARGETS[@]}"; do
  mkdir -p "$corpus/$target"
  [[ "$target" == ndjson_lines ]] && cp -n "$seeds"/lines/* "$corpus/$target/"
  log "$target: ${SECONDS_EACH}s"
  # -max_len 64 KiB: long enough for any record and its framing.
  { cargo +nightly fuzz run --fuzz-dir shared/fuzz "$target" "$corpus/$target" -- \
    -max_total_time="$SECONDS_EACH" -max_len=65536 -malloc_limit_mb=64 -rss_limit_mb=1024 -print_final_stats=1 2>&1 ||
    echo "fuzz run failed: exit $?"; } | tee ".cache/fuzz-$target.log" |
    grep --line-buffered -E '(pulse|DONE) |stat::(number_of_executed_units|peak_rss_mb)|ERROR|panicked|fuzz run failed' || true
  if grep -q 'fuzz run failed' ".cache/fuzz-$target.log"; then
    log "$target found a failure: see .cache/fuzz-$target.log and shared/fuzz/artifacts/$target/"
    exit 1
  fi
done
