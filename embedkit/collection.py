"""A collection: documents added, replaced, deleted and searched from Python, as in Chroma or LanceDB.

    import embedkit

    notes = embedkit.create_collection("notes-index")   # the folder is made by the first add
    notes.add(documents=["Rotate the keys every 90 days."], metadatas=[{"year": 2024}], ids=["keys"])
    hits = notes.query("how often do keys change", k=5, where="year >= 2020")

A collection is an index folder, the one `embedkit index` makes: `embedkit search`, `serve --index`,
`verify` and `compact` read it, and the CLI's commands write it. Each method is the CLI's own code:
`add` and `upsert` are `build_index` (`embedkit index --append [--upsert]`), `delete` is
`delete_documents` (`embedkit delete`), `query` is `SearchIndex.search_text`, the one search
pipeline (`embedkit.search.pipeline`), and its hits are the records of `embedkit search --json`
(`embedkit.search.hits.hit_record`). So are the guarantees: every write makes a new version live in
one rename (a crash leaves the old one), one writer at a time holds the folder (a lock), and a
query that overlaps a write reads the old or the new version, never a mix.

`where` is the CLI's filter expression over the metadata (`year >= 2020 and lang in ["en", "de"]`,
`embedkit.index.where`), or Chroma's dict (`{"year": {"$gte": 2020}}`, `embedkit.index.where_dict`).
`include` chooses a hit's fields beyond its rank, id and score (`embedkit.search.hits.HIT_FIELDS`);
by default every field but the document's full text, as on every side. Every hit has a snippet:
its text with the query's words highlighted, else its start.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.data.document import Document
    from embedkit.encode.protocol import Encoder
    from embedkit.index.build_report import IndexReport
    from embedkit.index.edits import EditReport
    from embedkit.index.search import SearchIndex

    Model = Encoder | str | Path | None  # an open encoder, a model folder, or None (see `Collection`)
    Texts = Sequence[str]
    Metas = Sequence[dict[str, Any] | None] | None


def create_collection(path: str | Path, model: Model = None, **settings: Any) -> Collection:
    """A new collection in the folder `path` (absent or empty): see `Collection.create`."""
    return Collection.create(path, model, **settings)


def open_collection(path: str | Path, **settings: Any) -> Collection:
    """The collection (an index folder) at `path`: see `Collection.open`."""
    return Collection.open(path, **settings)


class Collection:
    """Documents in an index folder, written and searched as `embedkit`'s commands do (module docstring)."""

    def __init__(
        self,
        path: str | Path,
        model: Model = None,
        *,
        kind: str = "auto",
        passages: str | None = None,
        lexical: bool = True,
        calibrate: bool = True,
        device: str = "auto",
        precision: str | None = None,
    ) -> None:
        """Prefer `create` and `open`. `model`: an open encoder or a model folder (None: the bundled
        model for a new collection, the index's own model for an existing one). `kind`, `passages`,
        `lexical`: a new index's settings, as `embedkit index --kind/--passages/--no-lexical`;
        `calibrate`: choose the hybrid fusion on pseudo queries when the collection is new or has
        grown by half (`embedkit index --no-calibrate` turns it off; minutes on thousands of documents)."""
        self.path = Path(path)
        self._model = model
        self._new = {"kind": kind, "passages": passages, "lexical": lexical}
        self._calibrate = calibrate
        self._device, self._precision = device, precision
        self._encoder: Encoder | None = None
        self._index: SearchIndex | None = None

    @classmethod
    def create(cls, path: str | Path, model: Model = None, **settings: Any) -> Collection:
        """A new collection at `path`, which must be absent or an empty folder (its index is made
        by the first `add`). `settings`: those of `Collection(...)`."""
        from embedkit.index.layout import holds_no_version, is_index_folder

        folder = Path(path)
        if folder.exists() and not folder.is_dir():
            raise InputError(f"{folder} is a file; a collection is a folder")
        if folder.is_dir() and not holds_no_version(folder):
            if is_index_folder(folder):
                raise InputError(f"{folder} already holds an index: open it with embedkit.open_collection")
            raise InputError(f"{folder} is a folder that is neither empty nor an index; choose another")
        return cls(folder, model, **settings)

    @classmethod
    def open(cls, path: str | Path, model: Model = None, **settings: Any) -> Collection:
        """The collection held in the index folder `path` (made by `embedkit index` or `create`);
        `model`, where given, must be the index's model (its ONNX export, say)."""
        from embedkit.index.folder import read_index_meta

        read_index_meta(path)  # not an index: an `InputError` now
        return cls(path, model, **settings)

    # --- writing ---------------------------------------------------------------------------------

    def add(
        self, documents: Texts, ids: Texts, metadatas: Metas = None, titles: Texts | None = None
    ) -> IndexReport:
        """Embed and add documents (`metadatas`, `titles`: one per document, where given); an id
        the collection holds already is an `InputError` (`upsert` replaces documents)."""
        made = _documents(documents, ids, metadatas, titles)
        if self._exists():  # said here in the API's words; `build_index` refuses it in any case
            keys = [d.id for d in made]
            held = [key for key, found in zip(keys, self._opened().get_documents(keys), strict=True) if found]
            if held:
                raise InputError(f"the collection holds a document of id {held[0]!r}: upsert replaces it")
        return self._write(made, upsert=False)

    def upsert(
        self, documents: Texts, ids: Texts, metadatas: Metas = None, titles: Texts | None = None
    ) -> IndexReport:
        """Add documents, each replacing the document of its id where the collection holds one."""
        return self._write(_documents(documents, ids, metadatas, titles), upsert=True)

    def delete(self, ids: Sequence[str]) -> EditReport:
        """Delete the documents `ids`; an id the collection does not hold is an `InputError` and
        nothing is deleted (as `embedkit delete`)."""
        from embedkit.index.edits import delete_documents

        self._release()
        return delete_documents(self.path, _ids(ids))

    def _write(self, documents: list[Document], upsert: bool) -> IndexReport:
        from embedkit.jobs.index_build import IndexOptions, build_index

        exists = self._exists()
        options = IndexOptions(
            append=exists,
            upsert=upsert and exists,
            calibrate=self._calibrate,
            device=self._device,
            precision=self._precision,
            **({} if exists else self._new),
        )
        encoder = self._opened_model(exists=exists)
        self._release()
        return build_index(documents, self.path, encoder, options)

    def _opened_model(self, *, exists: bool) -> Encoder:
        """The model, opened once: for an existing index checked against it (None: its own)."""
        if self._encoder is None:
            if exists:
                from embedkit.index.folder import open_model_for, read_index_meta

                meta = read_index_meta(self.path)
                self._encoder = open_model_for(meta, self._model, self._device, self._precision)
            else:
                from embedkit.jobs.streaming import as_encoder

                self._encoder = as_encoder(self._model, self._device, self._precision)
        return self._encoder

    # --- reading ---------------------------------------------------------------------------------

    def query(
        self,
        texts: str | Sequence[str],
        k: int = 10,
        *,
        where: str | dict[str, Any] | None = None,
        include: Iterable[str] | None = None,
        mode: str | None = None,
        fusion: str | None = None,
        alpha: float | None = None,
    ) -> list[dict[str, Any]] | list[list[dict[str, Any]]]:
        """The best `k` documents for a text (a list of hits) or for each of several texts (a
        list of such lists), best first, each hit a record of `embedkit search --json` holding
        the fields `include` names (of `HIT_FIELDS`) besides rank, id and score (None:
        `DEFAULT_FIELDS`, all but the document's full text).

        `mode`: dense, lexical or hybrid (default: the index's, hybrid where it has a lexical
        side); `fusion` and `alpha` as `embedkit search --fusion/--alpha`; `where` a metadata filter:
        the CLI's expression (`year >= 2020`) or Chroma's dict (`{"year": {"$gte": 2020}}`,
        `embedkit.index.where_dict`).
        """
        from embedkit.search.hits import DEFAULT_FIELDS, checked_fields, hit_record

        fields = checked_fields(DEFAULT_FIELDS if include is None else include)
        many = not isinstance(texts, str)
        queries = list(texts) if many else [texts]
        if not queries or any(not isinstance(q, str) or not q.strip() for q in queries):
            raise InputError("give a query text (or a list of them), none of them empty")
        if isinstance(where, dict):
            from embedkit.index.where_dict import expression_of

            where = expression_of(where)
        index = self._opened()
        settings = {"mode": mode, "fusion": fusion, "alpha": alpha, "where": where}
        request = index.request(k, **settings)
        encoder = self._encoder_for(index) if request.mode != "lexical" else None
        results = index.search_text(
            queries,
            k,
            encoder,
            snippets="snippet" in fields,
            passages=include is not None and "passage" in fields,
            **settings,
        )
        records = [[hit_record(rank, hit, fields) for rank, hit in enumerate(hits, 1)] for hits in results]
        return records if many else records[0]

    def get(self, ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """The documents `ids` (id, title, text, metadata), None for an id the collection does not hold."""
        found = self._opened().get_documents(_ids(ids))
        return [
            None if d is None else {"id": d.id, "title": d.title, "text": d.text, "metadata": d.metadata}
            for d in found
        ]

    def count(self) -> int:
        """The documents held (0 before the first `add`)."""
        return self._opened().document_count if self._exists() else 0

    def __len__(self) -> int:
        return self.count()

    def __repr__(self) -> str:
        return f"Collection({str(self.path)!r})"

    # --- the open index and model ----------------------------------------------------------------

    def _exists(self) -> bool:
        from embedkit.index.layout import holds_no_version, is_index_folder

        return is_index_folder(self.path) and not holds_no_version(self.path)

    def _opened(self) -> SearchIndex:
        """The index's live version, opened again after a write (this one's or another process's)."""
        from embedkit.index.search import SearchIndex

        if not self._exists():
            raise InputError(f"the collection {self.path} holds no documents yet: add some first")
        if self._index is not None and not self._index.is_current():
            self._release()
        if self._index is None:
            self._index = SearchIndex.load(self.path)
        return self._index

    def _encoder_for(self, index: SearchIndex) -> Encoder:
        """The model (`_opened_model`), checked against the index as it is now."""
        encoder = self._opened_model(exists=True)
        index.check_encoder(encoder)
        return encoder

    def _release(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    def close(self) -> None:
        """Close the open index (the model stays loaded until the collection is dropped)."""
        self._release()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ids(ids: Sequence[str]) -> list[str]:
    from embedkit.data.values import check_ids  # the one check of an id, on every path

    return check_ids(ids, "an id")


def _documents(texts: Texts, ids: Texts, metadatas: Metas, titles: Texts | None) -> list[Document]:
    """The documents to write, every field checked as a corpus file's are (`check_document`)."""
    from embedkit.data.document import Document
    from embedkit.data.values import check_document

    if isinstance(texts, str):
        raise InputError("documents is a list of texts, not one string")
    texts, keys = list(texts), _ids(ids)
    metas = list(metadatas) if metadatas is not None else [None] * len(texts)
    heads = list(titles) if titles is not None else [""] * len(texts)
    if not texts:
        raise InputError("no documents given")
    if not len(texts) == len(keys) == len(metas) == len(heads):
        raise InputError(
            f"{len(texts)} documents, {len(keys)} ids"
            + (f", {len(metas)} metadatas" if metadatas is not None else "")
            + (f", {len(heads)} titles" if titles is not None else "")
            + ": give one of each per document"
        )
    made = []
    for text, key, meta, title in zip(texts, keys, metas, heads, strict=True):
        if not isinstance(text, str) or not isinstance(title, str):
            raise InputError(f"document {key!r}: its text and title must be strings")
        if not (text.strip() or title.strip()):
            raise InputError(f"document {key!r} is empty")
        if meta is not None and not isinstance(meta, dict):
            raise InputError(f"document {key!r}: its metadata must be a dict")
        check_document(key, title, text, meta or {}, f"document {key!r}")
        made.append(Document(key, text, title, dict(meta or {})))
    return made
