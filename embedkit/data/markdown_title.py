"""A Markdown file's title, from its headings as a CommonMark parser reads them.

A README's first `#` line is often not its title: a shell comment inside a fenced or indented
code block, a heading inside a quote, or a section ("Features") written before the level-1 title
further down. So the file is parsed with markdown-it-py (a CommonMark parser; rich depends on it
too) and only the headings it finds at the top level of the document count, ATX (`# Title`) and
Setext (`Title` over `===` or `---`) alike:

1. the first level-1 heading;
2. else the first heading of the highest level present (a file of `##` sections: its first `##`);
3. else none (the caller takes the front matter's `title` before this, the file name after).

The title's text is the heading as read, without its Markdown: `**Fast** [docs](url)` is
"Fast docs". A heading that opens the file is the title and is left out of the text, so that a
document's title and text do not repeat it.

Only the blocks are parsed (the inline syntax of the headings alone), and only the first
`SCAN_CHARS` of a file: markdown-it-py, pure Python, reads about 1 MB of Markdown a second on this
machine's cores, and a title lies at the top.
"""

from __future__ import annotations

from dataclasses import dataclass

SCAN_CHARS = 256 * 1024  # a long README is 50,000 characters
TITLE_CHARS = 1000  # of a heading's Markdown, read for its text: a title is a line, not a page


@dataclass(frozen=True)
class _Heading:
    level: int  # 1 for `#` and `===`, 2 for `##` and `---`, ...
    content: str  # the heading's Markdown, as the block parser found it
    lines: tuple[int, int]  # the lines it spans in the body, [start, end)


def markdown_title(body: str) -> tuple[str | None, str]:
    """The title of a Markdown body (see the module docstring) or None, and the body without the
    title heading when the heading opens it (else the body as given)."""
    found = _title_heading(_headings(body))
    if found is None:
        return None, body
    title, text = found
    lines = body.split("\n")
    first_text = next(i for i, line in enumerate(lines) if line.strip())
    if title.lines[0] != first_text:
        return text, body
    return text, "\n".join(lines[title.lines[1] :]).lstrip("\n")


def _title_heading(headings: list[_Heading]) -> tuple[_Heading, str] | None:
    """The first heading with text of the highest level that has one, and its text. Headings are
    read (their inline syntax parsed) in that order and only until one has text, each at most
    `TITLE_CHARS` of it: a file of 60,000 headings, or one heading of 240,000 brackets, took
    markdown-it-py 7 to 10 s to read whole here."""
    from markdown_it import MarkdownIt

    inline_parser = MarkdownIt("commonmark")
    for heading in sorted(headings, key=lambda h: h.level):  # stable: file order within a level
        inline = inline_parser.parseInline(heading.content[:TITLE_CHARS])[0]
        text = _plain(inline.children or [])
        if text:
            return heading, text
    return None


def _headings(body: str) -> list[_Heading]:
    """The headings at the document's top level (not in a quote or a list item), in order."""
    from markdown_it import MarkdownIt

    if len(body) > SCAN_CHARS:
        body = body[: body.rfind("\n", 0, SCAN_CHARS) + 1]  # whole lines: a cut heading is no heading
    tokens = MarkdownIt("commonmark").disable(["inline", "text_join"]).parse(body)  # blocks only
    return [
        _Heading(int(token.tag[1:]), tokens[i + 1].content, tuple(token.map))
        for i, token in enumerate(tokens)
        if token.type == "heading_open" and token.level == 0 and token.map is not None
    ]


def _plain(children) -> str:
    """The text of a heading's inline tokens: words and code spans, an image's alt text; no markup."""
    parts = []
    for child in children:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(_plain(child.children or []))
    return " ".join("".join(parts).split())
