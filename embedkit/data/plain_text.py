"""Text as one line of plain text: Markdown's markup dropped, white space collapsed.

What a snippet shows (`embedkit.search.snippets`) and what a Markdown heading reads as
(`embedkit.data.markdown_title`). Markdown is read by markdown-it-py (a CommonMark parser; rich
depends on it too), never by patterns of ours: a `*` between spaces stays, `**bold**` loses its
stars, a link keeps its words and drops its target. Raw HTML is not parsed (a text's "<b>" is
its text), tables are read as rows of cells. Text without Markdown comes back with only its white
space collapsed: a PDF's line breaks, a table's tabs.
"""

from __future__ import annotations

import re
from functools import cache

# What can make a text Markdown: without any of it CommonMark reads a text as its own words (an
# indented line is code, kept as it is), so the parse is skipped (a snippet's window: a third of
# its time went to it); emphasis, code, links, escapes and entities, headings, quotes and tables,
# list items and Setext underlines
_MARKUP = re.compile(r"[*_`\[\]!<>#|&\\~]|^[ \t]*(?:[-+=]|\d{1,9}[.)])", re.MULTILINE)


def one_line(text: str) -> str:
    """`text` as one line of plain text: headings', lists' and quotes' marks, emphasis, links'
    targets and code fences dropped (an ordered item keeps its number), white space collapsed."""
    return parsed_line(text) if _MARKUP.search(text) else " ".join(text.split())


def parsed_line(text: str) -> str:
    """`one_line` by markdown-it-py's parse, whatever the text holds."""
    parts: list[str] = []
    for token in _markdown().parse(text):
        if token.type == "inline":
            parts.append(inline_text(token.children or []))
        elif token.type in ("fence", "code_block"):
            parts.append(token.content)
        elif token.type == "list_item_open" and token.info:
            parts.append(f"{token.info}{token.markup}")  # "1." of an ordered list
    return " ".join(" ".join(parts).split())


def inline_text(children) -> str:
    """The text of a block's inline tokens (markdown-it-py's): words and code spans, an image's
    alt text; no markup; white space collapsed."""
    parts = []
    for child in children:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(inline_text(child.children or []))
    return " ".join("".join(parts).split())


@cache
def _markdown():  # -> markdown_it.MarkdownIt
    """CommonMark with tables, raw HTML left as text."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")
