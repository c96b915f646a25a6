"""Every relative link in README.md and docs/*.md points to a file or folder that exists.

Links are found with markdown-it-py (rich's Markdown parser, already installed), so a link-like text
inside a code block is not a link, as on GitHub. Anchors (`#section`) are not checked: GitHub builds
them from headings, and a heading's wording is free to change.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _targets(tokens) -> list[str]:
    """The href of every link and the src of every image, inline tokens included."""
    found = []
    for token in tokens:
        if token.type == "link_open":
            found.append(token.attrGet("href"))
        elif token.type == "image":
            found.append(token.attrGet("src"))
        if token.children:
            found.extend(_targets(token.children))
    return found


def broken_links(document: Path) -> list[str]:
    """The relative targets in `document` that name no existing path (anchor and query stripped)."""
    parser = MarkdownIt("commonmark").enable("table")
    broken = []
    for target in _targets(parser.parse(document.read_text(encoding="utf-8"))):
        parts = urlsplit(target or "")
        if parts.scheme or parts.netloc or not parts.path:  # a URL, mailto:, or an anchor alone
            continue
        if not (document.parent / unquote(parts.path)).exists():
            broken.append(target)
    return broken


def test_the_checker_finds_a_broken_link_and_only_that(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# There\n")
    (tmp_path / "picture.png").write_bytes(b"")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "See [there](there.md#a-section), [up](../picture.png), [web](https://example.org/x.md),\n"
        "[anchor](#top), ![image](../picture.png) and [gone](missing.md#part).\n\n"
        "| a | b |\n| --- | --- |\n| [in a table](../nowhere.md) | x |\n\n"
        "```\n[not a link](inside-code.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["missing.md#part", "../nowhere.md"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(document: Path) -> None:
    assert broken_links(document) == []
