#!/usr/bin/env bash
# The layer check's own test: in a copy of the workspace's manifests and
# sources, it passes as committed, then fails on each edge the layer table
# forbids once that edge is written into a real Cargo.toml.
set -euo pipefail
cd "$(dirname "$0")/.."

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git ls-files -z --cached --others --exclude-standard -- Cargo.toml Cargo.lock backend migrations tests |
  tar --null -T - -cf - | tar -xf - -C "$copy"

check() { (cd "$copy" && cargo metadata --no-deps --offline --format-version 1 >metadata.json &&
  python3 "$OLDPWD/scripts/check-layers.py" --metadata metadata.json --layers backend/layers.toml); }

# Adds `dependency` to the [dependencies] of the manifest at `path`.
depend() {
  local path=$1 dependency=$2
  cp "$copy/$path" "$copy/$path.orig"
  python3 - "$copy/$path" "$dependency" <<'PY'
import sys
path, dependency = sys.argv[1], sys.argv[2]
text = open(path).read()
line = f"{dependency}.workspace = true\n"
head = "[dependencies]\n"
text = text.replace(head, head + line, 1) if head in text else text + "\n" + head + line
open(path, "w").write(text)
PY
}
restore() { mv "$copy/$1.orig" "$copy/$1"; }

# Fails unless the check refuses the copy with a message naming `expected`.
refuses() {
  local expected=$1 output
  if output=$(check 2>&1); then
    echo "the layer check passed an edge it must refuse: $expected" >&2
    exit 1
  fi
  if ! grep -qF "$expected" <<<"$output"; then
    echo "the layer check failed without naming $expected:" >&2
    echo "$output" >&2
    exit 1
  fi
  echo "refused as it should: $expected"
}

check >/dev/null

depend backend/scheduler/Cargo.toml gantry-sim
refuses "gantry-scheduler -> gantry-sim: not allowed"
restore backend/scheduler/Cargo.toml

depend backend/sim/Cargo.toml gantry-server
refuses "gantry-sim -> gantry-server: only test code may depend on the server"
restore backend/sim/Cargo.toml

# Test support is for test code only.
depend backend/sim/Cargo.toml gantry-test-support
refuses "gantry-sim -> gantry-test-support: not allowed"
restore backend/sim/Cargo.toml

# An edge the table lists but that points up a layer is refused too.
sed -i '/^\[crates.gantry-sim\]$/,/^uses/ s/^uses = \[\(.*\)\]$/uses = [\1, "gantry-entities"]/' "$copy/backend/layers.toml"
depend backend/sim/Cargo.toml gantry-entities
refuses "gantry-sim -> gantry-entities: layer 1 may not use layer 2"
restore backend/sim/Cargo.toml

check >/dev/null
echo "the layer check passes the workspace as it is and refuses each forbidden edge"
