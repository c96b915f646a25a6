"""Fusion calibrated per index: the choice against a brute-force reference, recorded, read and overridden."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from calibration_fixtures import (
    WordHashEncoder,
    calibration_documents,
    ndcg_at_10,
    trec_order,
    write_jsonl_docs,
)
from runtime_helpers import set_recorded_fusion
from typer.testing import CliRunner

from embedkit import SearchIndex, build_index
from embedkit.cli.app import app
from embedkit.data.corpus import Document
from embedkit.encode.runtime import Runtime
from embedkit.errors import InputError
from embedkit.evaluation.fusion_calibration import CalibrationConfig, calibrate_index, pseudo_task
from embedkit.evaluation.fusion_rule import CANDIDATES, LEXICAL, choose
from embedkit.jobs.index_options import IndexOptions
from embedkit.search.request import Calibration, default_choice, fusion_for, label

pytest.importorskip("faiss")
runner = CliRunner()

CONFIG = CalibrationConfig(queries=12, min_queries=5)


def test_calibration_picks_what_a_brute_force_search_says_is_best(tmp_path: Path, tiny_bert: Path) -> None:
    docs = calibration_documents()
    encoder = WordHashEncoder(tiny_bert)
    out = tmp_path / "idx"
    build_index(
        write_jsonl_docs(tmp_path / "c.jsonl", docs), out, encoder, IndexOptions(kind="flat", calibrate=False)
    )
    assert SearchIndex.load(out).meta.get("fusion") is None
    chosen = calibrate_index(out, encoder, config=CONFIG).calibration

    # the reference: the same pseudo queries searched through `SearchIndex.search_text` over an index
    # of the searched texts (query sources without their query), every candidate, nDCG@10 by hand
    task = pseudo_task([Document(d["_id"], d["text"], d["title"]) for d in docs], CONFIG)
    searched = [{"_id": d.id, "title": d.title, "text": d.text} for d in task.documents]
    reference = tmp_path / "reference"
    build_index(
        write_jsonl_docs(tmp_path / "r.jsonl", searched),
        reference,
        encoder,
        IndexOptions(kind="flat", calibrate=False),
    )
    kinds = sorted({q.kind for q in task.queries})
    scores: dict[str, dict[str, list[float]]] = {}
    with SearchIndex.load(reference) as index:
        for method, alpha in [*CANDIDATES, ("lexical", None)]:
            mode = method if method in ("dense", "lexical") else "hybrid"
            fusion = None if mode != "hybrid" else method
            hits = index.search_text(
                [q.text for q in task.queries], k=10, encoder=encoder, mode=mode, fusion=fusion, alpha=alpha
            )
            gains = [
                ndcg_at_10(trec_order(found), docs[q.source]["_id"])
                for q, found in zip(task.queries, hits, strict=True)
            ]
            name = LEXICAL if method == "lexical" else label(method, alpha)
            scores[name] = {
                kind: [100 * g for g, q in zip(gains, task.queries, strict=True) if q.kind == kind]
                for kind in kinds
            }
    for name, row in scores.items():
        for kind, values in row.items():
            mean = float(np.mean(values))
            assert chosen.table[name][kind] == pytest.approx(mean, abs=0.006), (name, kind)
            low, high = chosen.intervals[name][kind]  # recorded beside it: a range around the mean
            assert low - 0.006 <= mean <= high + 0.006 and (low < high or min(values) == max(values))
    expected = choose(scores, CONFIG.seed)
    assert (chosen.method, chosen.alpha) == (expected.method, expected.alpha)
    _check_recorded(out, chosen)
    with SearchIndex.load(out) as index:
        assert (index.request().fusion, index.request().alpha) == fusion_for(index.meta)


def _check_recorded(out: Path, chosen: Calibration) -> None:
    """Recorded in a new version where the choice changes the search; the default kept: nothing."""
    with SearchIndex.load(out) as index:
        if (chosen.method, chosen.alpha) == default_choice():
            assert index.meta.get("fusion") is None
        else:
            assert Calibration.from_json(index.meta["fusion"]) == chosen


def test_search_uses_the_recorded_choice_and_flags_override(tmp_path: Path, tiny_bert: Path) -> None:
    encoder = WordHashEncoder(tiny_bert)
    out = tmp_path / "idx"
    build_index(
        write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents()),
        out,
        encoder,
        IndexOptions(kind="flat", calibrate=False),
    )
    meta_path = next(out.glob("v-*")) / "embedkit-index.json"
    queries = ["shock wave on a wing", "heat transfer in a laminar boundary layer", "flutter of a panel"]
    recorded = {"method": "zscore", "alpha": 0.6, "reason": "set by the test"}
    set_recorded_fusion(out, recorded)
    with SearchIndex.load(out) as index:
        assert index.request().mode == "hybrid"
        default = index.search_text(queries, k=5, encoder=encoder)
        explicit = index.search_text(queries, k=5, encoder=encoder, mode="hybrid", fusion="zscore", alpha=0.6)
        other = index.search_text(queries, k=5, encoder=encoder, fusion="rrf")
        rrf = index.search_text(queries, k=5, encoder=encoder, mode="hybrid", fusion="rrf", alpha=0.7)
        weight = index.search_text(queries, k=5, encoder=encoder, alpha=0.9)
        zscore_09 = index.search_text(
            queries, k=5, encoder=encoder, mode="hybrid", fusion="zscore", alpha=0.9
        )
    assert _ids(default) == _ids(explicit) and _scores(default) == _scores(explicit)
    assert _scores(other) == _scores(rrf) and _scores(other) != _scores(default)  # --fusion wins
    assert _scores(weight) == _scores(zscore_09)  # --alpha alone keeps the recorded method
    set_recorded_fusion(out, {"method": "dense", "alpha": 0.7, "reason": "set by the test"})
    with SearchIndex.load(out) as index:
        assert index.request().mode == "dense" and index.request(fusion="zscore").mode == "hybrid"
        dense = index.search_text(queries, k=5, encoder=encoder)
        assert _scores(dense) == _scores(index.search_text(queries, k=5, encoder=encoder, mode="dense"))
    assert meta_path.exists()


def test_cold_search_reads_the_choice_and_never_computes_it(
    tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder = WordHashEncoder(tiny_bert)
    out = tmp_path / "idx"
    build_index(
        write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents()),
        out,
        encoder,
        IndexOptions(kind="flat"),
    )
    import embedkit.evaluation.fusion_calibration as calibrate_module

    def refuse(*args, **kwargs):
        raise AssertionError("calibration ran at search time")

    monkeypatch.setattr(calibrate_module, "calibrate", refuse)
    with SearchIndex.load(out) as index:
        assert index.meta["fusion"]["count"] == 40
        assert index.search_text(["shock wave"], k=3, encoder=encoder)


def test_append_recalibrates_once_the_index_grew_by_half(tmp_path: Path, tiny_bert: Path) -> None:
    encoder = WordHashEncoder(tiny_bert)
    docs = calibration_documents(60)
    out = tmp_path / "idx"
    build_index(write_jsonl_docs(tmp_path / "a.jsonl", docs[:30]), out, encoder, IndexOptions(kind="flat"))
    first = SearchIndex.load(out).meta["fusion"]
    build_index(
        write_jsonl_docs(tmp_path / "b.jsonl", docs[30:40]), out, encoder, IndexOptions(append=True)
    )  # 40 < 1.5 x 30
    assert SearchIndex.load(out).meta["fusion"] == first
    build_index(
        write_jsonl_docs(tmp_path / "c.jsonl", docs[40:50]), out, encoder, IndexOptions(append=True)
    )  # 50 >= 45
    assert SearchIndex.load(out).meta["fusion"]["count"] == 50


def test_a_damaged_fusion_record_is_one_clear_error(tmp_path: Path, tiny_bert: Path) -> None:
    encoder = WordHashEncoder(tiny_bert)
    out = tmp_path / "idx"
    build_index(
        write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents(10)),
        out,
        encoder,
        IndexOptions(kind="flat", calibrate=False),
    )
    for bad in ({"method": "borda", "alpha": 0.5}, {"method": "zscore", "alpha": 2}, "zscore"):
        set_recorded_fusion(out, bad)
        with pytest.raises(InputError, match="'fusion' must be a calibration record"):
            SearchIndex.load(out)


def test_too_few_pseudo_queries_keep_the_default_and_say_why(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "idx"
    build_index(
        write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents(6)),
        out,
        WordHashEncoder(tiny_bert),
        IndexOptions(kind="flat"),
    )
    record = Calibration.from_json(SearchIndex.load(out).meta["fusion"])
    assert (record.method, record.alpha) == ("prf", 0.7)
    assert "fewer than 30" in record.reason


def test_calibrate_and_verify_commands_show_the_choice(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "idx"
    build_index(
        write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents(10)),
        out,
        WordHashEncoder(tiny_bert),
        IndexOptions(kind="flat"),
    )
    record = {"method": "zscore", "alpha": 0.5, "reason": "set by the test", "queries": {"ict": 3}}
    set_recorded_fusion(out, record)
    result = runner.invoke(app, ["calibrate", str(out), "--show"])
    assert result.exit_code == 0, result.output
    assert "fusion zscore 0.5" in result.output
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 0, result.output
    assert "fusion zscore 0.5" in result.output


def _ids(results) -> list[list[str]]:
    return [[h.id for h in hits] for hits in results]


def _scores(results) -> list[list[tuple[str, float]]]:
    return [[(h.id, round(h.score, 6)) for h in hits] for hits in results]


# --- the rule, on hand-built per-query scores ----------------------------------------------------------
# 200 queries with one relevant document each: nDCG@10 x 100 per query is 0 (missed) or 100 / log2(rank + 1)
N = 200
BASE = np.random.default_rng(0).choice([0.0, 100.0, 63.09, 50.0, 38.69], size=N, p=[0.5, 0.2, 0.1, 0.1, 0.1])


def _swapped(up: float, down: float, count: int = 10) -> np.ndarray:
    """BASE with `count` queries raised by `up` and `count` others lowered by `down`: noise."""
    values = BASE.copy()
    values[:count] += up
    values[count : 2 * count] -= down
    return values


def _per_query(kind: str = "ict", n: int = N, **candidates: np.ndarray) -> dict:
    """Every candidate scores BASE on `kind` (terms favour BM25) unless given (zscore_05: zscore 0.5)."""
    named = {k.replace("_0", " 0.") if "_0" in k else k: v for k, v in candidates.items()}
    scores = {label(m, a): {kind: list(BASE[:n]), "terms": [90.0] * n} for m, a in CANDIDATES}
    scores[LEXICAL] = {kind: list(BASE[:n]), "terms": [99.0] * n}
    for name, values in named.items():
        scores[name][kind] = list(values[:n])
    return scores


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ({"dense": {"terms": [60.0] * N}, LEXICAL: {"terms": [99.0] * N}}, ("prf", 0.7)),  # terms alone
        (_per_query(prf_07=BASE - 5), ("dense", 0.7)),  # prf clearly below dense even here
        (_per_query(bm25=BASE - 5, zscore_05=BASE + 10), ("prf", 0.7)),  # BM25 clearly behind dense
        (_per_query(prf_07=BASE + 1, zscore_05=BASE + 10), ("zscore", 0.6)),  # a clear win: best + 0.1
        (_per_query(zscore_05=_swapped(60, 40)), ("prf", 0.7)),  # best by +2 on 20 of 200 queries: noise
        (_per_query(minmax_08=BASE + 3), ("minmax", 0.8)),  # capped at 0.8
        (_per_query(rrf=BASE + 3), ("rrf", 0.7)),
        (_per_query(kind="title", zscore_06=BASE + 3), ("zscore", 0.7)),  # title where no ict
        (_per_query(kind="window", zscore_06=BASE + 3), ("zscore", 0.7)),  # window where neither
        # on window queries the fallback is prf 0.5, against which the tests are read
        (_per_query(kind="window", bm25=BASE - 5, zscore_05=BASE + 10), ("prf", 0.5)),
        (_per_query(kind="window", zscore_05=_swapped(60, 40)), ("prf", 0.5)),
        (_per_query(kind="window", prf_05=BASE - 5, prf_07=BASE + 5), ("dense", 0.7)),
        (  # the gain is read against prf 0.5 (below prf 0.7 here)
            _per_query(
                kind="window", prf_05=_swapped(50, 57.2), prf_07=BASE + 5, zscore_05=_swapped(50, 57.2) + 4
            ),
            ("zscore", 0.6),
        ),
        (_per_query(n=29, zscore_06=BASE + 3), ("prf", 0.7)),  # 29 queries: too few to read
        (
            _per_query(
                **{
                    f"{m}_0{int(a * 10)}": BASE + 3
                    for m in ("zscore", "minmax")
                    for a in (0.5, 0.6, 0.7, 0.8)
                }
            ),
            ("zscore", 0.8),
        ),  # all equal: the largest dense weight
    ],
)
def test_the_rule_on_hand_built_per_query_scores(scores: dict, expected: tuple[str, float]) -> None:
    chosen = choose(scores)
    assert (chosen.method, chosen.alpha) == expected, chosen.reason


def test_a_gap_inside_the_noise_decides_nothing() -> None:
    # dense 0.36 points above prf 0.7 over 200 queries, from 20 queries that moved either way; BM25
    # ahead of dense and zscore 0.6 clearly above prf 0.7: fusion, not dense
    prf = _swapped(50, 57.2)
    assert float(np.mean(BASE) - np.mean(prf)) == pytest.approx(0.36)
    scores = _per_query(prf_07=prf, bm25=_swapped(60, 23.6), zscore_06=prf + 4)
    chosen = choose(scores)
    assert (chosen.method, chosen.alpha) == ("zscore", 0.7), chosen.reason
    assert "prf 0.7" in chosen.reason and "[" in chosen.reason  # the differences, with their intervals


def test_where_the_best_fusion_is_not_clearly_above_the_default_the_default_says_why() -> None:
    chosen = choose(_per_query(zscore_05=_swapped(60, 40)))
    assert (chosen.method, chosen.alpha) == ("prf", 0.7)
    assert "no fusion clearly above prf 0.7; the default" in chosen.reason


def test_index_no_calibrate_then_calibrate_then_search(tmp_path: Path, tiny_bert: Path) -> None:
    corpus, out = write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents()), tmp_path / "idx"
    result = runner.invoke(
        app, ["index", str(corpus), "--out", str(out), "-m", str(tiny_bert), "--no-calibrate"]
    )
    assert result.exit_code == 0, result.output
    assert SearchIndex.load(out).meta.get("fusion") is None
    result = runner.invoke(app, ["calibrate", str(out), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    record = Calibration.from_json(SearchIndex.load(out).meta["fusion"])
    assert record.count == 40 and sum(record.queries.values()) >= 30 and "zscore 0.5" in result.output
    assert " ".join(record.describe().split()) in " ".join(result.output.split())
    result = runner.invoke(app, ["search", str(out), "shock wave", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.splitlines()[-1])
    expected = fusion_for({"fusion": record.to_json()})
    assert line["mode"] != "hybrid" or (line["fusion"], line["alpha"]) == expected


def test_the_build_line_shows_the_calibrations_share_of_the_seconds(tmp_path: Path, tiny_bert: Path) -> None:
    corpus, out = write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents()), tmp_path / "idx"
    result = runner.invoke(
        app, ["index", str(corpus), "--out", str(out), "-m", str(tiny_bert), "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    found = re.search(
        r" in ([\d.]+) s, of which fusion calibration ([\d.]+) s: ", result.stdout.splitlines()[0]
    )
    assert found, result.stdout
    record = Calibration.from_json(SearchIndex.load(out).meta["fusion"])
    assert float(found[2]) == pytest.approx(record.seconds, abs=0.051) and 0 < record.seconds <= float(
        found[1]
    )


PASSAGES = "16:4"  # each test document (about 40 of the tiny BERT's tokens) in three passages


def test_an_index_of_passages_is_calibrated_on_documents_ranked_by_their_best_passage(
    tmp_path: Path, tiny_bert: Path
) -> None:
    """The reference: the pseudo queries searched through `SearchIndex.search_text` over an index of
    passages of the searched texts (the query sources without their query, split by the same
    settings), nDCG@10 by hand on the documents it returns; the choice is recorded and searched with."""
    docs = calibration_documents()
    encoder = WordHashEncoder(tiny_bert)
    out = tmp_path / "idx"
    options = IndexOptions(kind="flat", calibrate=False, passages=PASSAGES)
    build_index(write_jsonl_docs(tmp_path / "c.jsonl", docs), out, encoder, options)
    with SearchIndex.load(out) as index:
        assert index.passages and len(index.rows) >= 2 * index.document_count
    chosen = calibrate_index(out, encoder, config=CONFIG).calibration
    assert chosen.documents == len(docs) and sum(chosen.queries.values()) >= CONFIG.min_queries

    task = pseudo_task([Document(d["_id"], d["text"], d["title"]) for d in docs], CONFIG)
    searched = [{"_id": d.id, "title": d.title, "text": d.text} for d in task.documents]
    reference = tmp_path / "reference"
    build_index(write_jsonl_docs(tmp_path / "r.jsonl", searched), reference, encoder, options)
    texts = [q.text for q in task.queries]
    with SearchIndex.load(reference) as index:
        assert index.passages
        for method, alpha in [*CANDIDATES, ("lexical", None)]:
            mode = method if method in ("dense", "lexical") else "hybrid"
            fusion = None if mode != "hybrid" else method
            hits = index.search_text(texts, k=10, encoder=encoder, mode=mode, fusion=fusion, alpha=alpha)
            gains = [
                ndcg_at_10(trec_order(found), docs[q.source]["_id"])
                for q, found in zip(task.queries, hits, strict=True)
            ]
            name = LEXICAL if method == "lexical" else label(method, alpha)
            for kind in {q.kind for q in task.queries}:
                mean = 100 * float(
                    np.mean([g for g, q in zip(gains, task.queries, strict=True) if q.kind == kind])
                )
                assert chosen.table[name][kind] == pytest.approx(mean, abs=0.006), (name, kind)
    _check_recorded(out, chosen)
    with SearchIndex.load(out) as index:
        assert (index.request().fusion, index.request().alpha) == fusion_for(index.meta)
        expected_mode = "dense" if chosen.method == "dense" else "hybrid"
        assert index.request().mode == expected_mode


def test_building_an_index_of_passages_calibrates_it(tmp_path: Path, tiny_bert: Path) -> None:
    """At build time as by `embedkit calibrate`: the same sample, queries and table."""
    encoder = WordHashEncoder(tiny_bert)
    out = tmp_path / "idx"
    corpus = write_jsonl_docs(tmp_path / "c.jsonl", calibration_documents())
    report = build_index(corpus, out, encoder, IndexOptions(kind="flat", passages=PASSAGES))
    assert report.calibrated is not None and report.calibrated.table  # scored, not a fallback
    with SearchIndex.load(out) as index:
        built = Calibration.from_json(index.meta["fusion"])
    again = calibrate_index(out, encoder).calibration
    assert (built.method, built.alpha, built.table, built.queries) == (
        again.method,
        again.alpha,
        again.table,
        again.queries,
    )


def _versions(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("v-"))


def test_calibrate_writes_nothing_where_the_index_keeps_its_fusion(tmp_path: Path, tiny_bert: Path) -> None:
    """Three one-line documents give too few pseudo queries: the default is kept. An index that
    searches with the default already gets no new version; one that recorded another fusion does."""
    docs = [{"_id": f"d{i}", "title": "", "text": f"shock wave number {i}"} for i in range(3)]
    corpus, out = write_jsonl_docs(tmp_path / "c.jsonl", docs), tmp_path / "idx"
    build_index(corpus, out, tiny_bert, IndexOptions(kind="flat", calibrate=False, device="cpu"))
    before = _versions(out)
    result = runner.invoke(app, ["calibrate", str(out), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "unchanged, no new version written" in " ".join(result.output.split())
    assert _versions(out) == before and SearchIndex.load(out).meta.get("fusion") is None
    set_recorded_fusion(out, {"method": "zscore", "alpha": 0.5, "reason": "recorded by hand"})
    outcome = calibrate_index(out, runtime=Runtime(device="cpu"))
    assert outcome.written and (outcome.calibration.method, outcome.calibration.alpha) == default_choice()
    assert len(_versions(out)) == 2 and _versions(out) != before  # the previous version kept beside it
    assert Calibration.from_json(SearchIndex.load(out).meta["fusion"]) == outcome.calibration
