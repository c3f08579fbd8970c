#!/usr/bin/env bash
# Gantry's test command: formatting, lints, every Rust test (the API suite on
# SQLite and on PostgreSQL), and schemathesis against a running server.
#
# PostgreSQL: the suite creates and drops its own databases on the server at
# GANTRY_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres).
# Locally, GANTRY_TEST_POSTGRES=skip skips that half; CI refuses the switch.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
SCHEMATHESIS_EXAMPLES=${SCHEMATHESIS_EXAMPLES:-25}

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test"
test_log=$(mktemp)
cargo test --workspace --locked 2>&1 | tee "$test_log"
read -r passed failed < <(awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i + 1) ~ /^passed/) p += $i; if ($(i + 1) ~ /^failed/) f += $i } } END { print p + 0, f + 0 }' "$test_log")
rm -f "$test_log"

step "schemathesis ${SCHEMATHESIS_VERSION} against a running server"
venv=target/schemathesis-venv
if [ ! -x "$venv/bin/schemathesis" ] || ! "$venv/bin/schemathesis" --version | grep -q "$SCHEMATHESIS_VERSION"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==${SCHEMATHESIS_VERSION}"
fi
data_dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:${port}"
export GANTRY_DATA_DIR="$data_dir" GANTRY_LISTEN="127.0.0.1:${port}" \
  GANTRY_RATE_LIMIT_PER_SECOND=1000000 GANTRY_RATE_LIMIT_BURST=1000000
unset DATABASE_URL
./target/debug/gantry serve >"$data_dir/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true; rm -rf "$data_dir"' EXIT
for _ in $(seq 1 100); do
  curl -fsS "$base/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
password="schemathesis correct horse"
token=$(curl -fsS -X POST "$base/api/v1/auth/signup" -H 'content-type: application/json' \
  -d "{\"email\":\"fuzz@example.com\",\"password\":\"${password}\",\"name\":\"Fuzz\",\"organization\":\"Fuzz\"}" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["access_token"])')
./target/debug/gantry admin create-operator --email fuzz@example.com --password "$password" >/dev/null
"$venv/bin/schemathesis" run "$base/api/v1/openapi.json" --url "$base" \
  -H "Authorization: Bearer ${token}" \
  --checks not_a_server_error,response_schema_conformance,content_type_conformance,status_code_conformance,negative_data_rejection \
  --max-examples "$SCHEMATHESIS_EXAMPLES" --seed 42 --no-color
if grep -qE '(ERROR|panicked)' "$data_dir/server.log"; then
  echo "the server logged errors during the schemathesis run:" >&2
  grep -E '(ERROR|panicked)' "$data_dir/server.log" >&2
  exit 1
fi

# The schemathesis run counts as one more passed test.
echo
echo "$((passed + 1)) passed, ${failed} failed"
