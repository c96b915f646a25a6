"""`embedkit experiment` on a tiny random BERT and a tiny corpus (2 training steps per run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixture_text import SENTENCES as SHARED_SENTENCES
from runtime_helpers import is_png
from typer.testing import CliRunner

import embedkit.training.experiment as experiment_module
from embedkit.cli.app import app
from embedkit.errors import InputError
from embedkit.training.config import TrainConfig
from embedkit.training.experiment import ExperimentConfig, run_experiment, train_config_from_options

TOPICS = ("wing flow", "shock wave", "heat transfer", "legal court", "patient disease", "engine load")
FILLERS = ("the air is high", "a boundary layer", "the drag and lift", "the data and method", "a large model")


def _corpus(path: Path) -> Path:
    """18 documents of 3-4 sentences each (JSONL), about 60 distinct sentences."""
    lines = []
    for d in range(18):
        topic = TOPICS[d % len(TOPICS)]
        sentences = [f"Doc {d} is about {topic} number {d}."]
        sentences += [
            f"{FILLERS[(d + s) % len(FILLERS)].capitalize()} in {topic} {d} {s}." for s in range(2 + d % 2)
        ]
        lines.append(json.dumps({"_id": f"d{d}", "text": " ".join(sentences)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _sts(path: Path, sentences: list[str]) -> Path:
    rows = ["sentence1\tsentence2\tscore"]
    rows += [
        f"{a}\t{b}\t{(i * 7) % 6}" for i, (a, b) in enumerate(zip(sentences, sentences[1:], strict=False))
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


SENTENCES = SHARED_SENTENCES[:8]
TRAIN_OPTIONS = ["max_steps=2", "batch_size=4", "max_seq_length=16", "eval_batch_size=16", "queue_size=8"]


def _cli_args(corpus: Path, out: Path, sts: Path, base: Path) -> list[str]:
    args = ["experiment", str(corpus), "--out", str(out), "--sizes", "8,16", "--seeds", "2"]
    args += ["--methods", "simcse,micse", "--eval-sts", str(sts), "--eval-pseudo", "--pseudo-queries", "5"]
    args += ["--split-sentences", "--base", str(base), "--device", "cpu"]
    for option in TRAIN_OPTIONS:
        args += ["--train-option", option]
    return args


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models run ~10x faster on one thread when other jobs share the cores (measured: 22 s -> 2 s)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def finished(one_torch_thread, tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Path]:
    """One experiment run through the CLI: base + 2 sizes x 2 seeds x 2 methods = 9 runs."""
    root = tmp_path_factory.mktemp("experiment")
    corpus = _corpus(root / "corpus.jsonl")
    sts = _sts(root / "sts-tiny.tsv", SENTENCES)
    out = root / "out"
    args = _cli_args(corpus, out, sts, tiny_bert)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return {"out": out, "corpus": corpus, "sts": sts, "args": args, "output": result.output}  # type: ignore[dict-item]


def test_table_has_the_right_rows_columns_and_counts(finished) -> None:
    out = finished["out"]
    table = json.loads((out / "table.json").read_text())
    assert table["methods"] == ["base", "simcse", "micse"]
    assert table["sizes"] == [8, 16]
    assert table["metrics"] == ["sts-tiny spearman", "pseudo ndcg@10", "pseudo mrr@10", "pseudo recall@10"]
    cells = {(c["metric"], c["method"], c["size"]): c for c in table["cells"]}
    assert len(cells) == 4 * (1 + 2 * 2)
    for metric in table["metrics"]:
        assert cells[(metric, "base", None)]["n"] == 1
        for method in ("simcse", "micse"):
            for size in (8, 16):
                cell = cells[(metric, method, size)]
                assert cell["n"] == 2 and cell["seeds"] == [0, 1]
                assert all(-100 <= v <= 100 for v in cell["values"])
    runs = sorted(p.stem for p in (out / "runs").glob("*.json"))
    expected = ["base"] + [f"{m}-n{n}-s{s}" for m in ("micse", "simcse") for n in (16, 8) for s in (0, 1)]
    assert runs == sorted(expected)
    markdown = (out / "table.md").read_text()
    assert "| method | n=8 | n=16 |" in markdown
    assert "sts-tiny spearman" in finished["output"]  # the rich table was printed


def test_models_are_deleted_and_plots_written(finished) -> None:
    out = finished["out"]
    assert not any((out / "tmp").rglob("model.safetensors"))
    pngs = sorted((out / "plots").glob("*.png"))
    assert len(pngs) == 4 * 2  # scores and delta-to-SimCSE, per metric
    assert all(is_png(p) for p in pngs)


def test_run_record_holds_training_summary(finished) -> None:
    record = json.loads((finished["out"] / "runs" / "micse-n16-s1.json").read_text())
    assert record["method"] == "micse" and record["size"] == 16 and record["seed"] == 1
    assert record["train"]["steps"] == 2
    assert record["train"]["sentences"] == 16
    assert set(record["metrics"]) == {
        "sts-tiny spearman",
        "pseudo ndcg@10",
        "pseudo mrr@10",
        "pseudo recall@10",
    }


def test_pseudo_query_sentences_never_reach_training(finished, tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    shutil.copytree(finished["out"], out)
    for name in ("simcse-n16-s0", "micse-n8-s1"):
        (out / "runs" / f"{name}.json").unlink()
    seen: list[list[str]] = []
    real_train = experiment_module.train

    def recording_train(corpus, out_dir, config=None, **kwargs):
        seen.append(list(corpus))
        return real_train(corpus, out_dir, config, **kwargs)

    monkeypatch.setattr(experiment_module, "train", recording_train)
    args = [out if a == str(finished["out"]) else a for a in finished["args"]]
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert sorted(len(s) for s in seen) == [8, 16]  # only the two deleted runs were trained again
    assert "2 runs done, 7 found finished" in result.output
    queries = [q["text"] for q in json.loads((out / "pseudo-queries.json").read_text())["queries"]]
    assert len(queries) == 5
    for sentences in seen:
        assert not set(queries) & set(sentences)


def test_a_killed_experiment_resumes_without_redoing_runs(tmp_path, tiny_bert, monkeypatch) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl")
    sts = _sts(tmp_path / "sts.tsv", SENTENCES)
    config = ExperimentConfig(
        sizes=(8,),
        seeds=(0, 1),
        methods=("simcse", "ami-simcse"),
        eval_sts=(str(sts),),
        train=train_config_from_options(
            [*TRAIN_OPTIONS, f"base_model={tiny_bert}", "device=cpu", "split_sentences=true"]
        ),
    )
    real_train = experiment_module.train
    calls: list[int] = []

    def dying_train(corpus, out_dir, config=None, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed during the third training run
        calls.append(len(corpus))
        return real_train(corpus, out_dir, config, **kwargs)

    monkeypatch.setattr(experiment_module, "train", dying_train)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(corpus, tmp_path / "out", config, progress=False)
    finished = sorted(p.stem for p in (tmp_path / "out" / "runs").glob("*.json"))
    assert finished == ["ami-simcse-n8-s0", "base", "simcse-n8-s0"]  # killed in simcse-n8-s1

    calls.clear()
    monkeypatch.setattr(experiment_module, "train", lambda *a, **k: (calls.append(1), real_train(*a, **k))[1])
    result = run_experiment(corpus, tmp_path / "out", config, progress=False)
    assert len(calls) == 2
    assert sorted(result.trained) == ["ami-simcse-n8-s1", "simcse-n8-s1"]
    assert sorted(result.reused) == ["ami-simcse-n8-s0", "base", "simcse-n8-s0"]
    assert result.table.cell("sts spearman", "ami-simcse", 8).n == 2


def test_changed_settings_in_the_same_folder_are_refused(finished, tmp_path) -> None:
    out = tmp_path / "out"
    shutil.copytree(finished["out"], out)
    args = [str(out) if a == str(finished["out"]) else a for a in finished["args"]]
    args[args.index("max_steps=2")] = "max_steps=3"
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "holds an experiment with other settings (changed: train)" in result.output


def test_an_experiment_from_before_a_setting_existed_resumes(finished, tmp_path) -> None:
    out = tmp_path / "out"
    shutil.copytree(finished["out"], out)
    manifest = json.loads((out / "experiment.json").read_text())
    for field in ("dev_pseudo", "reconstruction_weight"):  # as if written before they existed
        del manifest["settings"]["train"][field]
    manifest["key"] = "0123456789abcdef"
    (out / "experiment.json").write_text(json.dumps(manifest))
    for run in (out / "runs").glob("*.json"):
        record = json.loads(run.read_text())
        run.write_text(json.dumps({**record, "settings": manifest["key"]}))
    args = [str(out) if a == str(finished["out"]) else a for a in finished["args"]]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "0 runs done, 9 found finished" in " ".join(result.output.split())
    changed = CliRunner().invoke(app, [*args, "--train-option", "reconstruction_weight=0.5"])
    assert changed.exit_code == 2
    assert "other settings (changed: train)" in " ".join(changed.output.split())


def test_train_options_are_parsed_by_field_type() -> None:
    config = train_config_from_options(
        ["ami_weight=1e-3", "max_steps=none", "split_sentences=yes", "pooling=cls"]
    )
    assert config.ami_weight == 1e-3 and isinstance(config.ami_weight, float)
    assert config.max_steps is None
    assert config.split_sentences is True
    assert config.pooling == "cls"
    assert TrainConfig().ami_weight != 1e-3
    with pytest.raises(InputError, match=r"unknown training setting 'lambda_x' \(known: .*ami_weight"):
        train_config_from_options(["lambda_x=1"])
    with pytest.raises(InputError, match="seed is set by the experiment for each run: use --seeds"):
        train_config_from_options(["seed=3"])
    with pytest.raises(InputError, match="max_steps='two' is not a valid int"):
        train_config_from_options(["max_steps=two"])
    with pytest.raises(InputError, match="use --eval-pseudo"):
        train_config_from_options(["dev_pseudo=50"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--train-option", "nope=1"], "unknown training setting 'nope'"),
        (["--methods", "simcse,bogus"], "unknown method bogus"),
        (["--sizes", "8,x"], "--sizes must be comma-separated integers"),
        (["--sizes", "5000"], "fewer than the size 5,000"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(finished, tmp_path, extra, message) -> None:
    args = [str(tmp_path / "new") if a == str(finished["out"]) else a for a in finished["args"]]
    result = CliRunner().invoke(app, args + extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_nothing_to_evaluate_is_an_input_error(tmp_path) -> None:
    result = CliRunner().invoke(
        app, ["experiment", str(_corpus(tmp_path / "c.jsonl")), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "nothing to evaluate" in result.output


def test_a_run_killed_while_training_continues_from_its_checkpoint(tmp_path, tiny_bert, monkeypatch) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl")
    config = ExperimentConfig(
        sizes=(8,),
        seeds=(0,),
        methods=("simcse",),
        eval_sts=(str(_sts(tmp_path / "sts.tsv", SENTENCES)),),
        include_base=False,
        train=train_config_from_options(
            [*TRAIN_OPTIONS, "save_steps=1", f"base_model={tiny_bert}", "device=cpu"]
        ),
    )
    real_train = experiment_module.train

    def killed_after_step_1(corpus, out_dir, config=None, **kwargs):
        def on_step(step, terms):
            if step == 1:  # the step-1 checkpoint is written before on_step is called
                raise KeyboardInterrupt

        return real_train(corpus, out_dir, config, **{**kwargs, "on_step": on_step})

    monkeypatch.setattr(experiment_module, "train", killed_after_step_1)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(corpus, tmp_path / "out", config, progress=False)
    model_dir = tmp_path / "out" / "tmp" / "simcse-n8-s0"
    assert (model_dir / "checkpoints").is_dir()

    resumed: list[bool] = []
    steps_run: list[int] = []

    def watching_train(corpus, out_dir, config=None, **kwargs):
        resumed.append(kwargs.get("resume", False) and (Path(out_dir) / "checkpoints").is_dir())
        return real_train(
            corpus, out_dir, config, **{**kwargs, "on_step": lambda step, _: steps_run.append(step)}
        )

    monkeypatch.setattr(experiment_module, "train", watching_train)
    result = run_experiment(corpus, tmp_path / "out", config, progress=False)
    assert resumed == [True]
    assert steps_run == [2]  # step 1 was not redone
    (record,) = result.records
    assert record.train["steps"] == 2
    assert not model_dir.exists()


def test_sts_retrieval_recall_matches_a_brute_force_ranking(tmp_path, tiny_bert) -> None:
    """The base row's R@k equals a by-hand ranking: other rows by cosine, the first with the target's text."""
    import numpy as np

    from embedkit.encode.torch_backend import TorchEncoder
    from embedkit.training.model import resolve_pooling

    first = [f"{topic} case {i} is measured" for i, topic in enumerate(TOPICS)]
    second = [f"the {topic} of sample {i} was recorded" for i, topic in enumerate(TOPICS)]
    scores = [5.0, 5.0, 3.2, 5.0, 1.0, 5.0]
    sts = tmp_path / "sts-gold.tsv"
    pairs = zip(first, second, scores, strict=True)
    rows = ["sentence1\tsentence2\tscore", *(f"{a}\t{b}\t{s}" for a, b, s in pairs)]
    sts.write_text("\n".join(rows) + "\n")
    config = ExperimentConfig(
        sizes=(8,),
        seeds=(0,),
        methods=("simcse",),
        eval_sts_retrieval=(str(sts),),
        train=train_config_from_options([*TRAIN_OPTIONS, f"base_model={tiny_bert}", "device=cpu"]),
    )
    result = run_experiment(_corpus(tmp_path / "corpus.jsonl"), tmp_path / "out", config)
    base = next(r for r in result.records if r.method == "base")

    encoder = TorchEncoder(tiny_bert, device="cpu", pooling=resolve_pooling("auto", tiny_bert))
    corpus = first + second
    vectors = np.asarray(encoder.encode(corpus, normalize=True), dtype=np.float64)
    ranks = []
    for query, score in enumerate(scores):
        if score != 5.0:
            continue
        similarity = vectors @ vectors[query]
        order = [row for row in np.argsort(-similarity, kind="stable") if row != query]
        ranks.append(next(r for r, row in enumerate(order, 1) if corpus[row] == second[query]))
    for k in (1, 5, 10):
        expected = 100.0 * sum(rank <= k for rank in ranks) / len(ranks)
        assert base.metrics[f"sts-gold R@{k}"] == pytest.approx(expected)
    assert {f"sts-gold R@{k}" for k in (1, 5, 10)} <= set(result.records[-1].metrics)
