"""The server embeds through the encoder's own stages: the same arrays as `encode`, nothing below them.

A served batch and `encode` of the same texts are compared stage by stage (the token ids, the
padded arrays, the vectors of the run, the finished matrix), to the last bit. The server's modules
are read as Python syntax trees for any call into a tokenizer or an ONNX Runtime session.
"""

from __future__ import annotations

import ast
import base64
from pathlib import Path

import numpy as np
import pytest

import embedkit.serve
from embedkit.encode import batching

# Texts longest first in characters and in tokens: `encode` (by characters, then tokens) and a
# served bucket (by tokens) put them in the same order.
TEXTS = [
    "the boundary layer over a swept wing thickens towards the trailing edge at high angles",
    "heat transfer in a laminar boundary layer with suction",
    "shock waves on a flat plate",
    "wing flutter",
    "lift",
]


def test_a_served_batch_and_encode_give_the_same_arrays_at_every_stage(tiny_onnx: Path):
    from embedkit.encode.onnx_backend import OnnxEncoder
    from embedkit.serve.served_model import ServedModel

    encoder = OnnxEncoder(tiny_onnx, device="cpu")
    stages = encoder.stages
    (batch,) = list(stages.prepare(TEXTS, batch_size=len(TEXTS)))  # encode's one batch
    served = ServedModel(encoder)
    served.grouped = False  # one bucket a batch, as on CUDA
    # prepare, first half: each text's token ids and counts, as a tokenizer gives them alone
    tokenized = served.tokenize(TEXTS)
    reference = encoder.batcher.tokenizer
    for i, text in enumerate(TEXTS):
        assert tokenized.rows[i].tolist() == reference.encode(text).ids
    assert tokenized.lengths == [len(reference.encode(t).ids) for t in TEXTS]
    # prepare, second half: the padded arrays
    prepared = served.prepare(tokenized.rows, tokenized.lengths)
    (run,) = prepared.runs
    for name in ("indices", "input_ids", "attention_mask", "token_type_ids", "lengths"):
        np.testing.assert_array_equal(getattr(run, name), getattr(batch, name))
        assert getattr(run, name).dtype == getattr(batch, name).dtype
    # run, then finish
    np.testing.assert_array_equal(stages.run(run), stages.run(batch))
    finished = served.run_prepared(prepared)
    np.testing.assert_array_equal(finished, encoder.encode(TEXTS, batch_size=len(TEXTS)))


# What the server may not call: a tokenizer, an ONNX Runtime session, an encoder's insides.
FORBIDDEN_ATTRIBUTES = {
    "tokenizer", "encode_batch", "encode_batch_fast", "encode_without_offsets", "load_tokenizer",
    "pad_encodings", "session", "io_binding", "run_with_iobinding", "get_inputs",
}
FORBIDDEN_MODULES = ("onnxruntime", "tokenizers", "transformers")
ENCODER_INSIDES = {"run_batch", "batcher", "warm_up", "runner", "session", "tokenizer"}


def offences(source: str) -> list[str]:
    """Each call into a tokenizer or a session, or reach into an encoder, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_ATTRIBUTES:
                found.append(f"line {node.lineno}: .{node.attr}")
            if node.attr in ENCODER_INSIDES and "encoder" in ast.unparse(node.value):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_ATTRIBUTES:
            found.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names]
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else names
            if any(m.split(".")[0] in FORBIDDEN_MODULES for m in modules):
                found.append(f"line {node.lineno}: import {modules}")
            if any(n in FORBIDDEN_ATTRIBUTES for n in names):
                found.append(f"line {node.lineno}: import {names}")
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("getattr", "hasattr")
            and node.args
            and "encoder" in ast.unparse(node.args[0])
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_tokenizer_or_session_call_in_the_server_outside_the_encoder_stages():
    folder = Path(embedkit.serve.__file__).parent
    found = {path.name: offences(path.read_text()) for path in sorted(folder.glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}
    # the check can fail: the server's code of before, in brief
    before = (
        "tokenizer = getattr(getattr(encoder, 'batcher', None), 'tokenizer', None)\n"
        "encodings = encode_without_offsets(self.tokenizer, texts)\n"
        "out[rows] = self.encoder.run_batch(batch)\n"
        "from onnxruntime import InferenceSession\n"
    )
    assert len(offences(before)) >= 5


@pytest.mark.parametrize("dim", [384, 2, 3])
def test_base64_rows_are_each_rows_little_endian_float32(dim):
    from embedkit.serve.dimensions import base64_rows

    vectors = np.random.default_rng(dim).standard_normal((5, dim)).astype(np.float32)
    rows = base64_rows(vectors)
    assert rows == [base64.b64encode(row.astype("<f4").tobytes()).decode() for row in vectors]
    for text, row in zip(rows, vectors, strict=True):
        np.testing.assert_array_equal(np.frombuffer(base64.b64decode(text), dtype="<f4"), row)


def test_search_tokenizes_each_query_once(tiny_onnx: Path, tiny_index: Path, monkeypatch):
    from serve_helpers import in_process

    from embedkit.serve.settings import ServeConfig

    calls: list[list[str]] = []
    real = batching.encode_without_offsets

    def recording(tokenizer, texts):
        calls.append(list(texts))
        return real(tokenizer, texts)

    monkeypatch.setattr(batching, "encode_without_offsets", recording)
    queries = ["wing flutter at high speed", "heat transfer"]
    with in_process(ServeConfig(model=str(tiny_onnx), index=str(tiny_index), max_wait_ms=0)) as client:
        calls.clear()
        answer = client.post("/search", json={"queries": queries, "k": 2, "mode": "dense"})
        metrics = client.get("/metrics").text
    assert answer.status_code == 200
    tokenized = [text for call in calls for text in call]
    assert len(tokenized) == len(queries)  # one tokenization of each query, for its vector and count
    tokens = sum(len(real(batching.load_tokenizer(tiny_onnx, 64), [q])[0].ids) for q in queries)
    name = "embedkit_prompt_tokens_total"
    (counted,) = [line.split()[-1] for line in metrics.splitlines() if line.startswith(name)]
    assert float(counted) == tokens  # the count, from the batches that embedded the queries
