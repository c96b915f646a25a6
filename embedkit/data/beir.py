"""BEIR retrieval folders: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv` (each may be gzipped)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedkit.data.input_files import check_input_file
from embedkit.data.textfiles import find_data_file, json_objects, record_id, string_field, text_lines
from embedkit.data.values import check_document, number_from_text, shown_number
from embedkit.errors import InputError


@dataclass(frozen=True)
class BeirData:
    """A BEIR folder's documents, the judged queries and their graded judgments (one split)."""

    corpus: dict[str, dict[str, str]]  # doc id -> {"title": ..., "text": ...}
    queries: dict[str, str]  # query id -> text, only the queries the qrels judge (as BEIR loads them)
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> grade

    def document_texts(self) -> tuple[list[str], list[str]]:
        """Doc ids and texts to embed: title + " " + text, stripped (as BEIR's SentenceBERT wrapper)."""
        ids = list(self.corpus)
        texts = [f"{self.corpus[i]['title']} {self.corpus[i]['text']}".strip() for i in ids]
        return ids, texts



def read_beir(folder: str | Path, split: str = "test") -> BeirData:
    """Read a BEIR folder: `corpus.jsonl`, `queries.jsonl`, `qrels/<split>.tsv` (each may be .gz).

    As BEIR's `GenericDataLoader`: the qrels' first line is a header (`query-id, corpus-id,
    score`; it is recognised, not assumed), documents carry `_id`, `title`, `text`, and only
    queries that the qrels judge are kept.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"BEIR folder not found: {folder}")
    qrels_path = find_data_file(folder / "qrels", f"{split}.tsv")
    if qrels_path is None:
        splits = sorted({p.name.split(".")[0] for p in (folder / "qrels").glob("*.tsv*")})
        found = f" (splits found: {', '.join(splits)})" if splits else ""
        raise InputError(f"{folder} has no qrels/{split}.tsv: not a BEIR folder, or no such split{found}")
    paths = {name: find_data_file(folder, f"{name}.jsonl") for name in ("corpus", "queries")}
    for name, path in paths.items():
        if path is None:
            raise InputError(f"{folder} has no {name}.jsonl: not a BEIR folder")
    check_input_file(qrels_path, "qrels file")
    for name, path in paths.items():
        check_input_file(path, f"{name} file")  # type: ignore[arg-type]
    qrels = read_qrels(qrels_path)
    corpus = _read_corpus(paths["corpus"])  # type: ignore[arg-type]
    all_queries = _read_queries(paths["queries"])  # type: ignore[arg-type]
    unknown = [q for q in qrels if q not in all_queries]
    if unknown:
        raise InputError(
            f"{qrels_path} judges {len(unknown)} queries that {paths['queries']} lacks (e.g. {unknown[0]!r})"
        )
    _check_judged_documents(qrels, corpus, qrels_path)
    return BeirData(corpus=corpus, queries={q: all_queries[q] for q in qrels}, qrels=qrels)


def _check_judged_documents(qrels: dict[str, dict[str, int]], corpus: dict[str, Any], path: Path) -> None:
    """Judgments of documents the corpus lacks can never be found: all of them is an error, some a warning."""
    judged = {doc for docs in qrels.values() for doc in docs}
    unknown = sorted(judged.difference(corpus))
    if not unknown:
        return
    if len(unknown) == len(judged):
        raise InputError(
            f"{path} judges only documents that the corpus lacks (e.g. {unknown[0]!r}): "
            "every metric would be 0"
        )
    warnings.warn(
        f"{path} judges {len(unknown)} of {len(judged)} documents that the corpus lacks "
        f"(e.g. {unknown[0]!r}); they count as relevant documents never found",
        UserWarning,
        stacklevel=3,
    )


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """`query-id <tab> corpus-id <tab> integer grade`, with or without a header line.

    A (query, document) pair judged twice is an `InputError` naming both lines, as a repeated
    query or document id is: keeping either grade would change the metrics without a word. Qrels
    in which no query has a relevant document (a grade above 0) are one too: every metric would be 0.
    """
    qrels: dict[str, dict[str, int]] = {}
    lines: dict[tuple[str, str], int] = {}  # (query, document) -> the line that judged it first
    first = True
    for number, line in text_lines(path, "qrels file"):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise InputError(f"{path}: line {number} has {len(fields)} tab-separated fields, expected 3")
        query_id, doc_id, grade = (f.strip() for f in fields)
        try:
            value = number_from_text(grade)
        except ValueError:
            if first:  # the header
                first = False
                continue
            raise InputError(
                f"{path}: line {number}: bad relevance grade {grade!r} (expected an integer)"
            ) from None
        first = False
        if not isinstance(value, int):
            shown = shown_number(grade)
            raise InputError(f"{path}: line {number}: bad relevance grade {shown} (expected a 64-bit int)")
        if (query_id, doc_id) in lines:
            raise InputError(
                f"{path}: lines {lines[query_id, doc_id]} and {number} both judge query {query_id!r} "
                f"and document {doc_id!r}: keep one"
            )
        lines[query_id, doc_id] = number
        qrels.setdefault(query_id, {})[doc_id] = value
    if not qrels:
        raise InputError(f"{path} holds no judgments")
    if not any(grade > 0 for docs in qrels.values() for grade in docs.values()):
        raise InputError(
            f"{path}: no query has a relevant document (every grade is 0 or less): every metric would be 0"
        )
    return qrels


def _read_corpus(path: Path) -> dict[str, dict[str, str]]:
    corpus: dict[str, dict[str, str]] = {}
    for number, obj in json_objects(path):
        doc_id = record_id(obj, path, number, keys=("_id",))
        if doc_id in corpus:
            raise InputError(f"{path}: line {number} repeats document id {doc_id!r}")
        title, text = string_field(obj, "title", path, number), string_field(obj, "text", path, number)
        check_document(doc_id, title, text, {}, f"{path}: line {number}")  # before anything is embedded
        corpus[doc_id] = {"title": title, "text": text}
    if not corpus:
        raise InputError(f"{path} is empty")
    return corpus


def _read_queries(path: Path) -> dict[str, str]:
    # A repeated id would silently keep the last text and change every metric computed on it.
    queries: dict[str, str] = {}
    for number, obj in json_objects(path):
        query_id = record_id(obj, path, number, keys=("_id",))
        if query_id in queries:
            raise InputError(f"{path}: line {number} repeats query id {query_id!r}")
        queries[query_id] = string_field(obj, "text", path, number)
        check_document(query_id, "", queries[query_id], {}, f"{path}: line {number}")
    return queries

