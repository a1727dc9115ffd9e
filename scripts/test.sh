#!/usr/bin/env bash
# Runs every check and test Vigil has, from a fresh clone: formatting, lints, the
# unit, harness, end-to-end and command-line tests, the Kafka tests against a real
# Apache Kafka broker (KRaft) and schema registry that this script fetches (once,
# into .cache/) and starts on loopback, and stops again at the end; then the compose
# cluster's test (scripts/compose-test.sh; VIGIL_SKIP_COMPOSE=1 leaves it out).
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
  # The cluster test needs the compose cluster: the compose test runs it.
  cargo test --workspace --locked -- --include-ignored --test-threads 1 --skip compose_cluster
)
scripts/local-stack.sh stop

if [[ -z "${VIGIL_SKIP_COMPOSE:-}" ]]; then
  echo "== the compose cluster"
  scripts/compose-test.sh
fi
