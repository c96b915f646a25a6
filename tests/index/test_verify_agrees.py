"""`verify` passes exactly the indexes that `search` opens (docs/guarantees.md, section 13).

Each variant damages one version of a real index so that its checksums still hold (they are
recomputed after the damage, as a hand edit followed by a careless "repair" would leave them):
the metadata's count, dimension, kind or fields, `index.faiss` swapped for another index, the
document store losing or gaining rows, a file of the lexical side garbled. The reference is the
load itself: for every variant, `search` refuses (exit 2, one line) exactly when `verify` reports
damage (exit 1, one line); the benign variants pass both. Generated: counts and dimensions are
drawn around the true ones.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import TableEncoder
from typer.testing import CliRunner

from embedkit import build_index
from embedkit.cli.app import app
from embedkit.index.folder import DOCS_FILE, INDEX_FILE, META_FILE, index_files_dir
from embedkit.jobs.index_options import IndexOptions
from embedkit.storage.checksums import write_checksums

pytest.importorskip("faiss")
N = 12


def _build(folder: Path, tiny_bert: Path, kind: str, lexical: bool) -> Path:
    corpus = folder / "c.jsonl"
    texts = [f"wing flow case {i}" for i in range(N)]
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    rng = np.random.default_rng(0)
    encoder = TableEncoder(tiny_bert, {t: rng.standard_normal(32) for t in [*texts, "wing"]})
    options = IndexOptions(kind=kind, lexical=lexical, calibrate=False)
    return build_index(corpus, folder / "idx", encoder, options).path


def _meta_edit(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(version: Path) -> None:
        meta = json.loads((version / META_FILE).read_text())
        replaced = change(meta)
        text = replaced if isinstance(replaced, str) else json.dumps(meta if replaced is None else replaced)
        (version / META_FILE).write_text(text)

    return damage


def _swap_faiss(count: int, dim: int) -> Callable[[Path], None]:
    def damage(version: Path) -> None:
        import faiss

        other = faiss.IndexFlatIP(dim)
        vectors = np.random.default_rng(1).standard_normal((count, dim)).astype(np.float32)
        other.add(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        faiss.write_index(other, str(version / INDEX_FILE))
        meta = json.loads((version / META_FILE).read_text())
        meta["index_bytes"] = (version / INDEX_FILE).stat().st_size  # the size check passes
        (version / META_FILE).write_text(json.dumps(meta))

    return damage


def _store_rows(sql: str) -> Callable[[Path], None]:
    def damage(version: Path) -> None:
        with sqlite3.connect(version / DOCS_FILE) as db:
            db.execute(sql)

    return damage


def _lexical_file(suffix: str) -> Callable[[Path], None]:
    def damage(version: Path) -> None:
        (target,) = [p for p in (version / "lexical").iterdir() if p.name.endswith(suffix)]
        target.write_bytes(b"garbage")  # tantivy answers with an error (meta.json) or a Rust panic

    return damage


def _setting(key: str, value: object) -> Callable[[dict], None]:
    return lambda meta: meta.__setitem__(key, value)


# name -> (damage, whether a load must refuse it)
VARIANTS: dict[str, tuple[Callable[[Path], None], bool]] = {
    **{
        f"count {d:+d}": (_meta_edit(lambda m, d=d: m.__setitem__("count", m["count"] + d)), True)
        for d in (-N, -1, 1, 7, 10**6)
    },
    **{
        f"dim {d:+d}": (_meta_edit(lambda m, d=d: m.__setitem__("dim", m["dim"] + d)), True)
        for d in (-31, -1, 1, 100)
    },
    "count a string": (_meta_edit(_setting("count", "12")), True),
    "dim null": (_meta_edit(_setting("dim", None)), True),
    "kind unknown": (_meta_edit(_setting("kind", "lsh")), True),
    "kind flat for hnsw": (
        _meta_edit(lambda m: m.__setitem__("kind", "hnsw" if m["kind"] == "flat" else "flat")),
        False,
    ),
    "no dim": (_meta_edit(lambda m: m.pop("dim")), True),
    "a list": (_meta_edit(lambda m: [m]), True),
    "not JSON": (_meta_edit(lambda m: "{not json"), True),
    "empty file": (_meta_edit(lambda m: ""), True),
    "version 99": (_meta_edit(_setting("version", 99)), True),
    "model empty": (_meta_edit(_setting("model", "")), True),
    "an unknown field": (_meta_edit(_setting("colour", "red")), False),
    "created changed": (_meta_edit(_setting("created", "2001-01-01T00:00:00Z")), False),
    **{f"faiss of {c} x {d}": (_swap_faiss(c, d), True) for c, d in ((N + 1, 32), (N - 1, 32), (N, 16))},
    "faiss of the same shape": (_swap_faiss(N, 32), False),
    **{
        f"lexical {suffix} garbled": (_lexical_file(suffix), True)
        for suffix in ("meta.json", ".term", ".store")
    },
    "a document row lost": (
        _store_rows("DELETE FROM documents WHERE row = (SELECT MAX(row) FROM documents)"),
        True,
    ),
    "a document row added": (
        _store_rows("INSERT INTO documents (row, id, title, text) VALUES (999, 'x', '', 'wing')"),
        True,
    ),
}


@pytest.fixture(scope="module", params=["flat", "hnsw"])
def kind(request) -> str:
    return request.param


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_verify_fails_exactly_where_search_refuses(tmp_path: Path, tiny_bert: Path, kind: str, variant: str):
    out = _build(tmp_path, tiny_bert, kind, lexical=variant.startswith("lexical"))
    damage, refused = VARIANTS[variant]
    version = index_files_dir(out)
    damage(version)
    write_checksums(version)  # the checksums hold: only the files' agreement can tell
    runner = CliRunner()
    search = runner.invoke(app, ["search", str(out), "wing", "--mode", "dense", "--model", str(tiny_bert)])
    verify = runner.invoke(app, ["verify", str(out)])
    if refused:
        assert search.exit_code == 2, search.output
        assert verify.exit_code == 1, verify.output  # damage, as docs/guarantees.md says
        for result in (search, verify):
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), lines
    else:
        assert search.exit_code == 0, search.output
        assert verify.exit_code == 0, verify.output
