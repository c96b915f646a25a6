"""An HTML page is decoded as the HTML standard says, as a browser does (docs/guarantees.md,
section 9): a byte order mark first, then the declared charset, a declared UTF-16 read as UTF-8,
then UTF-8 where the bytes are UTF-8, else windows-1252.

References: the expected text is the page's bytes decoded by Python's own codec for the encoding
that the standard's steps choose, written out here as a table of the labels the test declares
(the Encoding Standard maps `latin1`, `iso-8859-1` and `ascii` to windows-1252, `utf-16` to UTF-8
in a declaration); the title is then found in that text by a regular expression, not by the parser.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedkit.data.converters import convert

pytest.importorskip("bs4")
pytest.importorskip("webencodings")

# declared label -> the Python codec of the encoding a browser reads it as (None: not a label)
LABELS = {
    "utf-8": "utf-8",
    "UTF8": "utf-8",
    "utf-16": "utf-8",  # the standard: a declaration of UTF-16 is read as UTF-8
    "utf-16le": "utf-8",
    "UTF-16BE": "utf-8",
    "latin1": "cp1252",
    "iso-8859-1": "cp1252",
    "ascii": "cp1252",
    "windows-1252": "cp1252",
    "windows-1251": "cp1251",
    "koi8-r": "koi8_r",
    "x-user-defined": "cp1252",  # the standard's prescan reads it as windows-1252
    "utf-7": None,  # not an encoding of the standard: the declaration is ignored
    "bogus": None,
}
# the codec the page's bytes are written in -> texts it can write
WRITTEN = {
    "utf-8": "Café naïve – 日本 Ωμέγα",
    "cp1252": "Café naïve – €uro",
    "cp1251": "Привет мир",
    "koi8_r": "Привет мир",
}
BOMS = {"utf-8": codecs.BOM_UTF8, "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE}


def _page(title: str, label: str | None, http_equiv: bool) -> str:
    if label is None:
        meta = ""
    elif http_equiv:
        meta = f'<meta http-equiv="Content-Type" content="text/html; charset={label}">'
    else:
        meta = f'<meta charset="{label}">'
    return f"<!DOCTYPE html><html><head>{meta}<title>{title}</title></head><body><p>flow</p></body></html>"


def _browser_codec(raw: bytes, label: str | None) -> str:
    """The codec the standard's steps choose for `raw` (the test's own statement of them)."""
    for codec, bom in BOMS.items():
        if raw.startswith(bom):
            return codec
    if label is not None and LABELS[label] is not None:
        return LABELS[label]
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def _expected_title(raw: bytes, codec: str) -> str:
    text = raw.decode(codec, errors="replace").removeprefix("\ufeff")
    return " ".join(re.search(r"<title>(.*?)</title>", text, re.S).group(1).split())


@settings(max_examples=300, deadline=None)
@given(
    written=st.sampled_from(sorted(WRITTEN)),
    label=st.one_of(st.none(), st.sampled_from(sorted(LABELS))),
    bom=st.sampled_from([None, *BOMS]),
    http_equiv=st.booleans(),
)
def test_a_page_is_decoded_as_a_browser_decodes_it(written, label, bom, http_equiv):
    title = WRITTEN[written]
    page = _page(title, label, http_equiv)
    # a BOM is only written by its own encoding
    raw = BOMS[bom] + page.encode(bom) if bom is not None else page.encode(written)
    got = convert(raw, Path("page.html")).title
    assert got == _expected_title(raw, _browser_codec(raw, label)), (written, label, bom)


@pytest.mark.parametrize(
    ("raw", "title"),
    [  # the report: a UTF-8 page that declares UTF-16 is UTF-8
        (_page("Café – 日本", "utf-16", False).encode("utf-8"), "Café – 日本"),
        # a byte order mark wins over the declaration
        (codecs.BOM_UTF8 + _page("Привет", "windows-1251", False).encode("utf-8"), "Привет"),
        (codecs.BOM_UTF16_LE + _page("naïve", "utf-8", True).encode("utf-16-le"), "naïve"),
        # no declaration: UTF-8 where it is, else windows-1252
        (_page("Café", None, False).encode("utf-8"), "Café"),
        (_page("Café €", None, False).encode("cp1252"), "Café €"),
        # a declared latin1 is windows-1252, as browsers read it (0x80 is the euro sign)
        (_page("€5", "latin1", False).encode("cp1252"), "€5"),
    ],
)
def test_the_reported_cases(raw, title):
    assert convert(raw, Path("page.html")).title == title
