"""Text as one line of plain text (`embedkit.data.plain_text`): Markdown's marks dropped by
markdown-it-py, white space collapsed; a text without Markdown's characters skips the parse.

References: the plain words written out by hand, and the parse itself for the skipped texts.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from embedkit.data.plain_text import one_line, parsed_line


def test_markdown_marks_are_dropped_and_the_words_kept() -> None:
    text = (
        "# Care guide\n\nWipe the **steam wand** after use.\n"
        "See [the guide](https://x.org/g) and `descale`:\n\n"
        "1. Fill the tank.\n2) Press *start* \\* twice.\n\n> Quoted &amp; kept\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```\ncode  block\n```\n"
    )
    assert one_line(text) == (
        "Care guide Wipe the steam wand after use. See the guide and descale: 1. Fill the tank. "
        "2) Press start * twice. Quoted & kept a b 1 2 code block"
    )


def test_pdf_line_breaks_and_tabs_collapse() -> None:
    assert (
        one_line("A line of a PDF\nwraps  here,\tand\n\nends.  ") == "A line of a PDF wraps here, and ends."
    )
    assert one_line("x < 5 and <b>tag</b>") == "x < 5 and <b>tag</b>"  # raw HTML is text


# Characters that cannot make Markdown alone, and the line-start marks that can (`-`, `+`, `=`,
# "1.") with letters, digits, spaces, tabs and newlines around them
PLAIN = st.text(alphabet=st.sampled_from("ab Z9.,;:?'\"()/-+=)\n\t    "), max_size=80)


@settings(max_examples=300, deadline=None)
@given(PLAIN)
def test_skipping_the_parse_changes_nothing(text: str) -> None:
    assert one_line(text) == parsed_line(text)
