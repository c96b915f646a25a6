"""What a collection's writes are given (`add`, `upsert`, `update`), checked as Chroma's call
shapes: `ids` first, then `embeddings` (refused: the collection embeds with its model), `metadatas`
and `documents`; a single id, text or dict is one document, as in Chroma. Every field is then
checked as a corpus file's are (`check_document`)."""

from __future__ import annotations

from typing import Any

from embedkit.arguments import id_list, metadata_list, refuse_unknown, text_list
from embedkit.data.document import Document
from embedkit.errors import InputError

WRITE_ARGUMENTS = "ids, metadatas, documents, titles"


def same_count(keys: list[str], *others: list[Any] | None) -> None:
    """An `InputError` unless documents, metadatas and titles (None: not given) are one per id."""
    names = ("documents", "metadatas", "titles")
    counts = [(name, len(o)) for name, o in zip(names, others, strict=True) if o is not None]
    if any(count != len(keys) for _, count in counts):
        said = ", ".join(f"{count} {name}" for name, count in counts)
        raise InputError(f"{len(keys)} ids, {said}: give one of each per document")


def new_documents(
    method: str, ids: Any, embeddings: Any, metadatas: Any, documents: Any, more: dict[str, Any]
) -> list[Document]:
    """The documents to write, every argument checked (`embedkit.arguments`) and every field as a
    corpus file's are (`check_document`); `more`: embedkit's `titles`, and nothing else."""
    titles = more.get("titles")
    refuse_unknown(method, {k: v for k, v in more.items() if k != "titles"}, WRITE_ARGUMENTS)
    no_embeddings(method, embeddings)
    keys = id_list("ids", ids)
    if documents is None:
        raise InputError(f"{method}: give documents, the texts to embed (one per id)")
    texts = text_list("documents", documents, blank=True)
    metas = metadata_list("metadatas", metadatas, len(keys))
    heads = text_list("titles", titles, blank=True) if titles is not None else [""] * len(keys)
    same_count(keys, texts, metas if metadatas is not None else None, heads if titles is not None else None)
    return checked_documents(
        [Document(k, t, h, m or {}) for k, t, m, h in zip(keys, texts, metas, heads, strict=True)]
    )


def checked_documents(documents: list[Document]) -> list[Document]:
    """`documents`, each non-empty and every field one the stores hold, its metadata as the stores
    hold it (`check_document`: numpy and Decimal numbers, dates; else an `InputError`)."""
    from embedkit.data.values import check_document

    checked = []
    for doc in documents:
        if not (doc.text.strip() or doc.title.strip()):
            raise InputError(f"document {doc.id!r} is empty")
        metadata = check_document(doc.id, doc.title, doc.text, doc.metadata, f"document {doc.id!r}")
        checked.append(Document(doc.id, doc.text, doc.title, metadata))
    return checked


def upserted_documents(
    made: list[Document], metadatas: Any, titles: Any, held: list[Document | None]
) -> list[Document]:
    """Chroma's `upsert`: `made` (`new_documents`), where the collection holds the id already (its
    document in `held`) merged into it as `update` does: text replaced, metadata merged (None or
    no metadatas: kept), title replaced where titles are given."""
    metas = metadata_list("metadatas", metadatas, len(made))
    merged = []
    for doc, meta, old in zip(made, metas, held, strict=True):
        title = None if titles is None else doc.title
        merged.append(doc if old is None else merged_update(old, doc.text, meta, title))
    return checked_documents(merged)


def changed_documents(
    keys: list[str], embeddings: Any, metadatas: Any, documents: Any, titles: Any, held: list[Document | None]
) -> list[Document]:
    """Chroma's `update` of the documents `held` (those of the ids `keys`): the texts and titles
    given replace theirs, the metadata given is merged into theirs; an id not held is an `InputError`."""
    no_embeddings("update", embeddings)
    texts = None if documents is None else text_list("documents", documents, blank=True)
    metas = None if metadatas is None else metadata_list("metadatas", metadatas, len(keys))
    heads = None if titles is None else text_list("titles", titles, blank=True)
    same_count(keys, texts, metas, heads)
    changed = []
    for j, (key, old) in enumerate(zip(keys, held, strict=True)):
        if old is None:
            raise InputError(f"update: the collection holds no document of id {key!r} (add adds it)")
        text, title = (None if texts is None else texts[j]), (None if heads is None else heads[j])
        changed.append(merged_update(old, text, None if metas is None else metas[j], title))
    return checked_documents(changed)


def no_embeddings(method: str, embeddings: Any) -> None:
    """embedkit embeds documents with the collection's model; vectors handed in are refused."""
    if embeddings is None:
        return
    listed = embeddings if isinstance(embeddings, (list, tuple)) else []
    if listed and all(isinstance(e, str) for e in listed):  # the order of before: add(documents, ids)
        raise InputError(f"{method}: the ids come first, as in Chroma: {method}(ids=[...], documents=[...])")
    raise InputError(f"{method}: embeddings are not taken: the collection embeds documents with its model")


def merged_update(
    old: Document, text: str | None, meta: dict[str, Any] | None, title: str | None
) -> Document:
    """`old` with what `update` gives: its text and title replaced, its metadata merged (a field
    set to None is removed, as in Chroma)."""
    fields = dict(old.metadata)
    for key, value in (meta or {}).items():
        if value is None:
            fields.pop(key, None)
        else:
            fields[key] = value
    return Document(old.id, old.text if text is None else text, old.title if title is None else title, fields)
