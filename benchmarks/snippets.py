"""Whether the top hit's snippet shows the answer, on a folder of long office documents, and what
snippets cost.

The five documents of `benchmarks/snippet_documents.py` (about 2,200 words each, written for
this) are written as two PDFs (fpdf2), an HTML page, a DOCX (python-docx) and a Markdown file,
indexed with `embedkit index FOLDER --out INDEX` (extra arguments after `--`, e.g. `--passages
128`), and each of the five questions is asked with `embedkit search INDEX QUESTION --json`, as
a user would. A question counts when its answer sentence is whole in the top hit's snippet (the
snippet's text, its <b> marks taken out). Then the snippets of 10 hits (the five documents twice)
are timed for each question in process (`embedkit.search.snippets.snippets`, the index's own
analyzer and IDF): 20 rounds, p50 and p99.

    python benchmarks/snippets.py [--keep DIR] [-- INDEX-ARGS...]
"""

from __future__ import annotations

import argparse
import html
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snippet_documents import HEAT_PUMP, LAB, MINUTES, QUESTIONS, RUNBOOK, TRAVEL

EMBEDKIT = [sys.executable, "-m", "embedkit.cli.app"]


def write_pdf(path: Path, title: str, sections: list[tuple[str, str]]) -> None:
    import fpdf

    doc = fpdf.FPDF()
    doc.set_title(title)
    doc.add_page()
    for text, style, size, height in [(title, "B", 16, 8)] + [
        part for heading, body in sections for part in ((heading, "B", 12, 7), (body, "", 11, 5.5))
    ]:
        doc.set_font("Helvetica", style, size)
        doc.multi_cell(0, height, text, new_x="LMARGIN", new_y="NEXT")
    doc.output(str(path))


def write_html(path: Path, title: str, sections: list[tuple[str, str]]) -> None:
    body = "".join(f"<h2>{html.escape(h)}</h2>\n<p>{html.escape(t)}</p>\n" for h, t in sections)
    path.write_text(
        f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>"
        f"<nav><a href='/'>Intranet</a></nav><main><h1>{html.escape(title)}</h1>\n{body}</main>"
        "</body></html>",
        encoding="utf-8",
    )


def write_docx(path: Path, title: str, sections: list[tuple[str, str]]) -> None:
    import docx

    doc = docx.Document()
    doc.core_properties.title = title
    doc.add_heading(title, 0)
    for heading, text in sections:
        doc.add_heading(heading, 1)
        doc.add_paragraph(text)
    doc.save(str(path))


def write_markdown(path: Path, title: str, sections: list[tuple[str, str]]) -> None:
    path.write_text("\n".join([f"# {title}\n", *(f"## {h}\n\n{t}\n" for h, t in sections)]), encoding="utf-8")


DOCUMENTS = [
    ("heat-pump-manual.pdf", write_pdf, HEAT_PUMP),
    ("travel-policy.html", write_html, TRAVEL),
    ("board-minutes-q3.docx", write_docx, MINUTES),
    ("billing-runbook.md", write_markdown, RUNBOOK),
    ("lab-safety-handbook.pdf", write_pdf, LAB),
]


def plain(snippet: str) -> str:
    return " ".join(html.unescape(re.sub(r"</?b>", "", snippet)).split())


def answered(index: Path) -> list[dict]:
    """Each question's top hit, its snippet and whether the answer sentence is whole in it."""
    rows = []
    for file, question, answer in QUESTIONS:
        found = subprocess.run([*EMBEDKIT, "search", str(index), question, "--json", "-k", "3"], check=True,
                               capture_output=True, text=True)  # fmt: skip
        top = json.loads(found.stdout)["hits"][0]
        rows.append({"question": question, "want": file, "top": top["id"], "snippet": plain(top["snippet"]),
                     "answered": answer in plain(top["snippet"])})  # fmt: skip
    return rows


def snippet_ms(index: Path, rounds: int = 20) -> dict[str, float]:
    """p50 and p99 of one query's snippets for 10 hits (each document twice), in process: wall
    time, and CPU time (what the work costs on a shared machine, where the wall time waits)."""
    from embedkit.index.local_store import LocalStore
    from embedkit.search.snippets import snippets

    store = LocalStore.open(index)
    try:
        documents = [
            d for d in store.documents_by_id([file for file, _, _ in DOCUMENTS]) if d is not None
        ] * 2
        wall, cpu = [], []
        for _ in range(rounds):
            for _, question, _ in QUESTIONS:
                began, began_cpu = time.perf_counter(), time.process_time()
                snippets(question, [d.text for d in documents], store, [d.title for d in documents])
                wall.append(time.perf_counter() - began)
                cpu.append(time.process_time() - began_cpu)
    finally:
        store.close()
    wall.sort()
    cpu.sort()
    at = {"p50": len(wall) // 2, "p99": int(len(wall) * 0.99)}
    return {f"{kind} {p}": 1000 * s[i] for kind, s in (("wall", wall), ("cpu", cpu)) for p, i in at.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="Write the folder and the index here (kept).")
    parser.add_argument("index_args", nargs="*", help="Further `embedkit index` arguments (after --).")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="embedkit-snippets-"))
    folder, index = root / "docs", root / "index"
    folder.mkdir(parents=True, exist_ok=True)
    for file, write, (title, sections) in DOCUMENTS:
        write(folder / file, title, sections)
    words = [sum(len(text.split()) for _, text in sections) for _, _, (_, sections) in DOCUMENTS]
    print(f"{len(DOCUMENTS)} documents of {min(words):,} to {max(words):,} words in {folder}")
    subprocess.run([*EMBEDKIT, "index", str(folder), "--out", str(index), *args.index_args], check=True)
    rows = answered(index)
    for row in rows:
        print(
            f"{'yes' if row['answered'] else 'no '} {row['top']} (asked of {row['want']}): {row['question']}"
        )
        print(f"    {row['snippet']}")
    print(
        f"{sum(r['answered'] for r in rows)} of {len(rows)}: the top hit's snippet holds the answer sentence"
    )
    timing = snippet_ms(index)
    shown = ", ".join(f"{name} {ms:.1f} ms" for name, ms in timing.items())
    print(f"snippets of 10 hits ({sum(words) // len(words):,} words each): {shown}")


if __name__ == "__main__":
    main()
