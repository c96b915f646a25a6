"""`embedkit adapt`: pseudo queries, the teacher's candidates, the distillation loss, the command."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from fixture_text import AERO_WORDS
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data.corpus import Document
from embedkit.index.folder import read_index_meta
from embedkit.index.search import Hit
from embedkit.training.adapt.config import AdaptConfig
from embedkit.training.adapt.losses import candidate_cosines, listwise_kl
from embedkit.training.adapt.queries import (
    PseudoQuery,
    make_pseudo_queries,
    mine_candidates,
    salient_terms,
    unique_source_batches,
    words,
)
from embedkit.training.adapt.run import teacher_candidates

# --- the loss ------------------------------------------------------------------------------------


def test_listwise_kl_on_a_hand_computed_case() -> None:
    # teacher scores (tau ln 3, 0) give p_t = (3/4, 1/4); equal student scores give p_s = (1/2, 1/2):
    # KL = 3/4 ln(3/2) + 1/4 ln(1/2)
    tau = 0.05
    teacher = torch.tensor([[tau * math.log(3.0), 0.0]])
    student = torch.tensor([[0.3, 0.3]])
    expected = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert listwise_kl(student, teacher, None, tau, tau).item() == pytest.approx(expected, abs=1e-6)
    assert listwise_kl(teacher, teacher, None, tau, tau).item() == pytest.approx(0.0, abs=1e-7)


def _slow_listwise_kl(student, teacher, mask, ts, tt) -> float:
    """KL(p_t || p_s) per row over its valid candidates, with math.exp, averaged over rows."""
    total = 0.0
    for s_row, t_row, m_row in zip(student, teacher, mask, strict=True):
        s = [v / ts for v, m in zip(s_row, m_row, strict=True) if m]
        t = [v / tt for v, m in zip(t_row, m_row, strict=True) if m]
        zs = sum(math.exp(v) for v in s)
        zt = sum(math.exp(v) for v in t)
        total += sum(
            math.exp(b) / zt * (math.log(math.exp(b) / zt) - math.log(math.exp(a) / zs))
            for a, b in zip(s, t, strict=True)
        )
    return total / len(student)


def test_listwise_kl_matches_a_slow_reference_with_padding_and_gradients() -> None:
    rng = np.random.default_rng(0)
    student = rng.uniform(-1, 1, (3, 5))
    teacher = rng.uniform(0, 1, (3, 5))
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 1, 0, 1]], dtype=bool)
    s = torch.tensor(student, dtype=torch.float32, requires_grad=True)
    loss = listwise_kl(s, torch.tensor(teacher, dtype=torch.float32), torch.tensor(mask), 0.1, 0.2)
    assert loss.item() == pytest.approx(
        _slow_listwise_kl(student.tolist(), teacher.tolist(), mask.tolist(), 0.1, 0.2), rel=1e-5
    )
    loss.backward()
    assert s.grad is not None and torch.all(s.grad[~torch.tensor(mask)] == 0)  # padding takes no part
    with pytest.raises(ValueError, match="at least one candidate"):
        listwise_kl(s, s, torch.zeros(3, 5, dtype=torch.bool))


def test_candidate_cosines_index_the_pool() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    docs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    got = candidate_cosines(q, docs, torch.tensor([[0, 1, 2], [2, 0, 1]]))
    r = 1 / math.sqrt(2)
    assert torch.allclose(got, torch.tensor([[1.0, 0.0, r], [r, 0.0, 1.0]]), atol=1e-6)


# --- pseudo queries and candidates -------------------------------------------------------------


def test_pseudo_queries_leave_the_query_out_of_the_positive() -> None:
    docs = [
        Document(
            "a",
            "Shock waves form near the wing. Heat transfer rises with mach number. Drag grows too.",
            "Wing shock",
        ),
        Document("b", "Boundary layer flow separates early. Pressure drops at the edge. Lift is lost.", ""),
        Document("c", "Shock drag and heat at high mach number in boundary layer flow.", "Hypersonic heat"),
    ]
    queries = make_pseudo_queries(docs, ["ict", "title", "terms"], seed=1)
    kinds = {(q.source, q.kind) for q in queries}
    assert (0, "title") in kinds and (1, "title") not in kinds  # b has no title
    for q in queries:
        if q.kind == "ict":
            assert q.text not in q.positive and q.text in docs[q.source].full_text
        if q.kind == "title":
            assert q.positive == docs[q.source].text
        if q.kind == "terms":
            assert 3 <= len(q.text.split()) <= 6 and set(q.text.split()) <= set(
                words(docs[q.source].full_text)
            )


def test_salient_terms_rank_by_tf_idf_in_text_order() -> None:
    texts = ["alpha beta gamma", "alpha beta delta", "alpha gamma gamma delta", "epsilon"]
    df = {"alpha": 3, "beta": 2, "gamma": 2, "delta": 2, "epsilon": 1}
    # in text 2: gamma has tf 2 (weight 2 idf(2)), delta 1 idf(2), alpha 1 idf(3) < idf(2); epsilon nowhere
    from collections import Counter

    assert salient_terms(texts[2], Counter(df), 4, 2) == ["gamma", "delta"]
    assert salient_terms(texts[3], Counter(df), 4, 3) == []  # a word in one document only is skipped


def test_mine_candidates_from_a_known_ranking() -> None:
    ranking = [(r, 1.0 - r / 100) for r in [7, 3, 5, 9, *range(20, 70)]]  # source 3 is second
    mined = mine_candidates(
        ranking, source=3, copies={5}, source_margin=0.1, candidates=4, negative_ranks=(2, 6)
    )
    assert mined.rows == [3, 7, 9, 20, 21]  # the source first; its copy 5 is neither candidate nor negative
    assert mined.scores[0] == pytest.approx(ranking[0][1] + 0.1)
    assert mined.scores[1:] == [s for r, s in ranking if r in (7, 9, 20, 21)]
    assert mined.hard_negatives == [9, 20, 21]  # ranks 2..6 are 3, 5, 9, 20, 21


class _HandBuiltIndex:
    """An index whose hybrid ranking is known: every query gets the rows in `ranking`, scored down."""

    def __init__(self, ranking: list[int]) -> None:
        self.ranking = ranking

    def search_text(self, texts, k, mode, fusion):
        assert mode == "hybrid"
        return [[Hit("", 1.0 - i / 100, row) for i, row in enumerate(self.ranking[:k])] for _ in texts]


def test_teacher_candidates_drop_copies_of_the_source() -> None:
    texts = {
        0: "shock wave on the wing",
        1: "shock wave on the wing",
        2: "heat transfer",
        3: "drag of a body",
    }
    texts |= {r: f"filler number {r} about lift" for r in range(4, 60)}
    word_sets = {r: set(words(t)) for r, t in texts.items()}
    ranking = [1, 2, 0, *range(4, 60)]  # the source's copy 1 ranks first, the source third
    queries = [PseudoQuery("shock wave", 0, "terms", texts[0])]
    (mined,) = teacher_candidates(_HandBuiltIndex(ranking), queries, word_sets, AdaptConfig(), progress=False)
    assert mined.rows[:3] == [0, 2, 4] and 1 not in mined.rows
    assert mined.scores[0] == pytest.approx(0.99 + AdaptConfig().source_margin)  # above row 2's 0.99
    assert 1 not in mined.hard_negatives and 0 not in mined.hard_negatives
    assert mined.hard_negatives == [r for r in ranking[9:50] if r not in (0, 1)]


def test_batches_never_hold_two_queries_of_one_document() -> None:
    sources = [0, 0, 0, 1, 1, 2, 3, 4, 5, 6]
    batches = list(unique_source_batches(sources, 4, seed=3, epoch=0))
    for batch in batches:
        assert len({sources[i] for i in batch}) == len(batch) >= 2
    used = [i for b in batches for i in b]
    assert len(used) == len(set(used)) and len(used) >= len(sources) - 1


# --- the command -----------------------------------------------------------------------------------


def _corpus(path: Path, n: int = 24) -> Path:
    rng = random.Random(0)
    with path.open("w", encoding="utf-8") as file:
        for i in range(n):
            sentences = [" ".join(rng.choice(AERO_WORDS) for _ in range(7)) + "." for _ in range(3)]
            title = " ".join(rng.sample(AERO_WORDS, 3))
            file.write(json.dumps({"_id": f"d{i}", "title": title, "text": " ".join(sentences)}) + "\n")
    return path


def _vectors(index: Path) -> tuple[list[str], np.ndarray]:
    from embedkit.index.search import SearchIndex

    with SearchIndex.load(index) as opened:
        rows = list(range(len(opened.rows)))
        ids = [d.id for d in opened.rows.documents(rows)]
        return ids, opened.rows.vectors(rows)


@pytest.mark.parametrize("corpus_kept", [True, False], ids=["recorded-corpus", "documents-from-the-store"])
def test_adapt_writes_a_model_and_reindexes_as_a_fresh_index(
    tmp_path: Path, tiny_bert: Path, one_thread, corpus_kept: bool
) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl")
    indexed = tmp_path / "indexed.jsonl"  # the file the index records; gone when not `corpus_kept`
    indexed.write_bytes(corpus.read_bytes())
    runner = CliRunner()
    index = tmp_path / "index"
    assert (
        runner.invoke(app, ["index", str(indexed), "--out", str(index), "--model", str(tiny_bert)]).exit_code
        == 0
    )
    if not corpus_kept:
        indexed.unlink()
    args = ["adapt", str(index), "--out", str(tmp_path / "m"), "--steps", "3", "--batch-size", "4"]
    result = runner.invoke(app, [*args, "--eval-steps", "1", "--lr", "1e-3", "--force", "-q"])
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "m" / "embedkit.json").read_text())
    assert info["method"] == "adapt kl+nce" and (tmp_path / "m" / "modules.json").is_file()
    fresh = tmp_path / "fresh"
    made = runner.invoke(app, ["index", str(corpus), "--out", str(fresh), "--model", str(tmp_path / "m")])
    assert made.exit_code == 0, made.output
    ids, vectors = _vectors(index)
    fresh_ids, fresh_vectors = _vectors(fresh)
    assert ids == fresh_ids
    np.testing.assert_allclose(vectors, fresh_vectors, atol=1e-5)
    meta, fresh_meta = read_index_meta(index), read_index_meta(fresh)
    for key in ("model_fingerprint", "corpus_fingerprint", "count", "kind", "lexical"):
        assert meta[key] == fresh_meta[key]
    assert runner.invoke(app, ["search", str(index), "shock wave", "--mode", "hybrid"]).exit_code == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "margin"], "unknown adapt method"),
        (["--queries", "ict,questions"], "unknown pseudo-query kind"),
        (["--steps", "0"], "--steps"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path: Path, extra: list[str], message: str) -> None:
    index = tmp_path / "index"
    index.mkdir()
    result = CliRunner().invoke(app, ["adapt", str(index), "--out", str(tmp_path / "m"), *extra, "-q"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert not (tmp_path / "m").exists()


def test_an_index_without_its_lexical_side_or_no_index_exits_2(tmp_path: Path, tiny_bert: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl", n=6)
    runner = CliRunner()
    dense = tmp_path / "dense"
    args = ["index", str(corpus), "--out", str(dense), "--model", str(tiny_bert), "--no-lexical"]
    assert runner.invoke(app, args).exit_code == 0
    for target, message in ((dense, "no lexical side"), (tmp_path / "absent", "not found")):
        result = runner.invoke(app, ["adapt", str(target), "--out", str(tmp_path / "m"), "-q"])
        assert result.exit_code == 2, result.output
        assert len(result.output.strip().splitlines()) == 1 and message in result.output
    assert not (tmp_path / "m").exists()


class _FixedVectors:
    """Stands in for the student: each text's vector is looked up in a table."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def inference(self, texts, max_length):
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def test_dev_ndcg_ranks_the_positive_among_the_other_documents() -> None:
    from embedkit.evaluation.metrics import ndcg_at_k
    from embedkit.training.adapt.student import dev_ndcg

    rng = np.random.default_rng(1)
    docs = rng.normal(size=(30, 8)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    table = {f"q{i}": rng.normal(size=8).tolist() for i in range(4)}
    table |= {f"p{i}": rng.normal(size=8).tolist() for i in range(4)}
    queries = [PseudoQuery(f"q{i}", i, "ict", f"p{i}") for i in range(4)]
    copies = [{5}, set(), {6, 7}, set()]
    got = dev_ndcg(_FixedVectors(table), queries, copies, docs, AdaptConfig())
    # the reference: rank the positive against every other document by cosine, with the metrics module
    expected = []
    for i, query in enumerate(queries):
        q = np.array(table[query.text]) / np.linalg.norm(table[query.text])
        p = np.array(table[query.positive]) / np.linalg.norm(table[query.positive])
        scores = {f"d{j}": float(docs[j] @ q) for j in range(30) if j != i and j not in copies[i]}
        scores["target"] = float(p @ q)
        ranking = sorted(scores, key=scores.get, reverse=True)
        expected.append(ndcg_at_k(ranking, {"target": 1}, 10))
    assert got == pytest.approx(float(np.mean(expected)), abs=1e-6)


def test_training_the_passages_too_moves_the_model_differently(
    tmp_path: Path, tiny_bert: Path, one_thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import itertools

    from safetensors.numpy import load_file

    adapt_module = importlib.import_module("embedkit.training.adapt.run")
    dev_module = importlib.import_module("embedkit.training.adapt.dev")
    corpus = _corpus(tmp_path / "corpus.jsonl")
    index = tmp_path / "index"
    made = CliRunner().invoke(app, ["index", str(corpus), "--out", str(index), "--model", str(tiny_bert)])
    assert made.exit_code == 0, made.output
    weights = {}
    for passages in (False, True):
        rising = itertools.count()  # every dev score beats the last: the last step's weights are saved
        monkeypatch.setattr(dev_module, "dev_ndcg", lambda *args, rising=rising: float(next(rising)))
        config = AdaptConfig(steps=2, eval_steps=1, batch_size=4, learning_rate=1e-2, train_passages=passages)
        result = adapt_module.adapt(index, tmp_path / f"m{passages}", config, progress=False)
        assert result.best_step == 2
        weights[passages] = load_file(str(tmp_path / f"m{passages}" / "model.safetensors"))
    moved = [k for k in weights[False] if not np.array_equal(weights[False][k], weights[True][k])]
    assert moved, "the passages' gradient changed nothing"


def test_the_step_runs_under_bf16_autocast_and_saves_fp32_weights(
    tmp_path: Path, tiny_bert: Path, one_thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--precision bf16` as `embedkit train`: the forward passes in bf16, the saved weights in fp32."""
    import importlib

    from safetensors.numpy import load_file

    adapt_module = importlib.import_module("embedkit.training.adapt.run")
    student_module = importlib.import_module("embedkit.training.adapt.student")
    corpus = _corpus(tmp_path / "corpus.jsonl")
    index = tmp_path / "index"
    made = CliRunner().invoke(app, ["index", str(corpus), "--out", str(index), "--model", str(tiny_bert)])
    assert made.exit_code == 0, made.output
    seen: list[torch.dtype | None] = []
    real_autocast = student_module.autocast

    def recording_autocast(device: torch.device, dtype: torch.dtype | None):
        context = real_autocast(device, dtype)
        seen.append(dtype)  # None: autocast off (fp32)
        return context

    monkeypatch.setattr(student_module, "autocast", recording_autocast)
    # a Linear layer's outputs inside the student's forward passes (LayerNorm's stay fp32 under autocast)
    hidden_dtypes: list[torch.dtype] = []
    real_call = student_module.StudentEmbedder.__call__

    def recording_call(self, texts, max_length):
        linear = next(m for m in self.student.model.modules() if isinstance(m, torch.nn.Linear))
        hook = linear.register_forward_hook(lambda module, args, output: hidden_dtypes.append(output.dtype))
        try:
            return real_call(self, texts, max_length)
        finally:
            hook.remove()

    monkeypatch.setattr(student_module.StudentEmbedder, "__call__", recording_call)
    config = AdaptConfig(steps=2, eval_steps=1, batch_size=4, learning_rate=1e-3, precision="bf16")
    adapt_module.adapt(index, tmp_path / "m", config, progress=False)
    assert seen and set(seen) == {torch.bfloat16}
    assert hidden_dtypes and set(hidden_dtypes) == {torch.bfloat16}
    weights = load_file(str(tmp_path / "m" / "model.safetensors"))
    assert {w.dtype for w in weights.values()} == {np.dtype("float32")}
    assert all(np.isfinite(w).all() for w in weights.values())


def test_fp16_without_cuda_exits_2_with_one_line(tmp_path: Path, tiny_bert: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl", n=8)
    index = tmp_path / "index"
    runner = CliRunner()
    made = runner.invoke(app, ["index", str(corpus), "--out", str(index), "--model", str(tiny_bert)])
    assert made.exit_code == 0, made.output
    args = ["adapt", str(index), "--out", str(tmp_path / "m"), "--precision", "fp16", "--device", "cpu", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "fp16" in lines[0]
