#!/usr/bin/env bash
# Runs every check and test Vigil has, from a fresh clone: formatting, lints, the
# unit, harness, end-to-end and command-line tests, the Kafka tests against a real
# Apache Kafka broker (KRaft) and schema registry that this script fetches (once,
# into .cache/) and starts on loopback, and stops again at the end; then the broker
# fault test (shared/kafka/tests/brokers.rs) on a second stack of three brokers; then
# the compose cluster's test (scripts/compose-test.sh) on one broker and on three
# (VIGIL_COMPOSE_BROKERS=1 only the first; VIGIL_SKIP_COMPOSE=1 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== build"
cargo build --workspace --bins --locked

echo "== local Kafka and schema registry"
export VIGIL_STACK_STATE="$PWD/.cache/test-stack"
trap 'scripts/local-stack.sh stop >/dev/null 2>&1 || true' EXIT
scripts/local-stack.sh start
(
  set -a
  # shellcheck disable=SC1091
  . "$VIGIL_STACK_STATE/env"
  set +a
  echo "== cargo test (the Kafka tests included)"
  # The cluster test needs the compose cluster: the compose test runs it. The
  # three-broker test runs below, on a stack of three.
  cargo test --workspace --locked -- --include-ignored --test-threads 1 --skip compose_cluster --skip three_brokers_
)
scripts/local-stack.sh stop

echo "== three Kafka brokers: the broker fault test"
export VIGIL_STACK_STATE="$PWD/.cache/test-stack-3"
VIGIL_BROKERS=3 scripts/local-stack.sh start
(
  set -a
  # shellcheck disable=SC1091
  . "$VIGIL_STACK_STATE/env"
  set +a
  cargo test -p vigil-kafka --test brokers --locked -- --include-ignored --test-threads 1
)
scripts/local-stack.sh stop

if [[ -z "${VIGIL_SKIP_COMPOSE:-}" ]]; then
  echo "== the compose cluster, on one broker and on three with a partition leader killed"
  VIGIL_COMPOSE_BROKERS="${VIGIL_COMPOSE_BROKERS:-1 3}" scripts/compose-test.sh
fi
