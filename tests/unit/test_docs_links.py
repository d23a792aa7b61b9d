"""Every relative link of README.md and docs/*.md names a file that exists, and an anchor names a heading there.

The README is short and points into docs/ for the rest, so a page renamed or a heading reworded would leave a
user at a dead link. Links with a scheme (``https:``, ``mailto:``) are not followed; links inside fenced code
blocks are not links.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (``-`` and ``_`` kept), spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {heading_anchor(line.lstrip("#")) for line in prose_lines(page.read_text()) if re.match(r"#+ ", line)}


def broken_links(page: Path) -> list[str]:
    """``target: why`` for each relative link of ``page`` that does not resolve."""
    broken = []
    for line in prose_lines(page.read_text()):
        for target in LINK.findall(line):
            if SCHEME.match(target):
                continue
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{target}: no such file {resolved}")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return broken


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Supported SGLang releases\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page: `one`\n"
        "[ok](other.md) [ok](other.md#supported-sglang-releases) [ok](#page-one) [web](https://example.com/x)\n"
        "[gone](missing.md) [bad anchor](other.md#no-such-heading) [bad own anchor](#nowhere)\n"
        "```\n[in code](also-missing.md)\n```\n"
    )
    assert broken_links(page) == [
        f"missing.md: no such file {tmp_path / 'missing.md'}",
        "other.md#no-such-heading: no heading #no-such-heading in other.md",
        "#nowhere: no heading #nowhere in page.md",
    ]


def test_the_readme_links_into_docs():
    readme = (REPO / "README.md").read_text()
    assert "(docs/" in readme


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []
