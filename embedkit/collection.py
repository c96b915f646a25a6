"""A collection: documents added, replaced, deleted and searched from Python with Chroma's calls.

    import embedkit

    notes = embedkit.create_collection("notes-index")   # the folder is made by the first add
    notes.add(ids=["keys"], documents=["Rotate the keys every 90 days."], metadatas=[{"year": 2024}])
    result = notes.query(query_texts=["how often do keys change"], n_results=5, where={"year": 2024})
    result["ids"][0], result["distances"][0]   # Chroma's QueryResult: one list per query

A collection is an index folder, the one `embedkit index` makes: `embedkit search`, `serve --index`,
`verify` and `compact` read it, and the CLI's commands write it. Each method is the CLI's own code:
`add`, `upsert` and `update` are `build_index` (`embedkit index --append [--upsert]`), `sync` is
`build_index` too (`embedkit index --sync`: only what changed is embedded), `delete` is
`delete_documents` (`embedkit delete`), `query` is `SearchIndex.search_text`, the one search
pipeline (`embedkit.search.pipeline`). So are the guarantees: every write makes a new version live
in one rename (a crash leaves the old one), one writer at a time holds the folder (a lock), and a
query that overlaps a write reads the old or the new version, never a mix.

The methods take Chroma's arguments and give Chroma's result shapes (`embedkit.chroma_shapes`; the
reads, `query` and `get`, are `embedkit.collection_reads`); `query(texts, k=...)` gives embedkit's
own hits instead, the records of `embedkit search --json` (`embedkit.search.hits.hit_record`).
`where` is Chroma's dict (`{"year": {"$gte": 2020}}`, `embedkit.index.where_dict`) or the CLI's
filter expression (`year >= 2020 and tags contains "a"`, `embedkit.index.where`). Every argument is
checked on entry (`embedkit.arguments`): a wrong one, or one of Chroma's that a collection does not
do, is an `InputError` naming it.
Every hit has a snippet: the part of its text that best answers the query
(`embedkit.search.snippets`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedkit.arguments import (
    encoder_or_folder,
    flag,
    folder,
    id_list,
    optional_text,
    refuse_unknown,
    text,
    whole_number,
)
from embedkit.chroma_shapes import no_where_document, where_expression
from embedkit.collection_input import WRITE_ARGUMENTS, changed_documents, new_documents, upserted_documents
from embedkit.collection_reads import QUERY_ARGUMENTS, IndexReads, search_settings
from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.data.document import Document
    from embedkit.encode.protocol import Encoder
    from embedkit.index.build_report import IndexReport
    from embedkit.index.edits import EditReport
    from embedkit.index.search import SearchIndex

    Model = Encoder | str | Path | None  # an open encoder, a model folder, or None (see `Collection`)
    Ids = str | Sequence[str]  # a single id is a list of one, as in Chroma
    Docs = str | Sequence[str] | None
    Metas = Sequence[dict[str, Any] | None] | dict[str, Any] | None
    Where = str | dict[str, Any] | None  # the CLI's expression, or Chroma's dict


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
        runtime: Runtime | None = None,
        device: str | None = None,
        precision: str | None = None,
        **unknown: Any,
    ) -> None:
        """Prefer `create` and `open`. `model`: an open encoder or a model folder (None: the bundled
        model for a new collection, the index's own model for an existing one). `kind`, `passages`,
        `lexical`: a new index's settings, as `embedkit index --kind/--passages/--no-lexical`;
        `calibrate`: choose the hybrid fusion on pseudo queries when the collection is new or has
        grown by half (`embedkit index --no-calibrate` turns it off; minutes on thousands of documents).
        `runtime`: where the model runs (`embedkit.Runtime`; `device=`, `precision=`: its older
        spelling)."""
        refuse_unknown("Collection", unknown, SETTINGS)
        self.path = folder("path", path)
        self._model = encoder_or_folder("model", model)
        self._new: dict[str, Any] = {  # IndexOptions' fields for a new index
            "kind": text("kind", kind),
            "passages": optional_text("passages", passages),
            "lexical": flag("lexical", lexical),
        }
        self._calibrate = flag("calibrate", calibrate)
        if runtime is not None and not isinstance(runtime, Runtime):
            raise InputError(f"runtime must be an embedkit.Runtime, not {type(runtime).__name__}")
        device, precision = optional_text("device", device), optional_text("precision", precision)
        self._runtime = runtime_of(runtime, device=device, precision=precision)
        self._encoder: Encoder | None = None
        self._index: SearchIndex | None = None

    @classmethod
    def create(cls, path: str | Path, model: Model = None, **settings: Any) -> Collection:
        """A new collection at `path`, which must be absent or an empty folder (its index is made
        by the first `add`). `settings`: those of `Collection(...)`."""
        from embedkit.index.layout import is_index_folder
        from embedkit.storage.versioned import holds_no_version

        made = cls(path, model, **settings)  # every argument checked before the disk is asked
        target = made.path
        if target.exists() and not target.is_dir():
            raise InputError(f"{target} is a file; a collection is a folder")
        if target.is_dir() and not holds_no_version(target):
            if is_index_folder(target):
                raise InputError(f"{target} already holds an index: open it with embedkit.open_collection")
            raise InputError(f"{target} is a folder that is neither empty nor an index; choose another")
        return made

    @classmethod
    def open(cls, path: str | Path, model: Model = None, **settings: Any) -> Collection:
        """The collection held in the index folder `path` (made by `embedkit index` or `create`);
        `model`, where given, must be the index's model (its ONNX export, say)."""
        from embedkit.index.folder import read_index_meta

        made = cls(path, model, **settings)  # every argument checked before the disk is asked
        read_index_meta(made.path)  # not an index: an `InputError` now
        return made

    # --- writing ---------------------------------------------------------------------------------

    def add(
        self, ids: Ids, embeddings: Any = None, metadatas: Metas = None, documents: Docs = None, **more: Any
    ) -> IndexReport:
        """Embed and add documents, as Chroma's `add(ids, embeddings, metadatas, documents)`
        (`metadatas` and embedkit's `titles=`: one per document, where given); an id the collection
        holds already is an `InputError` (`upsert` replaces documents). `embeddings` are refused:
        the collection embeds the documents with its model."""
        made = new_documents("add", ids, embeddings, metadatas, documents, more)
        if self._exists():  # said here in the API's words; `build_index` refuses it in any case
            keys = [d.id for d in made]
            held = [key for key, found in zip(keys, self._opened().get_documents(keys), strict=True) if found]
            if held:
                raise InputError(f"the collection holds a document of id {held[0]!r}: upsert replaces it")
        return self._write(made, upsert=False)

    def upsert(
        self, ids: Ids, embeddings: Any = None, metadatas: Metas = None, documents: Docs = None, **more: Any
    ) -> IndexReport:
        """Add documents, as Chroma's `upsert`: where the collection holds the id already, its text
        is replaced and the metadata given merged into its own, as `update` does."""
        made = new_documents("upsert", ids, embeddings, metadatas, documents, more)
        if self._exists():
            held = self._opened().get_documents([d.id for d in made])
            made = upserted_documents(made, metadatas, more.get("titles"), held)
        return self._write(made, upsert=True)

    def update(
        self, ids: Ids, embeddings: Any = None, metadatas: Metas = None, documents: Docs = None, **more: Any
    ) -> IndexReport:
        """Change documents the collection holds, as Chroma's `update`: the texts given replace
        theirs, the metadata given is merged into theirs (a field set to None is removed). An id
        the collection does not hold is an `InputError` (Chroma skips it), and nothing is written."""
        titles = more.pop("titles", None)
        refuse_unknown("update", more, WRITE_ARGUMENTS)
        keys = id_list("ids", ids)
        changed = changed_documents(
            keys, embeddings, metadatas, documents, titles, self._opened().get_documents(keys)
        )
        return self._write(changed, upsert=True)

    def delete(
        self, ids: Ids | None = None, where: Where = None, where_document: Any = None, **unknown: Any
    ) -> EditReport | None:
        """Delete the documents `ids`, or those that pass `where`, or those of `ids` that pass it
        (as Chroma); an id the collection does not hold is an `InputError` and nothing is deleted
        (as `embedkit delete`). None where `where` leaves nothing to delete."""
        from embedkit.index.edits import delete_documents

        refuse_unknown("delete", unknown, "ids, where")
        no_where_document(where_document)
        keys = None if ids is None else id_list("ids", ids)
        expression = where_expression(where)
        if expression is not None:
            passing = {d.id for d in self._opened().documents_held(expression)}
            keys = [d for d in (keys or passing) if d in passing]
            if not keys:
                return None
        elif keys is None:
            raise InputError("delete: give ids, or a where filter, of the documents to delete")
        self._release()
        return delete_documents(self.path, keys)

    def sync(self, corpus: str | Path) -> IndexReport:
        """Make the collection hold the documents of `corpus` (a folder, a JSONL or BEIR corpus, ...):
        those unchanged since the last write kept, changed and new ones embedded, the others deleted,
        in one new version (`embedkit index --sync`); its report says `added`, `kept`, `deleted`."""
        return self._write(folder("corpus", corpus), upsert=False, sync=True)

    def _write(self, documents: list[Document] | str | Path, upsert: bool, sync: bool = False) -> IndexReport:
        from embedkit.jobs.index_build import build_index
        from embedkit.jobs.index_options import IndexOptions

        exists = self._exists()
        options = IndexOptions(
            append=exists and not sync,
            upsert=upsert and exists,
            sync=sync,
            calibrate=self._calibrate,
            runtime=self._runtime,
            **({} if exists else self._new),
        )
        encoder = self._opened_model(exists=exists)
        self._release()
        return build_index(documents, self.path, encoder, options)

    def _opened_model(self, *, exists: bool) -> Encoder:
        """The model, opened once: for an existing index checked against it (None: its own); an open
        encoder is taken as it is (checked against the index where it adds or searches)."""
        if self._encoder is None:
            if exists and (self._model is None or isinstance(self._model, (str, Path))):
                from embedkit.index.folder import open_model_for, read_index_meta

                meta = read_index_meta(self.path)
                self._encoder = open_model_for(meta, self._model, self._runtime)
            else:
                from embedkit.jobs.streaming import as_encoder

                self._encoder = as_encoder(self._model, self._runtime)
        return self._encoder

    # --- reading ---------------------------------------------------------------------------------

    def query(
        self,
        texts: str | Sequence[str] | None = None,
        k: int | None = None,
        *,
        query_texts: str | Sequence[str] | None = None,
        query_embeddings: Any = None,
        n_results: int | None = None,
        where: Where = None,
        where_document: Any = None,
        include: Iterable[str] | None = None,
        mode: str | None = None,
        fusion: str | None = None,
        alpha: float | None = None,
        **unknown: Any,
    ) -> Any:
        """Chroma's query, or embedkit's: which one is said by the arguments.

        Chroma's: `query(query_texts=[...] or query_embeddings=[...], n_results=10, where=...,
        include=[...])` gives Chroma's `QueryResult` (`embedkit.chroma_shapes`): `ids`,
        `documents`, `metadatas`, `distances` (and `embeddings` where included), one list per
        query, best first. Vectors as the first argument are Chroma's positional
        `query_embeddings`. It searches as Chroma does, by the dense vectors (distance: 1 -
        cosine), unless `mode` asks for lexical or hybrid; then the order is that search's and
        each distance None.

        embedkit's: `query(texts, k=10, ...)` gives the best `k` hits for a text (a list of hits)
        or for each of several texts (a list of such lists), each hit a record of `embedkit search
        --json` holding the fields `include` names (of `HIT_FIELDS`; None: `DEFAULT_FIELDS`).

        Either way `mode` is dense, lexical or hybrid; `fusion` and `alpha` as `embedkit search
        --fusion/--alpha`; `where` a metadata filter: the CLI's expression (`year >= 2020`) or
        Chroma's dict (`{"year": {"$gte": 2020}}`, `embedkit.index.where_dict`).
        """
        refuse_unknown("query", unknown, QUERY_ARGUMENTS)
        no_where_document(where_document)
        settings = search_settings(mode, fusion, alpha, where)
        return self._reads().query(texts, k, (query_texts, query_embeddings, n_results), include, settings)

    def get(
        self,
        ids: Ids | None = None,
        where: Where = None,
        limit: int | None = None,
        offset: int | None = None,
        where_document: Any = None,
        include: Sequence[str] | None = None,
        **unknown: Any,
    ) -> dict[str, Any]:
        """Chroma's `get`: its `GetResult` (flat lists `ids`, `documents`, `metadatas`) of the
        documents `ids` that the collection holds (in the order asked; an unknown id is left
        out, as in Chroma), or of those that pass `where`, or of all, in the order they were added;
        `offset` of them skipped, at most `limit` given."""
        refuse_unknown("get", unknown, "ids, where, limit, offset, include")
        no_where_document(where_document)
        return self._reads().get(ids, where, limit, offset, include)

    def peek(self, limit: int = 10) -> dict[str, Any]:
        """The first `limit` documents added, as Chroma's `peek`: a `GetResult` with their
        documents, metadatas and embeddings (none in an index of passages, which holds a vector per
        passage)."""
        limit = whole_number("limit", limit, least=0)
        vectors = self._exists() and not self._opened().passages
        return self.get(limit=limit, include=["metadatas", "documents", *(["embeddings"] if vectors else [])])

    def count(self) -> int:
        """The documents held (0 before the first `add`)."""
        return self._opened().document_count if self._exists() else 0

    def __len__(self) -> int:
        return self.count()

    def __repr__(self) -> str:
        return f"Collection({str(self.path)!r})"

    # --- the open index and model ----------------------------------------------------------------

    def _exists(self) -> bool:
        from embedkit.index.layout import is_index_folder
        from embedkit.storage.versioned import holds_no_version

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

    def _reads(self) -> IndexReads:
        """The reads (`embedkit.collection_reads`) of this collection's index and model."""
        return IndexReads(self._opened, self._exists, self._encoder_for)

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


SETTINGS = "model, kind, passages, lexical, calibrate, runtime (or device, precision)"
