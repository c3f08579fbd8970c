#!/usr/bin/env python3
"""How knotted the Rust crates are: for each workspace crate its lines, the
largest group of top-level modules that import each other in a circle (a
strongly connected component of the `crate::` import graph), and the uses of
`crate::app::`, the module that once held both the state and the router.

Usage: scripts/module-report.py [--markdown]"""

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\};", re.S)
GROUP_HEAD = re.compile(r"(?:^|[{,])\s*([a-z_][a-z0-9_]*)\b")


def workspace_crates() -> list[tuple[str, Path]]:
    metadata = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=ROOT
        )
    )
    crates = []
    for package in metadata["packages"]:
        src = Path(package["manifest_path"]).parent / "src"
        if src.is_dir():
            crates.append((package["name"], src))
    return sorted(crates)


def top_level_modules(src: Path) -> dict[str, list[Path]]:
    """Each top-level module with the files it spans; the crate roots
    (lib.rs, main.rs) are left out, as they only declare modules."""
    modules: dict[str, list[Path]] = {}
    for entry in src.iterdir():
        if entry.is_file() and entry.suffix == ".rs" and entry.stem not in ("lib", "main"):
            modules.setdefault(entry.stem, []).append(entry)
        elif entry.is_dir():
            modules.setdefault(entry.name, []).extend(sorted(entry.rglob("*.rs")))
    return modules


def imports(text: str, modules: dict[str, list[Path]]) -> set[str]:
    names = set(CRATE_PATH.findall(text))
    for group in USE_GROUP.findall(text):
        depth, flat = 0, []
        # Only the group's outermost names are modules of this crate.
        for ch in group:
            depth += ch == "{"
            depth -= ch == "}"
            flat.append(ch if depth == 0 or ch in "{}" else " ")
        names.update(GROUP_HEAD.findall("".join(flat)))
    return {name for name in names if name in modules}


def largest_cycle(graph: dict[str, set[str]]) -> list[str]:
    """The largest strongly connected component (Tarjan), as a sorted list;
    a single module counts only if it imports itself, which it cannot."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    best: list[str] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter, best
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 and len(component) > len(best):
                best = sorted(component)

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return best


def main() -> int:
    markdown = "--markdown" in sys.argv[1:]
    rows = []
    for name, src in workspace_crates():
        modules = top_level_modules(src)
        graph: dict[str, set[str]] = defaultdict(set)
        lines = app_uses = 0
        for module, files in modules.items():
            graph[module]
            for file in files:
                text = file.read_text()
                lines += text.count("\n")
                app_uses += text.count("crate::app::")
                graph[module] |= imports(text, modules) - {module}
        for root in ("lib.rs", "main.rs"):
            if (src / root).is_file():
                lines += (src / root).read_text().count("\n")
        cycle = largest_cycle(graph)
        rows.append((name, lines, len(modules), cycle, app_uses))
    if markdown:
        print("| crate | lines | top-level modules | largest import cycle | `crate::app::` uses |")
        print("| --- | ---: | ---: | ---: | ---: |")
    for name, lines, count, cycle, app_uses in sorted(rows, key=lambda r: -r[1]):
        if markdown:
            print(f"| `{name}` | {lines} | {count} | {len(cycle)} | {app_uses} |")
        else:
            members = ", ".join(cycle) if cycle else "none"
            print(f"{name}: {lines} lines, {count} top-level modules, "
                  f"`crate::app::` {app_uses}, largest import cycle {len(cycle)}: {members}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
