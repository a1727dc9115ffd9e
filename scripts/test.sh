#!/usr/bin/env bash
# Runs every check and test Vigil has, from a fresh clone: formatting, lints, and
# the unit, harness, end-to-end and command-line tests of the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
