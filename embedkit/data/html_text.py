"""An HTML page as a title and a text: decoded as a browser decodes it, parsed with bounded work.

Decoding follows the HTML standard's encoding sniffing, on the libraries that own its parts:

1. a byte order mark (UTF-8, UTF-16LE, UTF-16BE) wins over everything;
2. else the page's declaration in its first 1,024 bytes (`<meta charset>`, `<meta http-equiv
   content="...; charset=">`, found by Beautiful Soup's `EncodingDetector`), its label read as the
   Encoding Standard reads labels (webencodings: `latin1` and `ascii` are windows-1252), with the
   standard's two overrides: a UTF-16 declaration is read as UTF-8 (a page that a byte-oriented
   prescan could read is not UTF-16), `x-user-defined` as windows-1252;
3. else UTF-8 where the bytes are UTF-8 (the standard leaves this guess to the browser; browsers
   make it for a file), else windows-1252 (the standard's fallback for most locales).

Bytes that the chosen encoding does not map read as U+FFFD, as a browser shows them.

Work: a page is counted before Beautiful Soup builds it: lxml's parser, the one Beautiful Soup
drives, reports each element (with its attributes), text and comment to a counter that stops at
`MAX_HTML_NODES` (a `BeyondBounds`: the folder skips the page). Beautiful Soup then builds at most
that many nodes.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from embedkit.data.reader_bounds import WorkBudget, library_errors

# Elements, attributes, texts and comments of one page: 100,000 elements each holding a text (200,000
# nodes) read in 12.5 s here on 2 busy cores, so about 19 s at the bound; a long article holds 50,000
MAX_HTML_NODES = 300_000
_PRESCAN_BYTES = 1024  # the HTML standard's prescan looks this far for a declaration

_DROPPED = {"script", "style", "noscript", "template", "nav", "svg", "head", "iframe", "object"}
# elements that start a new line of text (HTML's block-level and table elements)
_BLOCKS = {
    "address", "article", "aside", "blockquote", "dd", "div", "dl", "dt", "figcaption", "figure",
    "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "ol", "p",
    "pre", "section", "table", "tr", "ul", "caption", "details", "summary", "br",
}  # fmt: skip
_CELLS = {"td", "th"}


def html_encoding(raw: bytes) -> str:
    """The encoding (a WHATWG name) that steps 2 and 3 of the module docstring choose for `raw`;
    a byte order mark overrides it when the page is decoded (`decode_html`)."""
    import webencodings
    from bs4.dammit import EncodingDetector

    declared = EncodingDetector.find_declared_encoding(raw[:_PRESCAN_BYTES], is_html=True)
    encoding = webencodings.lookup(declared) if declared else None
    if encoding is not None:
        if encoding.name in ("utf-16le", "utf-16be"):
            return "utf-8"
        return "windows-1252" if encoding.name == "x-user-defined" else encoding.name
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "windows-1252"
    return "utf-8"


def decode_html(raw: bytes) -> str:
    """The text of an HTML page's bytes, decoded as the module docstring says."""
    import webencodings

    text, _ = webencodings.decode(raw, html_encoding(raw), errors="replace")  # a BOM wins, then ours
    return text


def read_html(raw: bytes, path: Path) -> tuple[str | None, str]:
    """The title (`<title>`, else the first `<h1>`) and the visible text of an HTML page."""
    from bs4 import BeautifulSoup

    with library_errors(path, "HTML"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bs4's guesses ("looks like a URL") are not the user's concern
        markup = decode_html(raw)
        _count_nodes(markup, path)
        soup = BeautifulSoup(markup, "lxml")
        # an inline SVG's <title> names a picture, not the page
        tag = next((t for t in soup.find_all("title") if t.find_parent("svg") is None), None)
        title = tag.get_text() if tag is not None else None
        if not (title and title.strip()):
            heading = soup.find("h1")
            title = heading.get_text() if heading is not None else None
        main = soup.find("main") or soup.find(attrs={"role": "main"}) or soup.body or soup
        text = _visible_text(main)
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return title, "\n".join(line for line in lines if line)


class _NodeCounter:
    """An lxml parser target that counts what Beautiful Soup would build, stopping at the bound."""

    def __init__(self, budget: WorkBudget) -> None:
        self.budget = budget

    def start(self, tag: str, attrib: dict) -> None:
        self.budget.spend(1 + len(attrib))

    def end(self, tag: str) -> None:
        pass

    def data(self, data: str) -> None:
        self.budget.spend()

    def comment(self, text: str) -> None:
        self.budget.spend()

    def close(self) -> int:
        return self.budget.spent


def _count_nodes(markup: str, path: Path) -> None:
    """A `BeyondBounds` when `markup` holds over `MAX_HTML_NODES` nodes (lxml stops there)."""
    from lxml import etree

    budget = WorkBudget(path, MAX_HTML_NODES, "HTML nodes (elements, attributes, texts, comments)")
    parser = etree.HTMLParser(target=_NodeCounter(budget))
    parser.feed(markup)
    parser.close()


def _visible_text(root) -> str:
    """The text a browser shows for `root`: white space collapsed as HTML does (kept in <pre>), a
    new line around each block element, a tab after each table cell. A loop over the parsed tree
    (no recursion: a page may nest thousands deep), reading it without changing it."""
    from bs4 import CData, NavigableString, Tag

    parts: list[str] = []
    in_pre = 0
    stack: list = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):  # ("end", tag name): the end of a block, a cell or a <pre>
            in_pre -= node[1] == "pre"
            parts.append("\t" if node[1] in _CELLS else "\n")
        elif isinstance(node, Tag):
            if node.name in _DROPPED:
                continue
            if node.name in _BLOCKS or node.name in _CELLS:
                parts.append("\n" if node.name in _BLOCKS else "")
                stack.append(("end", node.name))
            in_pre += node.name == "pre"
            stack.extend(reversed(node.contents))
        elif type(node) in (NavigableString, CData):  # not a comment or a doctype
            parts.append(str(node) if in_pre else re.sub(r"\s+", " ", node))
    return "".join(parts)
