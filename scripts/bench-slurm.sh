#!/usr/bin/env bash
# Gantry beside Slurm on one machine, in one run: the same stream of one-
# second jobs (40 % 1 GPU, 25 % 2, 20 % 4, 10 % 8, 5 % two nodes of 8, job i
# by (i * 37) % 100) on NODES emulated 8-GPU servers, every job a real
# `sleep 1` process, timed from the first submission to the last completion.
#
#   Slurm 22.05 (Debian packages), one slurmd per emulated node, backfill
#   tuned (batch_sched_delay=0, bf_interval=1, bf_continue,
#   default_queue_depth=1000), through the scripts in SLURM_PEER_DIR
#   (run_slurm_peer.sh, bench_slurm_peer.sh, stop_slurm_peer.sh); skipped
#   when it is not set.
#   Gantry: release build on SQLite, one real gantry-agent per node with
#   simulated GPUs in the sandbox runtime: scripts/bench-jobs.sh with
#   AGENTS=1.
#
#   SLURM_PEER_DIR=/path/to/slurmpeer scripts/bench-slurm.sh
#   NODES=16 JOBS=2000 by default.
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-16}
JOBS=${JOBS:-2000}

if [ -n "${SLURM_PEER_DIR:-}" ]; then
  echo "== Slurm 22.05: ${NODES} nodes x 8 GPUs, ${JOBS} jobs, backfill tuned"
  SP_SCHED_PARAMS="batch_sched_delay=0,bf_interval=1,bf_continue,default_queue_depth=1000" \
    "$SLURM_PEER_DIR/run_slurm_peer.sh" "$NODES" >/dev/null
  out=$("$SLURM_PEER_DIR/bench_slurm_peer.sh" "$JOBS" 1 | tail -1 | sed 's/^results in //')
  cat "$out/summary.txt"
  slurm_s=$(sed -n 's/^all jobs completed (jobcomp) by poll at +\([0-9.]*\) s.*/\1/p' "$out/summary.txt")
  bound_s=$(sed -n 's/.*lower bound on makespan at 100% GPU use \([0-9.]*\) s.*/\1/p' "$out/summary.txt")
  "$SLURM_PEER_DIR/stop_slurm_peer.sh" >/dev/null 2>&1 || true
fi

gantry_log=$(mktemp)
NODES=$NODES JOBS=$JOBS AGENTS=1 scripts/bench-jobs.sh | tee "$gantry_log"
gantry_s=$(sed -n 's/^first submission -> all completed: \([0-9.]*\) s$/\1/p' "$gantry_log")
rm -f "$gantry_log"
if [ -n "${slurm_s:-}" ] && [ -n "$gantry_s" ]; then
  echo "== same run: first submission -> all completed"
  python3 -c "g, s, b = $gantry_s, $slurm_s, $bound_s; print(f'Gantry {g:.1f} s, Slurm {s:.1f} s, bound {b:.1f} s: Gantry / Slurm {g / s:.2f}, Gantry / bound {g / b:.2f}')"
fi
