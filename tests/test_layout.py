"""The package's shape: one encoder protocol, one evaluator interface, a runtime without training."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import embedkit
from embedkit.encode.caching import CachingEncoder
from embedkit.encode.protocol import Encoder
from embedkit.encode.runtime import Runtime
from embedkit.evaluation import Evaluator, PseudoQueryEvaluator, RetrievalEvaluator, StsEvaluator

ROOT = Path(__file__).resolve().parent.parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_runtime_never_imports_training() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "embedkit").rglob("*.py"))
        for module in _imported_modules(path)
        if module.startswith("embedkit.training") or module == "torch" and path.parent.name != "encode"
    ]
    assert offenders == []


def test_no_arrow_runs_back_up_the_data_flow() -> None:
    """data <- encode <- search <- index <- evaluation <- jobs <- report: a stage imports only the
    stages before it. The search pipeline sits on a seam its stores implement (`embedkit.search.store`),
    so it imports no index; building an index (`jobs`) calibrates its fusion, an evaluation."""
    order = ["data", "encode", "search", "index", "evaluation", "jobs", "report"]
    offenders = []
    for stage in order:
        later = order[order.index(stage) + 1 :]
        for path in sorted((ROOT / "embedkit" / stage).glob("*.py")):
            for module in _imported_modules(path):
                parts = module.split(".")
                if len(parts) > 1 and parts[0] == "embedkit" and parts[1] in later:
                    offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    allowed: set[str] = set()
    assert [o for o in offenders if o not in allowed] == []


def test_runtime_imports_load_no_torch() -> None:
    runtime = (
        "import sys, embedkit, embedkit.data, embedkit.encode, embedkit.index, embedkit.evaluation, "
        "embedkit.report.tables\n"
        "from embedkit.encode.loading import load_encoder\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('embedkit.training')))"
    )
    out = subprocess.run([sys.executable, "-c", runtime], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    cli = "import sys, embedkit.cli.app\nprint('torch' in sys.modules)"  # `embedkit --help` stays fast
    out = subprocess.run([sys.executable, "-c", cli], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_old_import_paths_still_work() -> None:
    from embedkit.encode.onnx_backend import OnnxEncoder
    from embedkit.evaluation import evaluate_sts
    from embedkit.index import SearchIndex

    assert SearchIndex is embedkit.SearchIndex
    assert evaluate_sts is embedkit.evaluate_sts
    assert OnnxEncoder is embedkit.OnnxEncoder


def test_every_encoder_satisfies_the_protocol(tiny_bert: Path, one_thread: None) -> None:
    from embedkit.encode.batching import TokenBatcher
    from embedkit.encode.torch_backend import TorchEncoder
    from embedkit.training.checkpoint_selection import InferenceEncoder
    from embedkit.training.config import TrainConfig
    from embedkit.training.model import ContrastiveModel

    torch_encoder = TorchEncoder(tiny_bert, device="cpu")
    model = ContrastiveModel.from_folder(tiny_bert, TrainConfig(base_model=str(tiny_bert), method="simcse"))
    inference = InferenceEncoder(model, TokenBatcher(tiny_bert, 32), None, tiny_bert)
    for encoder in (torch_encoder, CachingEncoder(torch_encoder), inference):
        assert isinstance(encoder, Encoder), type(encoder).__name__
        single = encoder.encode("a wing in a wind tunnel")
        batch = encoder.encode(["a wing in a wind tunnel", "shock waves"], normalize=True)
        assert single.shape == (encoder.dim,) and batch.shape == (2, encoder.dim)
    # the training view and the saved-model view of the same weights give the same vectors
    texts = ["a wing in a wind tunnel", "shock waves at mach two", "heat transfer"]
    assert inference.encode(texts) == pytest.approx(torch_encoder.encode(texts, normalize=True), abs=1e-5)


def test_every_evaluator_has_the_one_interface(tmp_path: Path) -> None:
    from eval_data import write_beir, write_sts

    from embedkit.data.corpus import Document
    from embedkit.evaluation.pseudo_queries import build_pseudo_queries

    text = "The wing stalls at high angles. The flow separates near the edge. Vortices form behind it."
    docs = [Document(str(i), f"{text} Case number {i} is tested here today.") for i in range(6)]
    evaluators = [
        StsEvaluator(write_sts(tmp_path / "sts.tsv")),
        RetrievalEvaluator(write_beir(tmp_path / "beir")),
        PseudoQueryEvaluator(build_pseudo_queries(docs, 3, seed=0)),
    ]
    for evaluator in evaluators:
        assert isinstance(evaluator, Evaluator)
        assert evaluator.greater_is_better is True
        assert evaluator.name and evaluator.primary_metric and evaluator.describe()


def test_a_model_folder_is_hashed_once_from_path_to_checked_encoder(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import embedkit.encode.model_folder as model_folder
    from embedkit.index.folder import open_model_for
    from embedkit.storage import checksums

    calls: list[int] = []
    original = model_folder.fingerprint_files

    def counting(paths: list[Path]) -> str:  # the weights' hashing only (tokenizer files are small)
        if any(p.name == "model.safetensors" for p in paths):
            calls.append(1)
        return original(paths)

    from embedkit.encode.identity import model_fingerprint

    fingerprint = model_fingerprint(tiny_bert)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # an empty user cache
    monkeypatch.setattr(checksums, "_digests", {})  # and a new process's memory
    monkeypatch.setattr(model_folder, "fingerprint_files", counting)
    meta = {"model": str(tiny_bert), "dim": 32, "model_fingerprint": fingerprint}
    encoder = open_model_for(meta, runtime=Runtime(device="cpu"))
    assert encoder.fingerprint == fingerprint
    assert len(calls) == 1


def test_a_later_process_reads_the_weights_fingerprint_from_the_cache_until_they_change(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A cold `embedkit search` checks the index's model without hashing its weights again."""
    import os
    import shutil

    import embedkit.encode.model_folder as model_folder
    from embedkit.storage import checksums

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    weights = model / "model.safetensors"
    # the reference: the hash of the files themselves, computed here without any cache
    expected = model_folder.fingerprint_files([weights])
    calls: list[int] = []
    original = model_folder.fingerprint_files
    monkeypatch.setattr(model_folder, "fingerprint_files", lambda paths: calls.append(1) or original(paths))

    monkeypatch.setattr(checksums, "_digests", {})
    assert model_folder.weights_fingerprint(model) == expected and len(calls) == 1
    monkeypatch.setattr(checksums, "_digests", {})  # another process: the disk cache answers
    assert model_folder.weights_fingerprint(model) == expected and len(calls) == 1

    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))  # same size: mtime and ctime tell
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    monkeypatch.setattr(checksums, "_digests", {})
    changed = model_folder.weights_fingerprint(model)
    assert len(calls) == 2 and changed != expected


def test_the_checkout_does_not_shadow_the_package(tmp_path: Path) -> None:
    """Python run from the folder above a checkout named `embedkit` imports the installed package.

    Without the checkout's own `__init__.py` that import finds the checkout first, as a namespace
    package holding none of embedkit's names (`embedkit.load_encoder` an AttributeError).
    """
    (tmp_path / "embedkit").symlink_to(ROOT, target_is_directory=True)
    code = "import embedkit, embedkit.cli.app; print(embedkit.__version__, callable(embedkit.load_encoder))"
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [embedkit.__version__, "True"]
