#!/usr/bin/env bash
# The scheduling-quality table: each real log replayed whole by `mig sim`
# with default settings under EASY backfilling and the gang policies. Per
# log: EASY's mean bounded slowdown (tau = 10 s) and utilisation, each gang
# policy's mean bounded slowdown and its ratio to EASY's (its utilisation
# where it is below EASY's), and for mig (migd's default) the median and 95th
# percentile of slowdown, the mean response time and the VP moves.
#
#   bash bench/sim-traces.sh [TRACE_DIR] [-- MIG_SIM_ARGS...]
#
# TRACE_DIR holds the five logs (default ../shared/traces, else
# examples/traces for the excerpt that ships here); arguments after `--` go
# to every `mig sim` (e.g. -- --owners synthetic:3600/7200, or
# -- --migration-cost 5). Two logs replay at a time; the whole set takes a
# few minutes on two cores. Needs python3.
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
logs=(LANL-CM5-1994-4.1 SDSC-SP2-1998-4.2 CTC-SP2-1996-3.1 KTH-SP2-1996-2.1 SDSC-Par-1996-3.1)
policies=easy,gang-firstfit,gang-buddy,mtat,mtat+repack,mig
found=()
for log in "${logs[@]}"; do
  f=$(ls "$dir/$log"-cln.swf* 2>/dev/null | head -1 || true)
  [[ -n $f ]] && found+=("$log=$f")
done
if [[ ${#found[@]} -eq 0 ]]; then
  # No whole log here: every SWF file in the directory.
  for f in "$dir"/*.swf*; do found+=("$(basename "$f")=$f"); done
fi
echo "replaying ${#found[@]} logs from $dir (policies $policies${*:+; $*})" >&2
running=0
for entry in "${found[@]}"; do
  name=${entry%%=*}
  file=${entry#*=}
  (target/release/mig sim --trace "$file" --policy "$policies" --json "$@" \
    >"$work/$name.json" 2>"$work/$name.err" && echo "  $name done" >&2) &
  running=$((running + 1))
  if [[ $running -ge 2 ]]; then
    wait -n
    running=$((running - 1))
  fi
done
wait
python3 - "$work" "${found[@]}" <<'EOF'
import json, sys
work, entries = sys.argv[1], sys.argv[2:]
gang = ["gang-firstfit", "gang-buddy", "mtat", "mtat+repack", "mig"]
print("| log | easy | " + " | ".join(gang) + " | mig: median / p95 slowdown | mean response (s): easy / mig | mig's VP moves |")
print("|---|---|" + "---|" * len(gang) + "---|---|---|")
for e in entries:
    name = e.split("=", 1)[0]
    p = json.load(open(f"{work}/{name}.json"))["policies"]
    easy = p["easy"]
    row = [name, f"{easy['mean_bounded_slowdown']:.1f} (u {easy['utilization']:.4f})"]
    for g in gang:
        m = p[g]
        r = m['mean_bounded_slowdown'] / easy['mean_bounded_slowdown']
        cell = f"{m['mean_bounded_slowdown']:.1f} ({r:.2f}x)" if r >= 0.01 else f"{m['mean_bounded_slowdown']:.1f} ({r:.1e}x)"
        if m["utilization"] < easy["utilization"]:
            cell += f" (u {m['utilization']:.4f})"
        row.append(cell)
    m = p["mig"]
    row.append(f"{m['median_bounded_slowdown']:.2f} / {m['p95_bounded_slowdown']:.1f}")
    row.append(f"{easy['mean_response_time']:.0f} / {m['mean_response_time']:.0f}")
    row.append(str(m["migrations"]))
    print("| " + " | ".join(row) + " |")
best = []
for e in entries:
    name = e.split("=", 1)[0]
    p = json.load(open(f"{work}/{name}.json"))["policies"]
    easy, mig = p["easy"], p["mig"]
    others = min(p[g]["mean_bounded_slowdown"] for g in gang if g != "mig")
    ok = (mig["mean_bounded_slowdown"] <= 0.5 * easy["mean_bounded_slowdown"]
          and mig["mean_bounded_slowdown"] <= others
          and mig["utilization"] >= easy["utilization"])
    best.append(f"{name}: {'goal met' if ok else 'goal NOT met'}")
print()
print("mig against the goal (at most half EASY's mean bounded slowdown, no more than the best other gang policy's, utilisation no lower than EASY's):")
for b in best:
    print("  " + b)
EOF
