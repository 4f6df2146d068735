#!/usr/bin/env bash
# Spawn 1/8/32 trivial VPs until all have reported their exit: mig against
# PVM 3.4's pvm_spawn, side by side in one run, with the ratio.
#
# PVM comes from Debian's pvm and pvm-dev packages (installed here when
# missing and we are root); its harness is ../shared/bench/pvm (copied to a
# temporary directory, since it writes next to itself).
set -euo pipefail
cd "$(dirname "$0")/.."
HARNESS=${PVM_HARNESS:-../shared/bench/pvm}
cargo build --release --workspace --bins --quiet
cargo bench -p mig-tests --bench spawn --quiet -- --bench | tee /tmp/mig-spawn.out
if [ ! -d /usr/lib/pvm3 ] || [ ! -e /usr/include/pvm3.h ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pvm pvm-dev >/dev/null
  else
    echo "PVM is not installed (apt-get install pvm pvm-dev); only mig's figures above" >&2
    exit 0
  fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$HARNESS"/. "$work"/
chmod -R u+w "$work"
TRIALS=${TRIALS:-3} bash "$work/run.sh" 2>/dev/null | grep -E '^(pvm_spawn_(1|8|32)_exit_ms|fork_spawn_32_exit_ms) ' | tee /tmp/pvm-spawn.out
for n in 1 8 32; do
  m=$(awk -v k="mig_spawn_${n}_exit_ms" '$1==k {print $2}' /tmp/mig-spawn.out)
  p=$(awk -v k="pvm_spawn_${n}_exit_ms" '$1==k {print $2}' /tmp/pvm-spawn.out)
  [ -n "$m" ] && [ -n "$p" ] && awk -v n="$n" -v m="$m" -v p="$p" 'BEGIN { printf "spawn %2d: mig %.2f ms, PVM %.2f ms, ratio %.2f\n", n, m, p, m / p }'
done
