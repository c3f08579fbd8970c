#!/usr/bin/env bash
# Builds the manual (docs/, an mdBook) into docs/book, which the server
# serves at /docs, and checks its links. mdBook is installed from crates.io
# into target/mdbook on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.5.4
mdbook=target/mdbook/bin/mdbook
if [ ! -x "$mdbook" ] || ! "$mdbook" --version | grep -q "$MDBOOK_VERSION"; then
  cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search \
    --root target/mdbook --quiet
fi
"$mdbook" build docs
python3 scripts/check-docs.py
