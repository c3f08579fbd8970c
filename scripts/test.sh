#!/usr/bin/env bash
# Gantry's test command: formatting, lints, every Rust test (the API suite on
# SQLite and on PostgreSQL), schemathesis against a running server, and the
# web console's checks, unit tests and browser tests.
#
# The console needs Node.js 20.19+ with npm, and Chromium at /usr/bin/chromium
# (or where CHROMIUM points); .ci/run installs Chromium.
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

step "the layer table: crates depend only downwards"
scripts/check-layers.py
scripts/check-layers-test.sh

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

kill "$server_pid" 2>/dev/null || true

# Vitest's JSON report: "passed failed".
vitest_counts() {
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["numPassedTests"], r["numFailedTests"])' "$1"
}
reports=$(mktemp -d)

step "the manual: mdbook build docs, its links"
scripts/book.sh

step "console: install, generated client, type-check, lint, unit tests"
(
  cd frontend
  npm ci --no-audit --no-fund --loglevel=error
  npm run -s check:generated
  npm run -s typecheck
  npm run -s lint
  npx vitest run --reporter=default --reporter=json --outputFile="$reports/unit.json"
)
read -r unit_passed unit_failed < <(vitest_counts "$reports/unit.json")

step "console: production build"
(cd frontend && npm run -s build)

step "console: browser tests (chromium, real server)"
(
  cd frontend
  GANTRY_BIN="$PWD/../target/debug/gantry" npx vitest run --config vitest.e2e.config.ts \
    --reporter=default --reporter=json --outputFile="$reports/e2e.json"
)
read -r e2e_passed e2e_failed < <(vitest_counts "$reports/e2e.json")
rm -rf "$reports"

# The schemathesis run counts as one more passed test.
echo
echo "$((passed + 1 + unit_passed + e2e_passed)) passed, $((failed + unit_failed + e2e_failed)) failed"
