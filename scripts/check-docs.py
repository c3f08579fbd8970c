#!/usr/bin/env python3
"""Checks the manual's links: every relative link in README.md and docs/
names a file that exists and, with a #fragment, a heading of that file;
every page in docs/ is in the book's SUMMARY.md. mdBook itself builds
pages with broken links without a word."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The id mdBook and GitHub give a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose(path: Path) -> list[str]:
    """The file's lines outside fenced code."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    return {slug(l.lstrip("#")) for l in prose(path) if re.match(r"^#{1,6} ", l)}


def main() -> int:
    problems = []
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    for page in pages:
        for line in prose(page):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("<"):
                    continue
                file, _, fragment = target.partition("#")
                where = (page.parent / file).resolve() if file else page
                if not where.is_file():
                    problems.append(f"{page.relative_to(ROOT)}: {target}: no such file")
                elif fragment and where.suffix == ".md" and fragment not in anchors(where):
                    problems.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    listed = set(LINK.findall((DOCS / "SUMMARY.md").read_text()))
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "SUMMARY.md" and page.name not in listed:
            problems.append(f"docs/{page.name}: not in SUMMARY.md")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
