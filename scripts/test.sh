#!/usr/bin/env bash
# Runs every test of the project. Installs what the tests need first (idempotent), so a fresh
# clone needs only a Rust toolchain: `bash scripts/test.sh`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== %s\n' "$*"; }

step "toolchain components"
rustup component add rustfmt clippy >/dev/null 2>&1 || true

step "format"
cargo fmt --all --check

step "lint"
cargo clippy --release --all-targets -- -D warnings

step "tests"
# Release profile: the numeric tests train real codebooks, and one build serves tests and CLI.
cargo test --release
