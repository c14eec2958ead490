"""The README and docs/ link only to what exists: every relative link names a file of the
checkout, and every `#anchor` a heading of its target, as GitHub and PyPI make anchors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def prose_lines(path: Path) -> list[str]:
    """The lines of `path` outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose_lines(path):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return [target for line in prose_lines(path) for target in LINK.findall(CODE_SPAN.sub("", line))]


def test_the_documents_exist() -> None:
    assert (ROOT / "README.md").is_file()
    assert len(DOCUMENTS) > 1, "docs/*.md"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in links(document):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not a file of the checkout
            continue
        name, _, anchor = target.partition("#")
        file = (document.parent / name).resolve() if name else document
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_is_a_landing_page() -> None:
    """At most 300 lines, a table of contents near the top, and the two commands in it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines"
    assert "## Contents" in "\n".join(lines[:40])
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert command in text
        assert (ROOT / command.split()[1]).is_file()
