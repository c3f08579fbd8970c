#!/usr/bin/env bash
# API load benchmark: authenticated GET /api/v1/me and GET /orgs/{id}/projects,
# and POST /auth/login, with wrk against a release build, on SQLite and on
# PostgreSQL. Prints wrk's throughput and latency percentiles.
#
#   scripts/bench-api.sh            # both engines
#   ENGINES=sqlite scripts/bench-api.sh
#
# Needs wrk (Debian: apt-get install wrk) and, for PostgreSQL, the server at
# GANTRY_BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432).
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINES=${ENGINES:-"sqlite postgres"}
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
PG=${GANTRY_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}

command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
cargo build --release --locked --bin gantry

work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS gantry_bench WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

for engine in $ENGINES; do
  rm -rf "$work/data"
  if [ "$engine" = postgres ]; then
    psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS gantry_bench WITH (FORCE)" >/dev/null
    psql "$PG/postgres" -qc "CREATE DATABASE gantry_bench" >/dev/null
    export DATABASE_URL="$PG/gantry_bench"
  else
    unset DATABASE_URL
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  base="http://127.0.0.1:${port}"
  # The per-caller rate limit would cap one benchmark caller at its burst;
  # it is lifted here so the server itself is measured.
  GANTRY_DATA_DIR="$work/data" GANTRY_LISTEN="127.0.0.1:${port}" RUST_LOG=warn \
    GANTRY_RATE_LIMIT_PER_SECOND=10000000 GANTRY_RATE_LIMIT_BURST=10000000 \
    ./target/release/gantry serve >"$work/server-$engine.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

  password="load test passphrase 42"
  signup=$(curl -fsS -X POST "$base/api/v1/auth/signup" -H 'content-type: application/json' \
    -d "{\"email\":\"bench@example.com\",\"password\":\"${password}\",\"name\":\"Bench\",\"organization\":\"Bench\"}")
  token=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["access_token"])' "$signup")
  org=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["organization"]["id"])' "$signup")
  for i in $(seq 1 20); do
    curl -fsS -X POST "$base/api/v1/orgs/$org/projects" -H "authorization: Bearer $token" \
      -H 'content-type: application/json' -d "{\"name\":\"project-$i\"}" >/dev/null
  done
  cat >"$work/login.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"email":"bench@example.com","password":"${password}"}'
LUA

  echo "### $engine: GET /api/v1/me"
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -H "Authorization: Bearer $token" "$base/api/v1/me"
  echo "### $engine: GET /api/v1/orgs/{id}/projects (20 projects, one page)"
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -H "Authorization: Bearer $token" "$base/api/v1/orgs/$org/projects"
  echo "### $engine: POST /api/v1/auth/login (argon2id m=19456 KiB, t=2, p=1)"
  wrk -t"$THREADS" -c8 -d"$DURATION" --latency -s "$work/login.lua" "$base/api/v1/auth/login"

  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
done
