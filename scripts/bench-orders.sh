#!/usr/bin/env bash
# Ordering benchmarks against a release build with the demo installation, on
# SQLite and on PostgreSQL:
#   1. order-to-running latency on an idle cluster (simulated driver with no
#      provisioning delay, so the figure is the control plane's own share);
#   2. order creation throughput and latency with wrk (POST /orgs/{id}/orders),
#      beside pgbench's single-row insert rate on the same PostgreSQL;
#   3. scheduling loop time with 1,000 nodes and 10,000 queued orders.
#
#   scripts/bench-orders.sh
#   ENGINES=sqlite scripts/bench-orders.sh
#
# Needs wrk (Debian: apt-get install wrk) and, for PostgreSQL, pgbench and the
# server at GANTRY_BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432).
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

start_server() {
  local engine=$1 log=$2
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
  GANTRY_DATA_DIR="$work/data" GANTRY_LISTEN="127.0.0.1:${port}" \
    RUST_LOG=warn,gantry_scheduling=debug GANTRY_SIMULATED_PROVISION_MS=0 \
    GANTRY_MAX_WAITING_ORDERS=100000 \
    GANTRY_RATE_LIMIT_PER_SECOND=10000000 GANTRY_RATE_LIMIT_BURST=10000000 \
    ./target/release/gantry serve >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
}

stop_server() {
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
}

login() {
  curl -fsS -X POST "$base/api/v1/auth/login" -H 'content-type: application/json' \
    -d "{\"email\":\"$1\",\"password\":\"$2\"}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])'
}

for engine in $ENGINES; do
  start_server "$engine" "$work/server-$engine.log"
  token=$(login tenant@demo.gantry.dev "gantry tenant demo")
  operator=$(login operator@demo.gantry.dev "gantry operator demo")
  org=$(curl -fsS "$base/api/v1/me" -H "authorization: Bearer $token" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["memberships"][0]["organization"]["id"])')

  echo "### $engine: order-to-running latency, idle demo cluster (28 nodes)"
  python3 scripts/bench_orders.py latency "$base" "$token" "$org" 50

  echo "### $engine: POST /api/v1/orgs/{id}/orders (h100x1, the loop running beside)"
  cat >"$work/order.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer ${token}"
wrk.body = '{"instance_type":"h100x1"}'
LUA
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$work/order.lua" "$base/api/v1/orgs/$org/orders" |
    tee "$work/wrk-$engine.txt"
  stop_server

  if [ "$engine" = postgres ]; then
    # What the webhook outbox costs: order creation on a fresh database
    # without the trigger that writes an event row in every order's
    # transaction, then with it again, each run as long as the one above.
    for variant in without with; do
      echo "### postgres: order creation, fresh database, $variant the webhook outbox trigger"
      start_server "$engine" "$work/server-$variant.log"
      if [ "$variant" = without ]; then
        psql "$PG/gantry_bench" -qc "DROP TRIGGER orders_webhook ON orders"
      fi
      token=$(login tenant@demo.gantry.dev "gantry tenant demo")
      org=$(curl -fsS "$base/api/v1/me" -H "authorization: Bearer $token" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["memberships"][0]["organization"]["id"])')
      sed -i "s/Bearer .*\"/Bearer ${token}\"/" "$work/order.lua"
      wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s "$work/order.lua" "$base/api/v1/orgs/$org/orders" |
        grep -E "Requests/sec|^ +(50|99)%"
      stop_server
    done

    # The database's own limit on the same machine, same clients: one
    # single-row INSERT per transaction, as pgbench measures it.
    echo "### postgres: pgbench, one single-row INSERT per transaction"
    psql "$PG/gantry_bench" -qc "CREATE TABLE pgbench_rows (id bigserial PRIMARY KEY, org uuid NOT NULL, body text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
    echo "INSERT INTO pgbench_rows (org, body) VALUES ('$org', '{\"instance_type\":\"h100x1\"}');" >"$work/insert.sql"
    pgbench -n -c "$CONNECTIONS" -j "$THREADS" -T "${DURATION%s}" -f "$work/insert.sql" "$PG/gantry_bench" |
      grep -E "^(tps|latency average|number of transactions actually)" | tee "$work/pgbench.txt"
    orders=$(sed -n 's/^Requests\/sec: *\([0-9.]*\)/\1/p' "$work/wrk-postgres.txt")
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.txt")
    python3 -c "o, t = $orders, $tps; print(f'same run: {o:.0f} orders/s against pgbench {t:.0f} tps: {100 * o / t:.1f} %')"
  fi

  echo "### $engine: scheduling loop, 1,000 nodes and 10,000 queued orders"
  start_server "$engine" "$work/loop-$engine.log"
  token=$(login tenant@demo.gantry.dev "gantry tenant demo")
  operator=$(login operator@demo.gantry.dev "gantry operator demo")
  org=$(curl -fsS "$base/api/v1/me" -H "authorization: Bearer $token" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["memberships"][0]["organization"]["id"])')
  # No quota limit, so that every order is the engine's to place.
  curl -fsS -X PUT "$base/api/v1/admin/orgs/$org/quotas" -H "authorization: Bearer $operator" \
    -H 'content-type: application/json' -d '{"quotas":[]}' >/dev/null
  python3 scripts/bench_orders.py nodes "$base" "$operator" 972
  python3 scripts/bench_orders.py fill "$base" "$token" "$org" 11000
  sleep 20
  python3 scripts/bench_orders.py cycles "$work/loop-$engine.log"
  stop_server
done
