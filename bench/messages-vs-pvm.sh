#!/usr/bin/env bash
# Message passing and spawn: libmig against PVM 3.4.6 and raw loopback
# sockets, side by side in one run, with the ratios the targets name.
#
# Each trial runs, in fresh processes and interleaved: PVM's pingpong on its
# default route (task -> pvmd -> task) and its direct route, PVM's spawn of
# 1/8/32 tasks, the raw TCP baseline, then mig's pingpong (daemon, remote
# and direct routes) and mig's spawn of 32 VPs. Figures are medians over the
# trials (TRIALS, default 5). PVM's harness is ../shared/bench/pvm (copied to
# a temporary directory, since it writes next to itself); PVM itself comes
# from Debian's pvm and pvm-dev (installed when missing and we are root).
#
# mig's machine: `mig up -n 2 --processors 2`, a job of 4 VPs, so VP 0 has a
# partner on its own host (daemon and direct routes) and one on the other
# (remote route: two daemons over loopback TCP).
#
# Also in each trial, the anchors of the same-host and spawn figures: MPICH
# between two ranks on this host (../shared/bench/mpi: shared memory, busy
# polling; Debian's mpich, installed when missing and we are root; left out
# with MPI=0), and 32 plain fork+execs until each reported (`tcp_baseline
# spawn`). And what this machine allows for the figures at a limit
# (`target/release/limits`): a sealed TCP link with nothing else on it, and
# 32 fork+execs of mig's own pingpong until each ended.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HARNESS=${PVM_HARNESS:-$ROOT/../shared/bench/pvm}
MPI_HARNESS=${MPI_HARNESS:-$ROOT/../shared/bench/mpi}
TRIALS=${TRIALS:-5}
cargo build --release --workspace --bins --quiet
MIG=$ROOT/target/release/mig
if [ ! -x /usr/lib/pvm3/lib/pvmd ] || [ ! -e /usr/include/pvm3.h ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pvm pvm-dev >/dev/null
  else
    echo "PVM is not installed (apt-get install pvm pvm-dev)" >&2
    exit 1
  fi
fi
work=$(mktemp -d)
export PVM_ROOT=/usr/lib/pvm3 PVM_ALLOW_ROOT=1 PVM_TMP=$work/pvmtmp
export MIG_DAEMON=$work/mig/h0/control.sock
cleanup() {
  # (wait gives 143 for a daemon stopped by SIGTERM: not a failure here)
  if [ -n "${PVMD_PID:-}" ]; then kill "$PVMD_PID" 2>/dev/null && wait "$PVMD_PID" 2>/dev/null || true; fi
  "$MIG" halt >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
mkdir -p "$work/bin" "$PVM_TMP"
cp "$HARNESS"/*.c "$work/"
gcc -O2 -o "$work/bin/pingpong" "$work/pingpong.c" -lpvm3
gcc -O2 -o "$work/bin/spawn" "$work/spawn.c" -lpvm3
gcc -O2 -o "$work/bin/tcp_baseline" "$work/tcp_baseline.c"
printf '* ep=%s wd=%s\n' "$work/bin" "$PVM_TMP" >"$PVM_TMP/hostfile"
/usr/lib/pvm3/lib/pvmd "$PVM_TMP/hostfile" >"$PVM_TMP/pvmd.out" 2>&1 &
PVMD_PID=$!
for _ in $(seq 100); do [ -e "$PVM_TMP/pvmd.$(id -u)" ] && break; sleep 0.05; done
"$MIG" up -n 2 --processors 2 --state-dir "$work/mig" --detach >/dev/null
out=$work/figures
for t in $(seq "$TRIALS"); do
  echo "trial $t of $TRIALS" >&2
  "$work/bin/pingpong" default 2>/dev/null | grep -v '^#' >>"$out" || true
  "$work/bin/pingpong" direct 2>/dev/null | grep -v '^#' >>"$out" || true
  (cd "$work/bin" && ./spawn -x spawn -r 5 2>/dev/null | grep -v '^#' >>"$out") || true
  "$work/bin/tcp_baseline" tcp 2>/dev/null | grep -v '^#' >>"$out" || true
  (cd "$work/bin" && ./tcp_baseline spawn -c 32 2>/dev/null | grep -v '^#' >>"$out") || true
  if [ "${MPI:-1}" != 0 ]; then
    bash "$MPI_HARNESS/run.sh" 2>/dev/null | grep '^mpi_' >>"$out" || true
  fi
  "$ROOT/target/release/limits" sealed 2>/dev/null | grep '^sealed_' >>"$out" || true
  "$ROOT/target/release/limits" exec "$ROOT/target/release/pingpong" 2>/dev/null | grep '^exec_' >>"$out" || true
  "$MIG" spawn -n 4 --wait -- "$ROOT/target/release/pingpong" 2>/dev/null | sed 's/^\[[^]]*\] //' | grep '^mig_' >>"$out"
  "$MIG" spawn -n 1 --wait -- "$ROOT/target/release/pingpong" --spawn 32 2>/dev/null | sed 's/^\[[^]]*\] //' | grep '^mig_' >>"$out"
done
# Medians per figure.
sort -k1,1 -k2,2g "$out" | awk '
  { v[$1] = v[$1] " " $2; u[$1] = $3 }
  END { for (k in v) { n = split(v[k], a, " "); printf "%s %s %s\n", k, a[int((n + 1) / 2)], u[k] } }' \
  | sort >"$work/medians"
cat "$work/medians"
echo
get() { awk -v k="$1" '$1 == k { print $2 }' "$work/medians"; }
ratio() { # ratio LABEL MIG_FIGURE PEER_FIGURE OP TARGET (OP "-": no target, how near a limit)
  local m p
  m=$(get "$2"); p=$(get "$3")
  if [ -z "$m" ] || [ -z "$p" ]; then echo "$1: missing figures ($2=$m, $3=$p)"; return; fi
  awk -v l="$1" -v m="$m" -v p="$p" -v op="$4" -v t="$5" 'BEGIN {
    r = m / p; ok = (op == "<=") ? (r <= t) : (r >= t);
    if (op == "-") { printf "%-44s mig %10.2f  limit %9.2f  ratio %5.2f\n", l, m, p, r; exit }
    printf "%-44s mig %10.2f  peer %10.2f  ratio %5.2f  (target %s %s) %s\n", l, m, p, r, op, t, ok ? "met" : "MISSED" }'
}
echo "ratios (mig / peer, medians of $TRIALS trials):"
ratio "8-byte rtt p50, daemon vs PVM default" mig_rtt_8B_daemon_p50_us pvm_rtt_8B_default_p50_us "<=" 0.7
ratio "16 MiB stream, daemon vs PVM default" mig_bw_16MiB_daemon_MBps pvm_bw_16MiB_default_MBps ">=" 1.5
ratio "1 MiB stream, daemon vs PVM default" mig_bw_1MiB_daemon_MBps pvm_bw_1MiB_default_MBps ">=" 1.0
ratio "64 KiB stream, daemon vs PVM default" mig_bw_64KiB_daemon_MBps pvm_bw_64KiB_default_MBps ">=" 1.0
ratio "8-byte rtt p50, direct vs PVM direct" mig_rtt_8B_direct_p50_us pvm_rtt_8B_direct_p50_us "<=" 0.8
ratio "16 MiB stream, direct vs PVM direct" mig_bw_16MiB_direct_MBps pvm_bw_16MiB_direct_MBps ">=" 1.2
ratio "1 MiB stream, direct vs PVM direct" mig_bw_1MiB_direct_MBps pvm_bw_1MiB_direct_MBps ">=" 0.9
ratio "8-byte rtt p50, remote vs raw TCP" mig_rtt_8B_remote_p50_us tcp_rtt_8B_p50_us "<=" 4
ratio "16 MiB stream, remote vs raw TCP" mig_bw_16MiB_remote_MBps tcp_bw_16MiB_MBps ">=" 0.8
ratio "8-byte rtt p50, direct vs MPICH, one host" mig_rtt_8B_direct_p50_us mpi_rtt_8B_p50_us "<=" 3
ratio "16 MiB stream, direct vs MPICH, one host" mig_bw_16MiB_direct_MBps mpi_bw_16MiB_MBps ">=" 0.9
ratio "spawn 32 until all reported, vs pvm_spawn" mig_spawn_32_report_ms pvm_spawn_32_report_ms "<=" 0.25
ratio "spawn 32 until all reported, vs fork+exec" mig_spawn_32_report_ms fork_spawn_32_report_ms "<=" 3
echo
echo "the same figures against what this machine allows (same run):"
ratio "16 MiB stream, remote vs a sealed TCP link" mig_bw_16MiB_remote_MBps sealed_tcp_bw_16MiB_MBps - -
ratio "sealed TCP link vs raw TCP" sealed_tcp_bw_16MiB_MBps tcp_bw_16MiB_MBps - -
ratio "spawn 32, vs 32 fork+execs of the VP program" mig_spawn_32_report_ms exec_spawn_32_exit_ms - -
