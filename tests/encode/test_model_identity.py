"""A model's identity covers everything that changes its vectors (docs/guarantees.md).

Each variant copies a model folder and changes one thing. The independent reference is the
vectors themselves: the torch encoder embeds the same texts with the original and the copy, and
the fingerprints must differ exactly where the vectors do. Then every check that compares models
(append, search, serve's check, index --from-vectors) must refuse the copies that differ and
accept the ones that do not.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from runtime_helpers import write_jsonl

from embedkit import SearchIndex, build_index
from embedkit.encode.identity import FINGERPRINT_PREFIX, check_same_model, model_fingerprint
from embedkit.encode.model_folder import read_model_spec, weights_fingerprint
from embedkit.errors import InputError
from embedkit.index.folder import check_model_for, index_files_dir

torch = pytest.importorskip("torch")
from embedkit.encode.torch_backend import TorchEncoder  # noqa: E402
from embedkit.jobs.index_options import IndexOptions  # noqa: E402

TEXTS = [
    "The Wing flow",
    "boundary layer heat transfer at high mach number " * 6,  # longer than the shortened length
    "a dog runs on the beach",
]
DENSE_OUT = 16


def _write_dense(folder: Path, weight: np.ndarray, activation: str = "Tanh") -> None:
    from safetensors.numpy import save_file

    dense = folder / "2_Dense"
    dense.mkdir(exist_ok=True)
    config = {
        "in_features": int(weight.shape[1]),
        "out_features": int(weight.shape[0]),
        "bias": True,
        "activation_function": f"torch.nn.modules.activation.{activation}",
    }
    (dense / "config.json").write_text(json.dumps(config))
    bias = np.linspace(-0.1, 0.1, weight.shape[0], dtype=np.float32)
    save_file(
        {"linear.weight": weight.astype(np.float32), "linear.bias": bias}, str(dense / "model.safetensors")
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> Path:
    """The tiny BERT with mean pooling, a Dense layer and a final Normalize."""
    folder = tmp_path_factory.mktemp("identity") / "base"
    shutil.copytree(tiny_bert, folder)
    hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    _write_dense(folder, np.random.default_rng(0).standard_normal((DENSE_OUT, hidden)) / np.sqrt(hidden))
    modules = json.loads((folder / "modules.json").read_text())
    normalize = [m for m in modules if m["type"].endswith("Normalize")]
    dense = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    modules = [*modules[:2], dense, *normalize]
    (folder / "modules.json").write_text(json.dumps(modules))
    assert read_model_spec(folder).dim == DENSE_OUT and read_model_spec(folder).normalize
    return folder


def _edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=3))


def _pooling_cls(folder: Path) -> None:
    _edit_json(
        folder / "1_Pooling" / "config.json",
        lambda c: c.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True),
    )


def _no_normalize(folder: Path) -> None:
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(
        json.dumps([m for m in modules if not m["type"].endswith("Normalize")])
    )


def _shorter(folder: Path) -> None:
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8}))


def _dense_weights(folder: Path) -> None:
    hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    _write_dense(folder, np.random.default_rng(1).standard_normal((DENSE_OUT, hidden)) / np.sqrt(hidden))


def _dense_activation(folder: Path) -> None:
    _edit_json(
        folder / "2_Dense" / "config.json",
        lambda c: c.update(activation_function="torch.nn.modules.activation.Identity"),
    )


def _tokenizer_lowercase(folder: Path) -> None:
    """Case kept: "The" is no longer "the" (tokenizer.json's normalizer, as a re-save would write it)."""
    _edit_json(folder / "tokenizer.json", lambda t: t["normalizer"].update(lowercase=False))


def _vocab_order(folder: Path) -> None:
    """Two entries of the vocabulary swapped: the same words map to other ids."""
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    vocab["wing"], vocab["flow"] = vocab["flow"], vocab["wing"]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    lines = (folder / "vocab.txt").read_text().splitlines()
    a, b = lines.index("wing"), lines.index("flow")
    lines[a], lines[b] = lines[b], lines[a]
    (folder / "vocab.txt").write_text("\n".join(lines) + "\n")


def _layer_norm_eps(folder: Path) -> None:
    _edit_json(folder / "config.json", lambda c: c.update(layer_norm_eps=0.5))


def _unchanged(folder: Path) -> None:
    pass


def _reformatted(folder: Path) -> None:
    """config.json rewritten with another key order, spacing and transformers version: same model."""
    data = json.loads((folder / "config.json").read_text())
    data["transformers_version"] = "0.0.1"
    (folder / "config.json").write_text(json.dumps(dict(reversed(list(data.items()))), indent=7))


# (name, change, another model?)
VARIANTS = [
    ("pooling cls", _pooling_cls, True),
    ("no normalize", _no_normalize, True),
    ("max_seq_length 8", _shorter, True),
    ("dense weights", _dense_weights, True),
    ("dense activation", _dense_activation, True),
    ("tokenizer keeps case", _tokenizer_lowercase, True),
    ("vocabulary order", _vocab_order, True),
    ("layer norm epsilon", _layer_norm_eps, True),
    ("unchanged copy", _unchanged, False),
    ("config reformatted", _reformatted, False),
]
IDS = [v[0] for v in VARIANTS]


@pytest.fixture(scope="module")
def variants(base: Path) -> dict[str, Path]:
    folders = {}
    for name, change, _ in VARIANTS:
        folder = base.parent / name.replace(" ", "-")
        shutil.copytree(base, folder)
        change(folder)
        folders[name] = folder
    return folders


@pytest.fixture(scope="module")
def index(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("identity-index")
    corpus = write_jsonl(work / "corpus.jsonl", ["a", "b", "c"], TEXTS)
    build_index(corpus, work / "idx", base, IndexOptions(device="cpu"))
    return work / "idx"


@pytest.mark.parametrize(("name", "change", "other"), VARIANTS, ids=IDS)
def test_fingerprints_differ_exactly_where_the_vectors_do(
    base: Path, variants: dict[str, Path], name: str, change: Callable, other: bool
) -> None:
    reference = TorchEncoder(base, device="cpu").encode(TEXTS)
    copy = TorchEncoder(variants[name], device="cpu")
    vectors = copy.encode(TEXTS)
    differ = vectors.shape != reference.shape or not np.allclose(vectors, reference, atol=1e-6)
    assert differ == other  # the variant does (or does not) change the vectors: the reference
    assert (model_fingerprint(variants[name]) != model_fingerprint(base)) == other
    assert (copy.fingerprint != TorchEncoder(base, device="cpu").fingerprint) == other
    assert model_fingerprint(base).startswith(FINGERPRINT_PREFIX)


@pytest.mark.parametrize(("name", "change", "other"), VARIANTS, ids=IDS)
def test_every_check_refuses_another_model_and_accepts_the_same(
    index: Path, variants: dict[str, Path], name: str, change: Callable, other: bool
) -> None:
    model = variants[name]
    corpus = write_jsonl(index.parent / f"more-{model.name}.jsonl", [f"n-{model.name}"], ["one more text"])
    before = (index / "CURRENT").read_text()
    with SearchIndex.load(index) as loaded:
        meta = loaded.meta
        checks = {
            "append": lambda: build_index(corpus, index, model, IndexOptions(append=True, device="cpu")),
            "search --model / serve --index": lambda: check_model_for(meta, model),
            "search with an open encoder": lambda: loaded.check_encoder(TorchEncoder(model, device="cpu")),
        }
        for what, check in checks.items():
            if other:
                with pytest.raises(InputError, match="is not the model the index .*recorded") as caught:
                    check()
                assert "\n" not in str(caught.value), what
            else:
                check()
    if other:
        assert (index / "CURRENT").read_text() == before  # nothing written


def test_the_refusal_names_what_differs(index: Path, variants: dict[str, Path]) -> None:
    meta = SearchIndex.load(index).meta
    with pytest.raises(InputError, match="it differs in pooling; fingerprint"):
        check_model_for(meta, variants["pooling cls"])
    with pytest.raises(InputError, match="it differs in tokenizer; fingerprint"):
        check_model_for(meta, variants["vocabulary order"])
    with pytest.raises(InputError, match="it differs in max_seq_length; fingerprint"):
        check_model_for(meta, variants["max_seq_length 8"])


# ----- indexes that recorded the weights alone (an earlier embedkit) ---------------------------


def _as_legacy(index: Path, tmp_path: Path, base: Path) -> Path:
    """A copy of `index` whose metadata records only the weights' fingerprint, as before."""
    from embedkit.storage.checksums import write_checksums

    copy = tmp_path / "legacy"
    shutil.copytree(index, copy)
    folder = index_files_dir(copy)
    meta = json.loads((folder / "embedkit-index.json").read_text())
    meta["model_fingerprint"] = weights_fingerprint(base)
    (folder / "embedkit-index.json").write_text(json.dumps(meta))
    write_checksums(folder)
    return copy


def test_a_legacy_index_is_accepted_only_where_the_identity_is_proved(
    index: Path, base: Path, variants: dict[str, Path], tmp_path: Path
) -> None:
    legacy = _as_legacy(index, tmp_path, base)
    meta = SearchIndex.load(legacy).meta
    assert not meta["model_fingerprint"].startswith(FINGERPRINT_PREFIX)
    check_model_for(meta)  # the recorded folder itself
    check_model_for(meta, variants["unchanged copy"])  # provably the recorded folder's model
    with pytest.raises(InputError, match="records only its model's weights .* is not the model in"):
        check_model_for(meta, variants["pooling cls"])
    with pytest.raises(InputError, match="records only its model's weights .* is not the model in"):
        check_model_for(meta, variants["dense weights"])

    meta = {**meta, "model": str(tmp_path / "moved-away")}  # the recorded folder is gone
    with pytest.raises(InputError, match="gone or unreadable: rebuild it with .* full identity"):
        check_model_for(meta, variants["unchanged copy"])


def test_check_same_model_table() -> None:
    """The comparison rule alone, on fingerprints written by hand."""
    full_a, full_b = FINGERPRINT_PREFIX + "a" * 20, FINGERPRINT_PREFIX + "b" * 20
    check_same_model(full_a, None, full_a, "m", "the index")
    check_same_model("0123456789abcdef", None, "0123456789abcdef", "m", "the index")  # equal legacy
    for recorded, candidate in [(full_a, full_b), (full_a, "0123456789abcdef"), ("0123456789abcdef", "x")]:
        with pytest.raises(InputError, match="is not the model"):
            check_same_model(recorded, None, candidate, "m", "the index")
    with pytest.raises(InputError, match="records only its model's weights"):
        check_same_model("0123456789abcdef", None, full_a, "m", "the index")


# ----- the ONNX form and its precisions -----------------------------------------------------------


def _earlier_export(folder: Path) -> None:
    """As an earlier embedkit wrote it: the weights' fingerprint, no identity record."""
    weights = weights_fingerprint(Path(json.loads((folder / "embedkit.json").read_text())["source"]))
    _edit_json(folder / "embedkit.json", lambda m: (m.pop("identity"), m.update(fingerprint=weights)))


@pytest.fixture(scope="module")
def exported(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from embedkit.export import export_model

    out = tmp_path_factory.mktemp("identity-onnx") / "onnx"
    export_model(tiny_bert, out, int8=True, progress=False, device="cpu")
    return out


def test_the_export_is_the_same_model_at_fp32_and_another_at_int8(exported: Path, tiny_bert: Path) -> None:
    from embedkit.encode.onnx_backend import OnnxEncoder

    source = model_fingerprint(tiny_bert)
    assert OnnxEncoder(exported, device="cpu", precision="fp32").fingerprint == source
    assert OnnxEncoder(exported, device="cpu", precision="int8").fingerprint != source
    meta = {"model": str(tiny_bert), "model_fingerprint": source, "dim": read_model_spec(tiny_bert).dim}
    check_model_for(meta, exported)  # the default precision
    with pytest.raises(InputError, match="it differs in precision"):
        check_model_for(meta, exported, precision="int8")


@pytest.mark.parametrize(
    ("built", "asked"), [("int8", "fp32"), ("int8", "fp16"), ("fp32", "int8"), ("fp16", "int8")]
)
def test_an_index_of_the_export_names_the_precision_it_differs_in(
    exported: Path, built: str, asked: str
) -> None:
    """The index records the export folder itself (built at one precision, searched at another)."""
    from embedkit.encode.onnx_backend import OnnxEncoder

    if "fp16" in (built, asked):
        pytest.importorskip("onnxruntime")
    recorded = OnnxEncoder(
        exported, device="cpu", precision="int8" if built == "int8" else "fp32"
    ).fingerprint
    meta = {"model": str(exported), "model_fingerprint": recorded, "dim": read_model_spec(exported).dim}
    with pytest.raises(InputError, match="it differs in precision; fingerprint"):
        check_model_for(meta, exported, precision=asked)


@pytest.mark.parametrize(
    ("change", "other"),
    [
        (lambda f: _edit_json(f / "embedkit.json", lambda m: m.update(max_seq_length=8)), True),
        (_vocab_order, True),
        (_tokenizer_lowercase, True),
        (lambda f: None, False),
        # an export by an earlier embedkit: no identity record, its weights' fingerprint
        (_earlier_export, False),  # its model has no Dense: its identity can be told as before
    ],
    ids=["max_seq_length", "vocabulary order", "tokenizer keeps case", "unchanged copy", "earlier export"],
)
def test_copies_of_the_export(
    exported: Path, tiny_bert: Path, tmp_path: Path, change: Callable, other: bool
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    change(copy)
    assert (model_fingerprint(copy) != model_fingerprint(tiny_bert)) == other
