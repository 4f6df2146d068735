#!/usr/bin/env bash
# The scheduling-quality table (docs/scheduling.md): each whole log of
# TRACE_DIR replayed by `mig sim` with default settings (8 slots at most,
# the measured switch and move costs) under EASY backfilling, the plain gang
# matrices (first-fit, buddy) and mig (migd's default), as logged and with
# the times between arrivals scaled to an offered load of 0.9 and of 1.0
# (--load). The LANL CM-5 log, the only one that states its jobs' memory,
# is replayed with its nodes' 32 MB a limit (--node-memory 32). Per log and
# policy: mean bounded slowdown (tau = 10 s), its 95th percentile and
# utilisation; then mig's mean against EASY's and against the better gang
# matrix's, mig's utilisation less EASY's, and whether the goal is met
# (at most 0.5x EASY, at most the better matrix, utilisation no more than
# 0.005 below EASY's).
#
#   bash bench/sim-traces.sh [TRACE_DIR] [-- MIG_SIM_ARGS...]
#
# TRACE_DIR holds the logs (default ../shared/traces with its synthetic/
# folder, else examples/traces for the excerpt that ships here); arguments
# after `--` go to every `mig sim` (e.g. -- --owners synthetic:3600/36000).
# POLICIES overrides the policies (easy first, mig last); LOADS the scaled
# loads ("" for none). One replay at a time; the other logs take about 10
# minutes together on two cores, LANL with memory 2 minutes as logged, 6
# at 0.9 and 20 at 1.0 (mig's replay 1.5, 3.5 and 17 of those).
# Needs python3.
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
policies=${POLICIES:-easy,gang-firstfit,gang-buddy,mig}
loads=${LOADS-0.9 1.0}
# name=file=extra flags
found=()
for f in "$dir"/*.swf* "$dir"/synthetic/*.swf*; do
  [[ -e $f ]] || continue
  name=$(basename "$f")
  name=${name%%.swf*}
  name=${name%-cln}
  mem=
  [[ $name == LANL-CM5* ]] && mem="--node-memory 32"
  found+=("$name=$f=$mem")
  for l in $loads; do
    found+=("$name load $l=$f=$mem --load $l")
  done
done
echo "replaying ${#found[@]} logs from $dir (policies $policies${*:+; $*})" >&2
i=0
for entry in "${found[@]}"; do
  IFS='=' read -r name file extra <<<"$entry"
  i=$((i + 1))
  # shellcheck disable=SC2086
  $mig sim --trace "$file" --policy "$policies" --json $extra "$@" \
    >"$work/$i.json" 2>"$work/$i.err"
  echo "  $name done" >&2
done
python3 - "$work" "$policies" "${found[@]}" <<'PY'
import json, sys
work, policies, entries = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
gangs = [p for p in policies if p.startswith("gang-")]
print("| log | load | " + " | ".join(f"{p}: mean / p95 / util" for p in policies)
      + " | mig / easy | mig / best gang | util - easy | goal |")
print("|---|---|" + "---|" * len(policies) + "---|---|---|---|")
for i, e in enumerate(entries, 1):
    name = e.split("=", 1)[0]
    v = json.load(open(f"{work}/{i}.json"))
    p = v["policies"]
    cells = [f"{p[x]['mean_bounded_slowdown']:.1f} / {p[x]['p95_bounded_slowdown']:.0f} / {p[x]['utilization']:.4f}" for x in policies]
    tail = ["", "", "", ""]
    if "mig" in p and "easy" in p:
        m, ez = p["mig"], p["easy"]
        r = m["mean_bounded_slowdown"] / ez["mean_bounded_slowdown"]
        best = min((p[g]["mean_bounded_slowdown"] for g in gangs), default=float("inf"))
        rg = m["mean_bounded_slowdown"] / best
        du = m["utilization"] - ez["utilization"]
        ok = r <= 0.5 and rg <= 1.0 and du >= -0.005
        tail = [f"{r:.2f}x", f"{rg:.2f}x", f"{du:+.4f}", "met" if ok else "NOT met"]
    print(f"| {name} | {v['offered_load']:.3f} | " + " | ".join(cells) + " | " + " | ".join(tail) + " |")
v = json.load(open(f"{work}/1.json"))
print()
print(f"costs: a slot switch {v['switch_cost'] * 1e3:g} ms, a move {v['migration_cost'] * 1e3:g} ms + {v['migration_cost_per_mb'] * 1e3:g} ms a MB")
print()
print("digests (each policy's every job):")
for i, e in enumerate(entries, 1):
    v = json.load(open(f"{work}/{i}.json"))
    print(e.split("=", 1)[0] + ": " + " ".join(f"{k} {x['digest']}" for k, x in sorted(v["policies"].items())))
PY
