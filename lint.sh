#!/usr/bin/env bash
# The lint recipe: formatting and clippy, warnings are errors.
set -euo pipefail
cd "$(dirname "$0")"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
