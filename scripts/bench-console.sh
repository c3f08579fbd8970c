#!/usr/bin/env bash
# The console's figures: bundle size (gzip) of the first page and the first
# load of the orders page in Chromium against a local release server on
# SQLite with the demo installation.
set -euo pipefail
cd "$(dirname "$0")/.."

(cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run -s build)
cargo build --release --bin gantry
data_dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
GANTRY_DATA_DIR="$data_dir" GANTRY_LISTEN="127.0.0.1:${port}" GANTRY_RATE_LIMIT_PER_SECOND=100000 \
  GANTRY_RATE_LIMIT_BURST=100000 ./target/release/gantry serve >"$data_dir/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true; rm -rf "$data_dir"' EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:${port}/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
# A few orders so the page has rows to show.
token=$(curl -fsS -X POST "http://127.0.0.1:${port}/api/v1/auth/login" -H 'content-type: application/json' \
  -d '{"email":"tenant@demo.gantry.dev","password":"gantry tenant demo"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')
org=$(curl -fsS "http://127.0.0.1:${port}/api/v1/me" -H "authorization: Bearer $token" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["memberships"][0]["organization"]["id"])')
for type in h100x8 h100x1 h200x8 l40sx4 h100x2; do
  curl -fsS -X POST "http://127.0.0.1:${port}/api/v1/orgs/${org}/orders" -H "authorization: Bearer $token" \
    -H 'content-type: application/json' -d "{\"instance_type\":\"${type}\"}" >/dev/null
done
(cd frontend && node scripts/first-load.mjs "http://127.0.0.1:${port}" tenant@demo.gantry.dev 'gantry tenant demo' 20)
