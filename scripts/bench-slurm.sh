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
#   simulated GPUs in the sandbox runtime; the 16-client REST submitter of
#   scripts/bench_jobs.py.
#
#   SLURM_PEER_DIR=/path/to/slurmpeer scripts/bench-slurm.sh
#   NODES=16 JOBS=2000 by default.
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-16}
JOBS=${JOBS:-2000}
command -v bwrap >/dev/null || { echo "the agents' sandbox needs bubblewrap: apt-get install bubblewrap" >&2; exit 1; }
cargo build --release --locked -p gantry-server --bin gantry -p gantry-agent --bin gantry-agent

if [ -n "${SLURM_PEER_DIR:-}" ]; then
  echo "== Slurm 22.05: ${NODES} nodes x 8 GPUs, ${JOBS} jobs, backfill tuned"
  SP_SCHED_PARAMS="batch_sched_delay=0,bf_interval=1,bf_continue,default_queue_depth=1000" \
    "$SLURM_PEER_DIR/run_slurm_peer.sh" "$NODES" >/dev/null
  out=$("$SLURM_PEER_DIR/bench_slurm_peer.sh" "$JOBS" 1 | tail -1 | sed 's/^results in //')
  cat "$out/summary.txt"
  "$SLURM_PEER_DIR/stop_slurm_peer.sh" >/dev/null 2>&1 || true
fi

work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:${port}"
GANTRY_DATA_DIR="$work/data" GANTRY_LISTEN="127.0.0.1:${port}" GANTRY_DEMO=false \
  GANTRY_RATE_LIMIT_PER_SECOND=1000000 GANTRY_RATE_LIMIT_BURST=1000000 \
  RUST_LOG=warn ./target/release/gantry serve >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "$base/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
signup() {
  curl -fsS -X POST "$base/api/v1/auth/signup" -H 'content-type: application/json' \
    -d "{\"email\":\"$1@bench.example\",\"password\":\"bench passphrase 1\",\"name\":\"$1\",\"organization\":\"$1\"}"
}
operator=$(signup operator | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
GANTRY_DATA_DIR="$work/data" ./target/release/gantry admin create-operator \
  --email operator@bench.example --password "bench passphrase 1" >/dev/null
tenant=$(signup tenant)
token=$(echo "$tenant" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
org=$(echo "$tenant" | python3 -c 'import json,sys; print(json.load(sys.stdin)["organization"]["id"])')
echo "== Gantry: ${NODES} real agents x 8 simulated GPUs, ${JOBS} jobs"
python3 scripts/bench_jobs.py "$base" "$operator" "$token" "$org" "$work/data/gantry.db" "$NODES" "$JOBS" \
  target/release
