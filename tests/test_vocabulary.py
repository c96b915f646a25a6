"""One word per concept: each vocabulary is spelled out in one module, which every other reads.

The scan reads the source (not the running code): any tuple, list, set or dict literal that holds
every word of a vocabulary is a second copy of it, which drifts; only its owner may hold one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from embedkit.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("embedkit", "export", "cli", "training")

# vocabulary -> (its words, the one file that spells them out)
VOCABULARIES = {
    "ONNX precisions": ({"fp32", "fp16", "int8"}, "embedkit/encode/precisions.py"),
    "device names": ({"auto", "cpu", "cuda"}, "embedkit/encode/devices.py"),
    "search modes": ({"dense", "lexical", "hybrid"}, "embedkit/search/request.py"),
    "index kinds": ({"flat", "hnsw", "ivf-pq"}, "embedkit/index/kinds.py"),
    "fusion methods": ({"prf", "zscore", "rrf", "minmax"}, "embedkit/search/fusion.py"),
    "pooling modes": ({"cls", "max", "mean", "weightedmean", "lasttoken"}, "embedkit/encode/st_modules.py"),
}


def literal_words(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Dict):
        items = node.keys
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = node.elts
    else:
        return set()
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def files_spelling(words: set[str]) -> set[str]:
    found = set()
    for top in SOURCES:
        for path in (ROOT / top).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(words <= literal_words(node) for node in ast.walk(tree)):
                found.add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("name", sorted(VOCABULARIES))
def test_each_vocabulary_is_spelled_out_in_its_owner_alone(name: str) -> None:
    words, owner = VOCABULARIES[name]
    assert files_spelling(words) == {owner}, f"{name}: spelled out outside {owner}"


def test_every_entry_point_rejects_a_precision_in_the_same_words() -> None:
    from embedkit.encode.loading import load_encoder
    from embedkit.encode.runtime import Runtime

    messages = set()
    for check in (
        lambda: Runtime(precision="fp8"),
        lambda: load_encoder(None, precision="fp8"),
    ):
        with pytest.raises(InputError) as caught:
            check()
        messages.add(str(caught.value))
    pytest.importorskip("numpy")
    from embedkit.export.parity import ParityGates, judge

    with pytest.raises(InputError) as caught:
        judge("fp8", [1.0], ["a"], ParityGates())
    messages.add(str(caught.value))
    assert messages == {"unknown precision 'fp8': use one of fp32, fp16, int8"}


def test_every_entry_point_rejects_a_device_in_the_same_words() -> None:
    from embedkit.encode.devices import check_device
    from embedkit.encode.loading import load_encoder
    from embedkit.encode.runtime import Runtime

    messages = set()
    for check in (
        lambda: check_device("tpu"),
        lambda: Runtime(device="tpu"),
        lambda: load_encoder(None, device="tpu"),
    ):
        with pytest.raises(InputError) as caught:
            check()
        messages.add(str(caught.value))
    assert messages == {"unknown device 'tpu': use auto, cpu, cuda or cuda:N"}
