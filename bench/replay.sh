#!/usr/bin/env bash
# `mig sched replay` of 100,000 events (bench/replay-events.py: 256
# processors, up to 64 live jobs of up to 64 VPs), and of its first 20,000:
# wall time and peak memory of each, so that memory is seen not to grow
# with the events; then the 100,000 replayed once more writing every
# event's actions (`--actions-out`), and their SHA-256: the digest of every
# decision, which a change meant only to be faster must leave as it is.
# MIG=path replays with another build of `mig` (say an older one copied
# aside) instead of building this tree's. Needs python3, GNU time
# (/usr/bin/time) and sha256sum.
set -euo pipefail
cd "$(dirname "$0")/.."
mig=${MIG:-}
if [ -z "$mig" ]; then
  cargo build --release -p mig-cli --quiet
  mig=target/release/mig
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/replay-events.py 100000 >"$work/events"
head -20000 "$work/events" >"$work/events20k"
for f in events20k events; do
  /usr/bin/time -f "%e %M" -o "$work/t" "$mig" sched replay "$work/$f" --json >/dev/null
  read -r secs kib <"$work/t"
  printf '%-28s %6.2f s   peak RSS %6d KiB\n' "replay of $(wc -l <"$work/$f") events" "$secs" "$kib"
done
"$mig" sched replay "$work/events" --json --actions-out "$work/actions" >/dev/null
printf 'digest of the actions        %s\n' "$(sha256sum <"$work/actions" | cut -d' ' -f1)"
