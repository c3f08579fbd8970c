#!/usr/bin/env bash
# Gantry's run command: build the web console and the manual, then build
# and start the server (API, console at /, manual at /docs, scheduling loop,
# simulated demo cluster on SQLite in ./data). Arguments go to
# `gantry serve` (e.g. --no-demo).
set -euo pipefail
cd "$(dirname "$0")/.."

(
  cd frontend
  # Install only when the lock file changed since the last install.
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error
  fi
  npm run -s build
)
scripts/book.sh
exec cargo run --release --bin gantry -- serve "$@"
