#!/usr/bin/env bash
# The quick start: build everything, then run the demo (a local virtual
# machine of daemons on loopback, a parallel job across them, the answer
# checked, timings printed, everything stopped).
set -euo pipefail
cd "$(dirname "$0")"
echo "demo.sh: building mig in release mode (the first build takes a few minutes; cargo shows its progress)" >&2
cargo build --release --workspace --bins
exec target/release/mig demo "$@"
