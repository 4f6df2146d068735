#!/usr/bin/env bash
# The quick start: build everything, then run the demo (a local virtual
# machine of daemons on loopback, a parallel job across them, the answer
# checked, timings printed, everything stopped).
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --workspace --bins --quiet
exec target/release/mig demo "$@"
