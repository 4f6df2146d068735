#!/usr/bin/env bash
# A burst of spawns under each placement: `mig up -n 8` (4 processors a
# host), SPAWNS (default 200) one-VP jobs of `sleep` asked for at the eight
# daemons in turn, as fast as `mig spawn` returns; the time until every VP
# has a host (`mig ps`), and the messages of the placements that travel
# between daemons each daemon sent (`mig_placement_messages_total` from its
# `--metrics`). Policies: POLICIES (default "mig bidding nres roc").
#
#   bash bench/placement-burst.sh            # the table
#   SPAWNS=50 POLICIES="bidding" bash bench/placement-burst.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SPAWNS=${SPAWNS:-200}
POLICIES=${POLICIES:-mig bidding nres roc}
HOSTS=8
cargo build --release --workspace --bins --quiet
MIG=$PWD/target/release/mig
work=$(mktemp -d)
cleanup() {
  for d in "$work"/*/; do
    [ -S "$d/h0/control.sock" ] && MIG_DAEMON=$d/h0/control.sock "$MIG" halt >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# The sum of sample $2 (with its labels) on the metrics page at $1.
sample() {
  curl -s "http://$1/metrics" | awk -v n="$2" '$1 == n { s += $2 } END { print s + 0 }'
}

printf '| placement | spawns | all placed (s) | placement messages sent: total | per daemon min / max |\n'
printf '|---|---|---|---|---|\n'
for policy in $POLICIES; do
  dir=$work/$policy
  mkdir -p "$dir"
  printf '[daemon]\nplacement = "%s"\nmetrics = "127.0.0.1:0"\n' "$policy" >"$dir.toml"
  "$MIG" up -n $HOSTS --processors 4 --config "$dir.toml" --state-dir "$dir" --detach >/dev/null
  export MIG_DAEMON=$dir/h0/control.sock
  for _ in $(seq 200); do
    n=$("$MIG" hosts --json | grep -o '"alive": *true' | wc -l)
    [ "$n" -ge $HOSTS ] && break
    sleep 0.1
  done
  start=$(date +%s.%N)
  for i in $(seq 0 $((SPAWNS - 1))); do
    MIG_DAEMON=$dir/h$((i % HOSTS))/control.sock "$MIG" spawn -- sleep 600 >/dev/null &
    # At most 16 clients at a time.
    if (( i % 16 == 15 )); then wait; fi
  done
  wait
  for _ in $(seq 6000); do
    placed=$("$MIG" ps --json | grep -o '"host": *"h[0-9]*"' | wc -l)
    [ "$placed" -ge "$SPAWNS" ] && break
    sleep 0.05
  done
  took=$(echo "$(date +%s.%N) - $start" | bc)
  per=()
  for h in $(seq 0 $((HOSTS - 1))); do
    addr=$(cat "$dir/h$h/metrics-addr")
    s=0
    for kind in ask bid rate_ask rate_answer give_away; do
      s=$((s + $(sample "$addr" "mig_placement_messages_total{kind=\"$kind\"}")))
    done
    per+=("$s")
  done
  total=$(IFS=+; echo "$((${per[*]}))")
  sorted=$(printf '%s\n' "${per[@]}" | sort -n)
  printf '| %s | %d | %.2f | %d | %s / %s |\n' "$policy" "$placed" "$took" "$total" \
    "$(echo "$sorted" | head -1)" "$(echo "$sorted" | tail -1)"
  "$MIG" halt >/dev/null 2>&1 || true
  unset MIG_DAEMON
done
