"""Short, unpunctuated, untitled versions of a BEIR collection: the shape pseudo queries find hardest.

Each document becomes the first `--words` words of its text (40 by default), lower-cased, with every
character that is not a letter, digit or space removed, and without its title (the title field is
emptied, and a text that opens by restating its title loses that opening, as Cranfield's do). The
queries and qrels are copied unchanged, so the judged queries are the original collection's. The
output is a BEIR folder; it is data, never committed.

    python benchmarks/short_collections.py ../shared/data/cranfield /tmp/short/cranfield-short
    python benchmarks/short_collections.py ../shared/data/msmarco-5k /tmp/short/msmarco-5k-short
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

NOT_WORD = re.compile(r"[^\w\s]|_")


def plain(text: str) -> str:
    """Lower-cased, punctuation removed, whitespace collapsed."""
    return " ".join(NOT_WORD.sub(" ", text.casefold()).split())


def shortened(title: str, text: str, words: int) -> str:
    """The first `words` words of `text` without a restated title, lower-cased and unpunctuated."""
    body, head = plain(text), plain(title)
    if head and body.startswith(head + " "):
        body = body[len(head) + 1 :]
    return " ".join(body.split()[:words])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    parser.add_argument("out", type=Path, help="new BEIR folder")
    parser.add_argument("--words", type=int, default=40)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kept = 0
    with (
        (args.source / "corpus.jsonl").open(encoding="utf-8") as src,
        (args.out / "corpus.jsonl").open("w", encoding="utf-8") as dst,
    ):
        for line in src:
            doc = json.loads(line)
            text = shortened(doc.get("title", ""), doc.get("text", ""), args.words)
            if text:  # BEIR readers refuse an empty document; judged ones are never empty here
                dst.write(json.dumps({"_id": doc["_id"], "title": "", "text": text}) + "\n")
                kept += 1
    shutil.copy(args.source / "queries.jsonl", args.out / "queries.jsonl")
    shutil.copytree(args.source / "qrels", args.out / "qrels", dirs_exist_ok=True)
    print(f"{kept:,} documents written to {args.out}")


if __name__ == "__main__":
    main()
