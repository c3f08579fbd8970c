#!/usr/bin/env python3
"""Fails on a dependency between Gantry's crates that backend/layers.toml
does not allow: an edge not listed for its crate, an edge to a crate of the
same or a higher layer, a crate the table does not know, or a crate other
than the server and test code depending on the server. Dev-dependencies
are test code and may use any crate.

Usage: scripts/check-layers.py [--metadata FILE] [--layers FILE]
(by default it runs `cargo metadata` in the repository)."""

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER = "gantry-server"


def problems(metadata: dict, table: dict) -> list[str]:
    crates = table["crates"]
    found = []
    members = set(metadata["workspace_members"])
    for package in metadata["packages"]:
        if package["id"] not in members:
            continue
        name = package["name"]
        if name not in crates:
            found.append(f"{name}: not in backend/layers.toml; give it a layer and its uses")
            continue
        row = crates[name]
        if row.get("test_code"):
            continue
        seen = set()
        for dependency in package["dependencies"]:
            target = dependency["name"]
            kind = dependency["kind"] or "normal"
            if not target.startswith("gantry-") or (target, kind) in seen:
                continue
            seen.add((target, kind))
            if target not in crates:
                found.append(f"{name} -> {target}: {target} is not in backend/layers.toml")
            elif kind == "dev":
                # Test code: it may use any crate, the server included, to
                # test against a running one.
                continue
            elif target == SERVER:
                found.append(f"{name} -> {SERVER}: only test code may depend on the server")
            elif target not in row["uses"]:
                found.append(
                    f"{name} -> {target}: not allowed; {name} (layer {row['layer']}) may use "
                    + (", ".join(row["uses"]) or "no Gantry crate")
                )
            elif crates[target]["layer"] >= row["layer"]:
                found.append(
                    f"{name} -> {target}: layer {row['layer']} may not use layer "
                    f"{crates[target]['layer']}"
                )
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", type=Path, help="cargo metadata JSON to read instead")
    parser.add_argument("--layers", type=Path, default=ROOT / "backend" / "layers.toml")
    args = parser.parse_args()
    if args.metadata:
        metadata = json.loads(args.metadata.read_text())
    else:
        metadata = json.loads(
            subprocess.check_output(
                ["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=ROOT
            )
        )
    table = tomllib.loads(args.layers.read_text())
    found = problems(metadata, table)
    for problem in found:
        print(f"layer check: {problem}", file=sys.stderr)
    if not found:
        print(f"layer check: {len(metadata['workspace_members'])} crates, every dependency allowed")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
