"""Indexes of passages: windows over the model's tokens, documents ranked by their best passage.

References: hand-computed windows; the tokenizer's own offsets; each passage embedded on its own
with the model (cosine, max per document); and an index of whole documents whose documents are
the passages (BM25, max per document).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tokenizers import Tokenizer

from embedkit.encode.loading import load_encoder
from embedkit.errors import InputError
from embedkit.index import SearchIndex, hit_record, rebuild_lexical
from embedkit.index.passages import PassageSettings, PassageSplitter, token_windows
from embedkit.jobs.index_build import build_index
from embedkit.jobs.index_options import IndexOptions
from embedkit.search.fusion import weighted

WORDS = ["wing", "flow", "air", "pressure", "boundary", "layer", "shock", "wave", "heat", "transfer"]
WORDS += ["mach", "number", "speed", "body", "drag", "lift"]
QUERIES = ["shock wave drag", "heat transfer", "boundary layer flow", "mach number speed body"]
SIZE, OVERLAP = 8, 3


def test_windows_hand_computed():
    assert token_windows(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    assert token_windows(11, 4, 1) == [(0, 4), (3, 7), (6, 10), (9, 11)]
    assert token_windows(9, 4, 2) == [(0, 4), (2, 6), (4, 8), (6, 9)]
    assert token_windows(4, 4, 0) == [(0, 4)]
    assert token_windows(3, 4, 2) == [(0, 3)]
    assert token_windows(0, 4, 2) == [(0, 0)]
    assert token_windows(8, 4, 0) == [(0, 4), (4, 8)]


@pytest.mark.parametrize(
    ("text", "error"),
    [("0", "whole number >= 1"), ("8:8", "below the passage length"), ("8:-1", ">= 0"), ("x", "N:OVERLAP")],
)
def test_bad_settings_are_one_line(text, error):
    with pytest.raises(InputError, match=error):
        PassageSettings.parse(text)


def test_passages_cover_every_token_and_overlap_as_asked(tiny_bert):
    rng = random.Random(3)
    text = "  " + " ".join(rng.choice(WORDS) for _ in range(40)) + ".  "
    tokenizer = Tokenizer.from_file(str(tiny_bert / "tokenizer.json"))
    tokenizer.no_truncation()
    offsets = tokenizer.encode(text, add_special_tokens=False).offsets
    assert len(offsets) > 3 * SIZE
    passages = PassageSplitter(tiny_bert, PassageSettings(SIZE, OVERLAP)).split([_doc("d", text)])
    spans = [(p.start, p.end) for p in passages]
    inside = [[i for i, (s, e) in enumerate(offsets) if start <= s and e <= end] for start, end in spans]
    assert sorted({i for ids in inside for i in ids}) == list(range(len(offsets)))  # every token
    assert all(len(ids) <= SIZE for ids in inside)
    for before, after in zip(inside, inside[1:], strict=False):
        assert len(set(before) & set(after)) == OVERLAP
    assert spans[0][0] == 0 and spans[-1][1] == len(text)  # every character too
    assert all(p.text == text[p.start : p.end] for p in passages)


def test_a_short_document_is_one_passage_of_its_whole_text(tiny_bert):
    doc = _doc("d", "shock wave", title="a title")
    (passage,) = PassageSplitter(tiny_bert, PassageSettings(SIZE)).split([doc])
    assert passage.full_text == doc.full_text


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    folder = tmp_path_factory.mktemp("passages")
    docs = [
        {
            "_id": f"d{i}",
            "title": f"title {i}" if i % 3 else "",
            "text": " ".join(rng.choices(WORDS, k=rng.randint(2, 30))),
        }
        for i in range(40)
    ]
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path, docs


@pytest.fixture(scope="module")
def built(corpus, tiny_bert, tmp_path_factory):
    path, _ = corpus
    out = tmp_path_factory.mktemp("index") / "idx"
    report = build_index(path, out, tiny_bert, IndexOptions(passages=f"{SIZE}:{OVERLAP}", device="cpu"))
    return out, report


def _doc(doc_id, text, title=""):
    from embedkit.data.corpus import Document

    return Document(doc_id, text, title)


def reference_passages(docs, model_dir):
    """(doc id, title + " " + span text) of every passage, split independently of the code tested."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    step = SIZE - OVERLAP
    found = []
    for doc in docs:
        offsets = [o for o in tokenizer.encode(doc["text"], add_special_tokens=False).offsets if o[1] > o[0]]
        n = len(offsets)
        windows = [(s, min(s + SIZE, n)) for s in range(0, max(n - OVERLAP, 1), step)]
        for j, (first, end) in enumerate(windows):
            start = 0 if j == 0 else offsets[first][0]
            stop = len(doc["text"]) if j == len(windows) - 1 else offsets[end - 1][1]
            body = doc["text"][start:stop]
            found.append((doc["_id"], f"{doc['title']} {body}".strip() if doc["title"] else body))
    return found


def max_per_document(ids, scores):
    best: dict[str, float] = {}
    for doc_id, score in zip(ids, scores, strict=True):
        best[doc_id] = max(best.get(doc_id, -np.inf), float(score))
    return best


def test_dense_ranking_is_the_best_passage_by_brute_force(built, corpus, tiny_bert):
    out, report = built
    _, docs = corpus
    passages = reference_passages(docs, tiny_bert)
    assert (report.added, report.count, report.passages) == (40, 40, len(passages))
    encoder = load_encoder(tiny_bert, device="cpu")
    vectors = encoder.encode([text for _, text in passages], normalize=True)
    queries = encoder.encode(QUERIES, normalize=True)
    with SearchIndex.load(out) as index:
        assert (len(index.rows), index.document_count) == (len(passages), 40)
        hits = index.search_text(QUERIES, k=40, encoder=encoder, mode="dense")
        scores, ids = index.search(queries, k=7)
    for q, query in enumerate(queries):
        want = max_per_document([d for d, _ in passages], vectors @ query)
        got = {h.id: h.score for h in hits[q]}
        assert got.keys() == want.keys()  # every document once
        np.testing.assert_allclose([got[d] for d in want], list(want.values()), atol=1e-5)
        order = sorted(want, key=lambda d: -want[d])[:7]
        assert ids[q] == order
        np.testing.assert_allclose(scores[q], [want[d] for d in order], atol=1e-5)


def test_lexical_and_hybrid_rank_by_the_best_passage(built, corpus, tiny_bert, tmp_path):
    out, _ = built
    _, docs = corpus
    passages = reference_passages(docs, tiny_bert)
    # the reference: an index of whole documents, each one passage, searched for all of them
    flat = tmp_path / "flat.jsonl"
    flat.write_text(
        "".join(json.dumps({"_id": f"{d}#{j}", "text": t}) + "\n" for j, (d, t) in enumerate(passages)),
        encoding="utf-8",
    )
    build_index(flat, tmp_path / "ref", tiny_bert, IndexOptions(device="cpu"))
    encoder = load_encoder(tiny_bert, device="cpu")
    with SearchIndex.load(tmp_path / "ref") as ref, SearchIndex.load(out) as index:
        for mode in ("lexical", "dense"):
            want = [
                max_per_document([h.id.split("#")[0] for h in hits], [h.score for h in hits])
                for hits in ref.search_text(QUERIES, k=len(passages), encoder=encoder, mode=mode)
            ]
            got = index.search_text(QUERIES, k=40, encoder=encoder, mode=mode)
            for q in range(len(QUERIES)):
                assert {h.id: pytest.approx(h.score, abs=1e-5) for h in got[q]} == want[q]
            if mode == "lexical":
                lexical_want = want
        dense_want = want
        fused = index.search_text(QUERIES, k=10, encoder=encoder, mode="hybrid", fusion="zscore", alpha=0.6)
    for q in range(len(QUERIES)):
        names = sorted(set(dense_want[q]) | set(lexical_want[q]))
        number = {name: i for i, name in enumerate(names)}
        ranked = [
            sorted(((number[d], s) for d, s in side[q].items()), key=lambda p: -p[1])
            for side in (dense_want, lexical_want)
        ]
        expected = weighted(ranked[0][:100], ranked[1][:100], 10, alpha=0.6)
        assert [(h.id, pytest.approx(h.score, abs=1e-4)) for h in fused[q]] == [
            (names[f.row], f.score) for f in expected
        ]


def test_snippet_and_passage_come_from_the_best_passage(tmp_path, tiny_bert):
    filler = " ".join(["flow air pressure"] * 12)
    corpus = tmp_path / "c.jsonl"
    docs = [{"_id": "long", "text": f"{filler} guitar beach"}, {"_id": "other", "text": "cat dog"}]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    build_index(corpus, tmp_path / "idx", tiny_bert, IndexOptions(passages="6:2", device="cpu"))
    with SearchIndex.load(tmp_path / "idx") as index:
        (hits,) = index.search_text("guitar beach", k=1, mode="lexical", snippets=True, passages=True)
    (hit,) = hits
    assert hit.id == "long" and hit.passage is not None
    assert hit.passage.text.endswith("guitar beach") and len(hit.passage.text) < 60
    assert "<b>guitar</b>" in hit.snippet and "<b>beach</b>" in hit.snippet
    record = hit_record(1, hit, ["text", "passage"])
    assert record["passage"] == {"text": hit.passage.text, "start": hit.passage.start, "end": hit.passage.end}
    assert record["text"][record["passage"]["start"] : record["passage"]["end"]] == hit.passage.text


@pytest.mark.parametrize("mode", ["dense", "hybrid"])
def test_the_snippet_is_a_window_of_the_passage_the_ranking_chose(tmp_path, tiny_bert, mode: str):
    """In dense and hybrid search the hit's passage is the model's best (by meaning), and the
    snippet is a window of that passage's text, "…" where the passage was cut."""
    words = ["flow", "air", "pressure", "guitar", "beach", "wave", "cat", "dog"]
    text = " ".join(words[(i * 3) % 8] for i in range(60)) + "."
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"_id": "long", "text": text}) + "\n", encoding="utf-8")
    build_index(corpus, tmp_path / "idx", tiny_bert, IndexOptions(passages="8:2", device="cpu"))
    with SearchIndex.load(tmp_path / "idx") as index:
        (hits,) = index.search_text("guitar beach", k=1, mode=mode, snippets=True, passages=True)
    (hit,) = hits
    shown = hit.snippet.replace("<b>", "").replace("</b>", "")
    assert shown.strip("…") in " ".join(hit.passage.text.split())
    assert shown.startswith("…") == (hit.passage.start > 0)  # each passage starts lower case
    assert shown.endswith("…") == (hit.passage.end < len(text))


def test_every_row_of_a_document_is_known_to_the_store(built, corpus, tiny_bert):
    out, _ = built
    _, docs = corpus
    passages = reference_passages(docs, tiny_bert)
    with SearchIndex.load(out) as index:
        rows = index.store.docs.rows_by_id([d["_id"] for d in docs] + ["missing"])
        assert "missing" not in rows
        assert {d: len(r) for d, r in rows.items()} == {
            d["_id"]: sum(1 for p, _ in passages if p == d["_id"]) for d in docs
        }
        assert sorted(r for found in rows.values() for r in found) == list(range(len(passages)))
        assert set(index.store.docs.ids_of_rows(rows["d5"]).values()) == {"d5"}
        (number,) = set(index.store.docs.document_numbers(rows["d5"]).values())
        assert [d.id for d in index.store.docs.iter_documents()] == [d["_id"] for d in docs]


def test_append_splits_alike_and_equals_a_rebuilt_index(corpus, tiny_bert, tmp_path):
    path, docs = corpus
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(d) + "\n" for d in docs[:25]), encoding="utf-8")
    second.write_text("".join(json.dumps(d) + "\n" for d in docs[25:]), encoding="utf-8")
    build_index(
        first, tmp_path / "grown", tiny_bert, IndexOptions(passages=f"{SIZE}:{OVERLAP}", device="cpu")
    )
    with pytest.raises(InputError, match="differs from the index's passages 8:3"):
        build_index(
            second, tmp_path / "grown", options=IndexOptions(append=True, passages="16:0", device="cpu")
        )
    build_index(
        second, tmp_path / "grown", options=IndexOptions(append=True, device="cpu")
    )  # the index's own setting
    build_index(path, tmp_path / "whole", tiny_bert, IndexOptions(passages=f"{SIZE}:{OVERLAP}", device="cpu"))
    rebuild_lexical(tmp_path / "whole")  # the lexical side rebuilt from the store: the same passages
    with SearchIndex.load(tmp_path / "grown") as grown, SearchIndex.load(tmp_path / "whole") as whole:
        assert (
            grown.meta["passages"]
            == whole.meta["passages"]
            == {"tokens": 8, "overlap": 3, "unit": "model-tokens"}
        )
        assert (len(grown.rows), grown.document_count) == (len(whole.rows), whole.document_count)
        for mode in ("dense", "lexical", "hybrid"):
            a = grown.search_text(QUERIES, k=10, mode=mode)
            b = whole.search_text(QUERIES, k=10, mode=mode)
            assert [[(h.id, round(h.score, 4)) for h in hits] for hits in a] == [
                [(h.id, round(h.score, 4)) for h in hits] for hits in b
            ]


@pytest.mark.parametrize("setting", ["65", "65:0", "256:64", "99999999999999999999:0", "100000"])
def test_passages_longer_than_the_model_takes_are_refused_in_one_line(tmp_path, tiny_bert, setting):
    """tiny_bert takes 64 tokens: a longer passage would lose its tail to truncation, silently."""
    from typer.testing import CliRunner

    from embedkit.cli.app import app

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "wing flow"}\n', encoding="utf-8")
    args = ["index", str(corpus), "--out", str(tmp_path / "idx"), "-m", str(tiny_bert), "--passages", setting]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "longer than the model takes (64 tokens" in lines[0], lines
    assert not (tmp_path / "idx").exists()
