#!/usr/bin/env bash
# The job stream: 2,000 one-second jobs submitted over REST as fast as the
# API takes them (40 % 1 GPU, 25 % 2, 20 % 4, 10 % 8, 5 % two nodes of 8)
# onto 16 simulated nodes of 8 GPUs, then the same stream onto 128 nodes.
# Release build, SQLite; the simulated driver brings jobs up and down with
# no delay, so the figures are the control plane's own.
#
#   scripts/bench-jobs.sh            NODES="16 128" JOBS=2000 by default
#   AGENTS=1: the nodes are real gantry-agent processes (simulated GPUs,
#   sandbox runtime), every job runs `sleep 1`, the loop keeps its default
#   interval; scripts/bench-slurm.sh runs it beside Slurm.
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-"16 128"}
JOBS=${JOBS:-2000}
AGENTS=${AGENTS:-}
if [ -n "$AGENTS" ]; then
  command -v bwrap >/dev/null || { echo "the agents' sandbox needs bubblewrap: apt-get install bubblewrap" >&2; exit 1; }
  cargo build --release --locked -p gantry-server --bin gantry -p gantry-agent --bin gantry-agent
  agent_bin=(target/release)
  loop=()
else
  cargo build --release --locked --bin gantry
  agent_bin=()
  loop=(GANTRY_SIMULATED_PROVISION_MS=0 GANTRY_SIMULATED_STOP_MS=0 GANTRY_SCHEDULER_INTERVAL_MS=100)
fi

work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for nodes in $NODES; do
  rm -rf "$work/data"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  base="http://127.0.0.1:${port}"
  env GANTRY_DATA_DIR="$work/data" GANTRY_LISTEN="127.0.0.1:${port}" GANTRY_DEMO=false \
    GANTRY_RATE_LIMIT_PER_SECOND=1000000 GANTRY_RATE_LIMIT_BURST=1000000 "${loop[@]}" \
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
  echo "== ${nodes} nodes"
  python3 scripts/bench_jobs.py "$base" "$operator" "$token" "$org" "$work/data/gantry.db" "$nodes" "$JOBS" \
    "${agent_bin[@]}"
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
done
