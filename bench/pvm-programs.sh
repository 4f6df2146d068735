#!/usr/bin/env bash
# PVM's own benchmark program, side by side in one run: Debian's build of
# PVM 3.4's `timing` (and its `timing_slave`), unchanged, under PVM 3.4.6
# (its pvmd) and under mig (our libpvm3 found first through
# LD_LIBRARY_PATH), interleaved over TRIALS (default 5) trials, both
# tasks on one host. `timing` asks for direct routes (PvmRouteDirect);
# it reports a round trip of a minimal message and packing and sending
# rates for messages up to 1 MB (PvmDataRaw); pingpong measures 8 B round
# trips and 64 KiB..16 MiB streams on PVM's default route and its direct
# one. Medians of the trials and the ratios the targets name.
#
# PVM and its examples come from Debian's pvm, pvm-dev and pvm-examples
# (installed when missing and we are root).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TRIALS=${TRIALS:-5}
cargo build --release --workspace --quiet
if [ ! -x /usr/lib/pvm3/lib/pvmd ] || [ ! -x /usr/bin/timing ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pvm pvm-dev pvm-examples >/dev/null
  else
    echo "PVM is not installed (apt-get install pvm pvm-dev pvm-examples)" >&2
    exit 1
  fi
fi
MIG=$ROOT/target/release/mig
HARNESS=${PVM_HARNESS:-$ROOT/../shared/bench/pvm}
work=$(mktemp -d)
export PVM_ROOT=/usr/lib/pvm3 PVM_ALLOW_ROOT=1 PVM_TMP=$work/pvmtmp
export MIG_DAEMON=$work/mig/h0/control.sock
cleanup() {
  if [ -n "${PVMD_PID:-}" ]; then kill "$PVMD_PID" 2>/dev/null && wait "$PVMD_PID" 2>/dev/null || true; fi
  "$MIG" halt >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir -p "$PVM_TMP" "$work/lib" "$work/bin"
cp "$HARNESS/pingpong.c" "$work/"
gcc -O2 -o "$work/bin/pingpong" "$work/pingpong.c" -lpvm3
for n in libpvm3.so.3 libgpvm3.so.3; do ln -s "$ROOT/target/release/libpvm3.so" "$work/lib/$n"; done
printf '* ep=/usr/bin wd=%s\n' "$PVM_TMP" >"$PVM_TMP/hostfile"
/usr/lib/pvm3/lib/pvmd "$PVM_TMP/hostfile" >"$PVM_TMP/pvmd.out" 2>&1 &
PVMD_PID=$!
for _ in $(seq 100); do [ -e "$PVM_TMP/pvmd.$(id -u)" ] && break; sleep 0.05; done
"$MIG" up -n 1 --processors 2 --state-dir "$work/mig" --detach >/dev/null
# timing's figures: the round trip, then the last "Avg Byte/uSec" line's
# pack and send rates (its largest messages).
figures() {
  awk -v who="$1" '
    /RTT Avg uSec/ { rtt = $NF }
    /Avg Byte\/uSec/ { getline; pack = $(NF-1); send = $NF }
    END { if (rtt != "") printf "%s_rtt_us %s\n%s_pack_Bpus %s\n%s_send_Bpus %s\n", who, rtt, who, pack, who, send }'
}
out=$work/figures
for t in $(seq "$TRIALS"); do
  echo "trial $t of $TRIALS" >&2
  (cd "$PVM_TMP" && timeout 120 /usr/bin/timing 2>/dev/null || true) | figures pvm >>"$out"
  timeout 120 "$MIG" spawn -e LD_LIBRARY_PATH="$work/lib" --wait -- /usr/bin/timing 2>/dev/null \
    | sed 's/^\[[^]]*\] //' | figures mig >>"$out" || true
  for route in default direct; do
    timeout 300 "$work/bin/pingpong" "$route" 2>/dev/null | grep '^pvm_' >>"$out" || true
    timeout 300 "$MIG" spawn -e LD_LIBRARY_PATH="$work/lib" --wait -- "$work/bin/pingpong" "$route" 2>/dev/null \
      | sed 's/^\[[^]]*\] //' | grep '^pvm_' | sed 's/^pvm_/mig_/' >>"$out" || true
  done
done
sort -k1,1 -k2,2g "$out" | awk '
  { v[$1] = v[$1] " " $2 }
  END { for (k in v) { n = split(v[k], a, " "); printf "%s %s\n", k, a[int((n + 1) / 2)] } }' \
  | sort >"$work/medians"
cat "$work/medians"
echo
get() { awk -v k="$1" '$1 == k { print $2 }' "$work/medians"; }
ratio() { # ratio LABEL MIG PEER OP TARGET
  local m p
  m=$(get "$2"); p=$(get "$3")
  if [ -z "$m" ] || [ -z "$p" ]; then echo "$1: missing figures ($2=$m, $3=$p)"; return; fi
  awk -v l="$1" -v m="$m" -v p="$p" -v op="$4" -v t="$5" 'BEGIN {
    r = m / p; ok = (op == "<=") ? (r <= t) : (r >= t);
    printf "%-40s mig %10.1f  pvm %10.1f  ratio %5.2f  (target %s %s) %s\n", l, m, p, r, op, t, ok ? "met" : "MISSED" }'
}
echo "PVM's timing, the same binary (medians of $TRIALS trials):"
ratio "round trip, us" mig_rtt_us pvm_rtt_us "<=" 0.8
ratio "send rate, largest messages, B/us" mig_send_Bpus pvm_send_Bpus ">=" 1.5
ratio "pack rate, largest messages, B/us" mig_pack_Bpus pvm_pack_Bpus ">=" 1.0
echo
echo "The harness's pingpong, the same binary (medians of $TRIALS trials):"
for route in default direct; do
  ratio "8-byte rtt p50 ($route), us" "mig_rtt_8B_${route}_p50_us" "pvm_rtt_8B_${route}_p50_us" "<=" 0.8
  # Large messages (1 MiB, 16 MiB) at 1.5x PVM's; 64 KiB, a mid-size
  # message, at least level with it (as bench/messages-vs-pvm.sh asks).
  for size in 64KiB 1MiB 16MiB; do
    want=1.5
    [ "$size" = 64KiB ] && want=1.0
    ratio "$size stream ($route), MB/s" "mig_bw_${size}_${route}_MBps" "pvm_bw_${size}_${route}_MBps" ">=" "$want"
  done
done
