#!/usr/bin/env bash
# `mig sched replay` of 100,000 events (bench/replay-events.py: 256
# processors, up to 64 live jobs of up to 64 VPs), and of its first 20,000:
# wall time and peak memory of each, so that memory is seen not to grow
# with the events. Needs python3 and GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p mig-cli --quiet
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/replay-events.py 100000 >"$work/events"
head -20000 "$work/events" >"$work/events20k"
for f in events20k events; do
  /usr/bin/time -f "%e %M" -o "$work/t" target/release/mig sched replay "$work/$f" --json >/dev/null
  read -r secs kib <"$work/t"
  printf '%-28s %6.2f s   peak RSS %6d KiB\n' "replay of $(wc -l <"$work/$f") events" "$secs" "$kib"
done
