#!/usr/bin/env bash
# Gantry in front of Slurm, beside Slurm alone, on the same cluster in one
# run: a real Slurm 22.05 (scripts/test-slurm.sh: slurmctld, slurmdbd on
# MariaDB, one slurmd per emulated 8-GPU node, backfill tuned), and the
# job stream of scripts/bench-slurm.sh (2,000 `sleep 1` jobs: 40 % 1 GPU,
# 25 % 2, 20 % 4, 10 % 8, 5 % two nodes of 8, job i by (i * 37) % 100):
# first submitted by `sbatch` alone, then over REST into a Gantry region
# whose nodes are the cluster's partition. Each is timed from its first
# submission to its last completion.
#
#   scripts/bench-slurm-region.sh      NODES=16 JOBS=2000 PROFILE=release
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-16}
JOBS=${JOBS:-2000}
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
  cargo build --release --locked -p gantry-server --bin gantry
else
  cargo build --locked -p gantry-server --bin gantry
fi
bin=target/$PROFILE/gantry

work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  scripts/test-slurm.sh stop "$work/slurm" || true
  rm -rf "$work"
}
trap cleanup EXIT

conf=$(scripts/test-slurm.sh start "$work/slurm" "$NODES" 8 h100)
echo "== Slurm alone: ${NODES} nodes x 8 GPUs, ${JOBS} jobs by sbatch"
python3 scripts/bench_slurm_region.py slurm "$work/slurm/out" "$conf" "$NODES" "$JOBS" | tee "$work/slurm.txt"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:${port}"
env GANTRY_DATA_DIR="$work/data" GANTRY_LISTEN="127.0.0.1:${port}" GANTRY_DEMO=false \
  GANTRY_RATE_LIMIT_PER_SECOND=1000000 GANTRY_RATE_LIMIT_BURST=1000000 \
  RUST_LOG=warn "$bin" serve >"$work/server.log" 2>&1 &
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
GANTRY_DATA_DIR="$work/data" "$bin" admin create-operator \
  --email operator@bench.example --password "bench passphrase 1" >/dev/null
tenant=$(signup tenant)
token=$(echo "$tenant" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
org=$(echo "$tenant" | python3 -c 'import json,sys; print(json.load(sys.stdin)["organization"]["id"])')
echo "== Gantry in front of the same Slurm: ${JOBS} jobs over REST ($PROFILE build, SQLite)"
python3 scripts/bench_slurm_region.py gantry "$base" "$operator" "$token" "$org" "$work/data/gantry.db" \
  "$conf" "$work/slurm/out" "$NODES" "$JOBS" | tee "$work/gantry.txt"

slurm_s=$(sed -n 's/^first submission -> all completed: \([0-9.]*\) s$/\1/p' "$work/slurm.txt")
gantry_s=$(sed -n 's/^first submission -> all completed: \([0-9.]*\) s$/\1/p' "$work/gantry.txt")
echo "== same run, same cluster: first submission -> all completed"
python3 -c "g, s = $gantry_s, $slurm_s; print(f'Gantry in front of Slurm {g:.1f} s, Slurm alone {s:.1f} s: {g / s:.2f} x, {g - s:+.1f} s')"
