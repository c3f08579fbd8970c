#!/usr/bin/env bash
# Billing benchmarks against a release build, on SQLite and on PostgreSQL:
#   1. one metering tick over 10,000 running allocations (10,000 new usage
#      records), as the scheduling leader runs it;
#   2. rating and invoicing a month of 1,000,000 usage records.
#
#   scripts/bench-billing.sh
#   ENGINES=postgres scripts/bench-billing.sh
#
# PostgreSQL: the server at GANTRY_BENCH_POSTGRES_URL
# (default postgres://postgres@127.0.0.1:5432).
set -euo pipefail
cd "$(dirname "$0")/.."

ENGINES=${ENGINES:-"sqlite postgres"}
PG=${GANTRY_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}

cargo build --release --locked -p gantry-server --example bench_billing
work=$(mktemp -d)
cleanup() {
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS gantry_bench_billing WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

for engine in $ENGINES; do
  echo "### $engine"
  if [ "$engine" = postgres ]; then
    psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS gantry_bench_billing WITH (FORCE)" >/dev/null
    psql "$PG/postgres" -qc "CREATE DATABASE gantry_bench_billing" >/dev/null
    url="$PG/gantry_bench_billing"
  else
    url="sqlite://$work/bench.db?mode=rwc"
  fi
  RUST_LOG=warn ./target/release/examples/bench_billing "$url"
done
