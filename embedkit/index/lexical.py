"""The BM25 lexical side of an index, on tantivy (a Rust search engine library, PyPI `tantivy`).

The lexical side of hybrid search: the same documents as the dense index, keyed by the same `row`
(the FAISS position, a u64 fast field), ranked by tantivy's Okapi BM25 (Robertson & Zaragoza 2009)
with Lucene's IDF, ln(1 + (N - n + 0.5) / (n + 0.5)), k1 = 1.2, b = 0.75: the BM25 of Lucene,
Anserini's BEIR baselines and bm25s (Kamphuis et al. 2020, "Which BM25 Do You Mean?"). Like Lucene,
tantivy stores document lengths in one lossy byte, so long documents' scores may differ from an
exact-length BM25 in the third digit.

Analysis, the same for documents and queries: NFKC (in Python, `prepare`), then tantivy's
`analyzer()`: words are runs of Unicode letters,
digits and combining marks (so Devanagari or Arabic words stay whole); each Han, Hiragana or
Katakana character is a word of its own, as Lucene's StandardTokenizer emits CJK ideographs, so
unsegmented Chinese still matches character by character. Then lowercase, Lucene's English
stopwords, Snowball's English (Porter2) stemmer. The settings are recorded in `embedkit-index.json`.

A query is the analysed terms of its text, one SHOULD clause per occurrence, so a term the query
repeats counts once per occurrence, as in Lucene and bm25s. Query text is never parsed as query
syntax: any text is a valid query, and one with no terms left (empty, punctuation, stopwords only)
returns no hits.

On disk the tantivy index is the folder `lexical/` beside `docs.sqlite` in an index version folder,
so the versioned replace, the writer lock and the checksums of `embedkit.storage.versioned` cover it: an
append copies it into the new version and commits one new segment there.
"""

from __future__ import annotations

import math
import shutil
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from embedkit.errors import InputError
from embedkit.search.fusion import bounded_k

if TYPE_CHECKING:
    import tantivy

ENGINE = "tantivy"
FORMAT_VERSION = 2  # 1: embedkit's own postings in SQLite (read no more: `--reindex-lexical`)
LEXICAL_DIR = "lexical"
# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, the stop set of Anserini's BM25 baselines.
_LUCENE_STOP = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with"
)
LUCENE_ENGLISH_STOPWORDS = frozenset(_LUCENE_STOP.split())
STOPWORD_LISTS: dict[str, frozenset[str]] = {"lucene-english": LUCENE_ENGLISH_STOPWORDS, "none": frozenset()}
STEMMERS = ("english", "none")  # tantivy's Snowball stemmers: English is Porter2
# One CJK character, or a run of letters, digits and combining marks that are not CJK (Rust regex).
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}"
WORD_PATTERN = rf"[{_CJK}]|[[\p{{L}}\p{{N}}\p{{M}}]--[{_CJK}]]+"
_TOKENIZER = "embedkit"  # the name the analyzer is registered under in each opened tantivy index
_WRITER_HEAP = 64 * 1024 * 1024  # tantivy's indexing buffer; flushed into a segment when full
_FILTER_FETCH = 1000  # hits fetched first under a metadata filter (then 4x more while too few pass)


class TextDocument(Protocol):  # read only: a `Document`, or a `Passage` (whose fields are properties)
    @property
    def title(self) -> str: ...

    @property
    def text(self) -> str: ...


@dataclass(frozen=True)
class LexicalSettings:
    """How the lexical side analyses and scores text; recorded in the index, read back at search.

    `stopwords`: "lucene-english" or "none"; `stemmer`: "english" (Snowball Porter2) or "none";
    `k1`, `b`: BM25's parameters, tantivy's (and Lucene's) fixed defaults.
    """

    engine: str = ENGINE
    stopwords: str = "lucene-english"
    stemmer: str = "english"
    k1: float = 1.2
    b: float = 0.75
    idf: str = "lucene"  # recorded: tantivy's only IDF
    tokenizer: str = "unicode-words"  # WORD_PATTERN; recorded
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.engine != ENGINE or self.version != FORMAT_VERSION:
            raise InputError(
                f"lexical index {self.engine!r} format {self.version}; this embedkit reads {ENGINE} "
                f"format {FORMAT_VERSION}"
            )
        if self.stopwords not in STOPWORD_LISTS:
            raise InputError(f"unknown stopword list {self.stopwords!r}: use {', '.join(STOPWORD_LISTS)}")
        if self.stemmer not in STEMMERS:
            raise InputError(f"unknown stemmer {self.stemmer!r}: use {', '.join(STEMMERS)}")
        if (self.k1, self.b, self.idf, self.tokenizer) != (1.2, 0.75, "lucene", "unicode-words"):
            raise InputError(
                f"unsupported lexical settings k1={self.k1}, b={self.b}, idf={self.idf!r}, "
                f"tokenizer={self.tokenizer!r}: tantivy's BM25 is k1=1.2, b=0.75, lucene idf"
            )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> LexicalSettings:
        """Settings from `to_json`'s dict; unknown keys or values are an `InputError`."""
        if not isinstance(data, dict):
            raise InputError(f"lexical settings must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise InputError(f"unknown lexical settings: {', '.join(sorted(unknown))}")
        return cls(**data)


def is_current_format(recorded: Any) -> bool:
    """Whether an index's recorded lexical settings are this engine's (not an earlier embedkit's)."""
    return isinstance(recorded, dict) and recorded.get("engine") == ENGINE


def lexical_settings(recorded: Any) -> LexicalSettings | None:
    """The settings an index records for its lexical side; None for none, or an earlier embedkit's."""
    return LexicalSettings.from_json(recorded) if is_current_format(recorded) else None


def _require_tantivy() -> None:
    """An `InputError` where tantivy cannot be imported; each caller then imports it (typed)."""
    try:
        import tantivy  # noqa: F401
    except ImportError:  # a core dependency; missing only in a broken environment
        raise InputError("the lexical index needs tantivy: pip install 'tantivy>=0.27'") from None


@cache
def analyzer(stopwords: str = "lucene-english", stemmer: str = "english") -> tantivy.TextAnalyzer:
    """The tantivy analyzer of the module docstring (documents and queries alike)."""
    _require_tantivy()
    import tantivy

    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(WORD_PATTERN))
    builder = builder.filter(tantivy.Filter.lowercase())
    if STOPWORD_LISTS[stopwords]:
        builder = builder.filter(tantivy.Filter.custom_stopword(sorted(STOPWORD_LISTS[stopwords])))
    if stemmer != "none":
        builder = builder.filter(tantivy.Filter.stemmer(stemmer))
    return builder.build()


def prepare(text: str) -> str:
    """Text as the analyzer gets it: NFKC (full-width letters, ligatures), and no lone surrogates.

    A JSON corpus or query can hold an unpaired surrogate escape, which is no Unicode scalar and
    cannot cross into Rust; it becomes U+FFFD, a word separator.
    """
    text = unicodedata.normalize("NFKC", text)
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


def analyze(text: str, settings: LexicalSettings | None = None) -> list[str]:
    """The terms of one text, in order, as the index sees them."""
    settings = settings or LexicalSettings()
    return list(analyzer(settings.stopwords, settings.stemmer).analyze(prepare(text)))


def term_spans(text: str, settings: LexicalSettings | None = None) -> list[tuple[str, int, int]]:
    """The terms of one text already `prepare`d, in order, each with the characters it was read
    from (start, end): what a snippet marks."""
    settings = settings or LexicalSettings()
    tokens = analyzer(settings.stopwords, settings.stemmer).pre_tokenize(text).tokens
    return [(token.text, token.char_offset_from, token.char_offset_to) for token in tokens]


@cache
def _schema() -> tantivy.Schema:
    _require_tantivy()
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_unsigned_field("row", stored=False, indexed=False, fast=True)
    builder.add_text_field("body", stored=False, tokenizer_name=_TOKENIZER, index_option="freq")
    return builder.build()


class LexicalIndex:
    """A tantivy index of documents' title + text, keyed by row; in a folder, or in memory (None)."""

    def __init__(self, index: tantivy.Index, folder: Path | None, settings: LexicalSettings) -> None:
        self._index = index
        self.folder = folder
        self.settings = settings
        self._writer: tantivy.IndexWriter | None = None
        self._pending = 0  # documents added since the last commit
        self._searcher: tantivy.Searcher | None = None
        index.register_tokenizer(_TOKENIZER, analyzer(settings.stopwords, settings.stemmer))

    @classmethod
    def create(cls, folder: str | Path | None, settings: LexicalSettings | None = None) -> LexicalIndex:
        """A new, empty index in `folder` (which must not exist), or in memory when `folder` is None."""
        settings = settings or LexicalSettings()
        _require_tantivy()
        import tantivy

        if folder is None:
            return cls(tantivy.Index(_schema()), None, settings)
        folder = Path(folder)
        if folder.exists():
            raise InputError(f"{folder} already exists")
        folder.mkdir()
        return cls(tantivy.Index(_schema(), path=str(folder)), folder, settings)

    @classmethod
    def open(cls, folder: str | Path, settings: LexicalSettings) -> LexicalIndex:
        """Open the index in `folder`; a missing or unreadable one is an `InputError`."""
        folder = Path(folder)
        if not (folder / "meta.json").is_file():
            raise InputError(f"lexical index missing: {folder} (rebuild it with `--reindex-lexical`)")
        _require_tantivy()
        import tantivy

        try:
            return cls(tantivy.Index.open(str(folder)), folder, settings)
        except ValueError as exc:  # tantivy's errors arrive as ValueError
            raise InputError(f"corrupt lexical index {folder}: {exc}") from None
        except BaseException as exc:
            raise _corrupt(exc, folder) from None

    @staticmethod
    def copy_folder(source: Path, target: Path) -> None:
        """Copy the index in `source` to `target` (an append's staging version), writer locks left out.

        tantivy never rewrites a segment file, so the copy gets the new segment and the source stays
        as it was for the readers of the live version.
        """
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(".tantivy-*.lock"))

    def close(self) -> None:
        """Drop the searcher and an uncommitted writer (its documents are discarded, its lock freed)."""
        self._writer = None
        self._pending = 0
        self._searcher = None

    # --- writing ---------------------------------------------------------------------------------

    def next_row(self) -> int:
        """Documents indexed, which is one past the last row: rows are 0..n-1, as in `documents`."""
        return int(self._search().num_docs) + self._pending

    def add(self, first_row: int, documents: Sequence[TextDocument]) -> None:
        """Index `documents` (title + " " + text) at rows first_row, first_row + 1, ...

        Rows must continue the index, as FAISS positions do; anything else is an `InputError`.
        Nothing is committed: the caller commits with the documents (`commit`).
        """
        expected = self.next_row()
        if first_row != expected:
            raise InputError(f"the lexical index holds rows 0..{expected - 1}; cannot add at row {first_row}")
        self.add_rows(range(first_row, first_row + len(documents)), documents)

    def add_rows(self, rows: Sequence[int], documents: Sequence[TextDocument]) -> None:
        """Index `documents` at the given rows (the document store's, which own them). Not committed."""
        _require_tantivy()
        import tantivy

        writer = self._writing()
        for row, doc in zip(rows, documents, strict=True):
            record = tantivy.Document()
            record.add_unsigned("row", int(row))  # add_unsigned: a plain int would be i64
            record.add_text("body", prepare(f"{doc.title or ''} {doc.text}"))
            writer.add_document(record)
        self._pending += len(documents)

    def remove(self, rows: Sequence[int]) -> None:
        """Delete the documents at `rows` (at the commit). Like Lucene, tantivy keeps counting them in
        BM25's statistics (N, document frequencies, average length) until their segment is merged:
        `embedkit compact` rebuilds the lexical side, and the scores are then a fresh index's."""
        _require_tantivy()
        import tantivy

        writer = self._writing()
        for first, last in _runs(rows):  # a fast-field range query per run of consecutive rows
            query = tantivy.Query.range_query(_schema(), "row", tantivy.FieldType.Unsigned, first, last)
            writer.delete_documents_by_query(query)

    def _writing(self) -> tantivy.IndexWriter:  # opened on first use
        if self._writer is None:
            self._writer = self._index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        return self._writer

    def commit(self) -> None:
        """Write the added documents as a segment and wait for merges; nothing to do without adds."""
        if self._writer is None:
            return
        self._writer.commit()
        self._writer.wait_merging_threads()  # also releases the writer's lock
        self._writer = None
        self._pending = 0
        self._index.reload()
        self._searcher = None

    # --- searching -------------------------------------------------------------------------------

    def _search(self) -> tantivy.Searcher:  # opened once per committed state
        if self._searcher is None:
            self._searcher = self._index.searcher()
        return self._searcher

    def query(self, text: str) -> tantivy.Query | None:
        """The query of `text`: one SHOULD term clause per analysed term occurrence; None if none."""
        _require_tantivy()
        import tantivy

        terms = analyze(text, self.settings)
        if not terms:
            return None
        schema = _schema()
        clauses = [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "body", term)) for term in terms]
        return tantivy.Query.boolean_query(clauses)

    def search(
        self, queries: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> list[list[tuple[int, float]]]:
        """Each query's best `k` rows by BM25, as (row, score) with score > 0, best first.

        Equal scores are ordered by row, ascending. A query without terms, or whose terms no
        document holds, gets an empty list. With `allowed` (sorted rows, a metadata filter), the
        best `k` of those rows, with the scores of the unfiltered search: the hits are fetched in
        growing batches, best first, until `k` allowed ones are found or the hits run out, so the
        answer is exact; a filter that leaves few rows costs up to every hit of the query.
        """
        k = bounded_k(k)
        try:
            searcher = self._search()
            k = bounded_k(k, searcher.num_docs)  # tantivy reserves k places: never more than it holds
            results: list[list[tuple[int, float]]] = []
            for text in queries:
                query = self.query(text)
                if query is None or not searcher.num_docs or (allowed is not None and not len(allowed)):
                    results.append([])
                    continue
                limit = k if allowed is None else max(4 * k, _FILTER_FETCH)
                while True:
                    found = every = self._hits(searcher, query, limit)
                    if allowed is not None and every:
                        kept = np.isin([row for row, _ in every], allowed)
                        found = [hit for hit, keep in zip(every, kept, strict=True) if keep]
                    if allowed is None or len(found) >= k or len(every) < limit:
                        break
                    limit *= 4
                results.append(sorted((h for h in found if h[1] > 0), key=lambda h: (-h[1], h[0]))[:k])
            return results
        except ValueError as exc:
            raise InputError(f"corrupt lexical index {self.folder}: {exc}") from None
        except BaseException as exc:
            raise _corrupt(exc, self.folder) from None

    @staticmethod
    def _hits(searcher: tantivy.Searcher, query: tantivy.Query, limit: int) -> list[tuple[int, float]]:
        hits = searcher.search(query, limit).hits
        # "row" is the unsigned field every document is given: never a float, a bool or missing
        rows = cast("list[int]", searcher.fast_field_values("row", [address for _, address in hits]))
        return [(int(row), float(score)) for (score, _), row in zip(hits, rows, strict=True)]

    def term_idf(self, terms: Sequence[str]) -> dict[str, float]:
        """Each analysed term's IDF over the indexed rows, Lucene's as BM25 scores it here:
        ln(1 + (N - n + 0.5) / (n + 0.5)), N rows, n rows holding the term (deleted ones counted
        until their segment is merged, as in the scores)."""
        searcher = self._search()
        rows = searcher.num_docs
        held = {term: searcher.doc_freq("body", term) for term in terms}
        return {term: math.log(1 + (rows - n + 0.5) / (n + 0.5)) for term, n in held.items()}


def _corrupt(exc: BaseException, folder: Path | None) -> BaseException:
    """A Rust panic inside tantivy (a segment file it cannot read: pyo3's PanicException, a
    BaseException) as the `InputError` of a damaged index; any other exception as it is."""
    if type(exc).__name__ != "PanicException":
        return exc
    reason = " ".join(str(exc).split())[:120]
    return InputError(
        f"corrupt lexical index {folder}: tantivy cannot read it ({reason}): rebuild it with "
        "`embedkit index --out INDEX --reindex-lexical`"
    )


def _runs(rows: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted rows as runs of consecutive rows, (first, last) inclusive."""
    runs: list[tuple[int, int]] = []
    for row in sorted({int(r) for r in rows}):
        if runs and row == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], row)
        else:
            runs.append((row, row))
    return runs
