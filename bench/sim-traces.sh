#!/usr/bin/env bash
# The scheduling-quality table (docs/scheduling.md): each whole log of
# TRACE_DIR replayed by `mig sim` with default settings (8 slots at most,
# the measured switch and move costs) under EASY backfilling, first-fit gang
# scheduling and mig (migd's default), and the LANL CM-5 log once more with
# the times between arrivals shortened by 10% (--interarrival 0.9). Per log
# and policy: mean bounded slowdown (tau = 10 s), its 95th percentile, and
# utilisation; then mig's mean against EASY's.
#
#   bash bench/sim-traces.sh [TRACE_DIR] [-- MIG_SIM_ARGS...]
#
# TRACE_DIR holds the logs (default ../shared/traces with its synthetic/
# folder, else examples/traces for the excerpt that ships here); arguments
# after `--` go to every `mig sim` (e.g. -- --node-memory 32). POLICIES
# overrides the policies (easy first). Two logs replay at a time; the whole
# set takes about ten minutes on two cores. Needs python3.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=../shared/traces
if [[ $# -gt 0 && $1 != -- ]]; then
  dir=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
[[ -d $dir ]] || dir=examples/traces
cargo build --release -p mig-cli --quiet
mig=target/release/mig
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
policies=${POLICIES:-easy,gang-firstfit,mig}
# name=file[=extra flags]
found=()
for f in "$dir"/*.swf* "$dir"/synthetic/*.swf*; do
  [[ -e $f ]] || continue
  name=$(basename "$f")
  name=${name%%.swf*}
  name=${name%-cln}
  found+=("$name=$f=")
  if [[ $name == LANL-CM5* ]]; then
    found+=("$name x0.9=$f=--interarrival 0.9")
  fi
done
echo "replaying ${#found[@]} logs from $dir (policies $policies${*:+; $*})" >&2
running=0
i=0
for entry in "${found[@]}"; do
  IFS='=' read -r name file extra <<<"$entry"
  i=$((i + 1))
  # shellcheck disable=SC2086
  ($mig sim --trace "$file" --policy "$policies" --json $extra "$@" \
    >"$work/$i.json" 2>"$work/$i.err" && echo "  $name done" >&2) &
  running=$((running + 1))
  if [[ $running -ge 2 ]]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
python3 - "$work" "$policies" "${found[@]}" <<'EOF'
import json, sys
work, policies, entries = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
print("| log | " + " | ".join(f"{p}: mean / p95 / util" for p in policies) + " | mig / easy |")
print("|---|" + "---|" * len(policies) + "---|")
for i, e in enumerate(entries, 1):
    name = e.split("=", 1)[0]
    v = json.load(open(f"{work}/{i}.json"))
    p = v["policies"]
    cells = [f"{p[x]['mean_bounded_slowdown']:.1f} / {p[x]['p95_bounded_slowdown']:.0f} / {p[x]['utilization']:.4f}" for x in policies]
    ratio = ""
    if "mig" in p and "easy" in p:
        ratio = f"{p['mig']['mean_bounded_slowdown'] / p['easy']['mean_bounded_slowdown']:.2f}x"
    print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
v = json.load(open(f"{work}/1.json"))
print()
print(f"costs: a slot switch {v['switch_cost'] * 1e3:g} ms, a move {v['migration_cost'] * 1e3:g} ms + {v['migration_cost_per_mb'] * 1e3:g} ms a MB; {v['memory']}")
EOF
