"""The CUDA run path's choices, and its bookkeeping against a stand-in ONNX Runtime (no GPU here).

Which path a session takes is a pure function of the device, the shape rule, the user's choice
and the runtime's version; the runner's buffers, graph ids and fallback are checked with fake
OrtValues and a fake session that compute what the graph would (one vector a row).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from embedkit.encode import cuda_run, ort_import
from embedkit.encode.cuda_run import BoundRunner, DeviceRun, choose_device_run, cuda_provider_options
from embedkit.encode.token_arrays import Batch, StageTimes


@pytest.mark.parametrize(
    ("device", "fixed", "asked", "version", "feeds", "graphs"),
    [
        ("cpu", True, None, "1.22.0", "numpy", False),
        ("cpu", False, True, "1.22.0", "numpy", False),  # inert on the CPU whatever is asked
        ("cuda", True, None, "1.22.0", "io_binding", True),
        ("cuda:1", True, True, "1.18.1", "io_binding", True),
        ("cuda", False, None, "1.22.0", "io_binding", False),  # a graph is one shape
        ("cuda", True, False, "1.22.0", "io_binding", False),  # turned off
        ("cuda", True, None, "1.17.3", "io_binding", False),  # one graph a session only
        ("cuda", True, None, "1.22.0rc1", "io_binding", True),
    ],
)
def test_the_run_path_by_device_shapes_choice_and_version(device, fixed, asked, version, feeds, graphs):
    plan = choose_device_run(device, fixed, asked, version)
    assert (plan.feeds, plan.cuda_graphs) == (feeds, graphs)
    assert bool(plan.reason) != graphs  # a reason wherever graphs are off
    options = cuda_provider_options(1, plan)
    assert options["device_id"] == "1" and (options.get("enable_cuda_graph") == "1") == graphs


def test_an_onnx_encoder_on_the_cpu_has_no_cuda_runner(tiny_onnx):
    from embedkit.encode.onnx_backend import OnnxEncoder

    encoder = OnnxEncoder(tiny_onnx, device="cpu")
    assert encoder.runner is None and encoder.stages.dtype == np.int64


class FakeValue:
    """An OrtValue stand-in: a host array that `update_inplace` overwrites in place."""

    made: list[tuple[tuple[int, ...], object, str]] = []

    def __init__(self, shape, dtype) -> None:
        self.array = np.zeros(shape, dtype=dtype)

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape, dtype, device, device_id):
        cls.made.append((tuple(shape), dtype, device))
        return cls(shape, dtype)

    def update_inplace(self, array) -> None:
        assert array.shape == self.array.shape and array.dtype == self.array.dtype
        self.array[...] = array

    def numpy(self):
        return self.array.copy()


class FakeRunOptions:
    def __init__(self) -> None:
        self.entries: dict[str, str] = {}

    def add_run_config_entry(self, key, value) -> None:
        self.entries[key] = value


class FakeSession:
    """Each row's vector: [its attended tokens, its first id]; fails while `broken`."""

    def __init__(self, broken: bool = False) -> None:
        self.broken = broken
        self.graph_ids: list[str | None] = []

    def get_inputs(self):
        return [SimpleNamespace(name=n, type="tensor(int64)") for n in ("input_ids", "attention_mask")]

    def get_outputs(self):
        return [SimpleNamespace(name="sentence_embedding", type="tensor(float16)", shape=["batch", 2])]

    def io_binding(self):
        bound: dict[str, FakeValue] = {}
        return SimpleNamespace(
            bound=bound,
            bind_ortvalue_input=bound.__setitem__,
            bind_ortvalue_output=bound.__setitem__,
        )

    def run_with_iobinding(self, binding, options) -> None:
        if self.broken:
            raise RuntimeError("CUDA graph capture failed: a node runs on the CPU")
        self.graph_ids.append(options.entries.get("gpu_graph_id"))
        ids, mask = binding.bound["input_ids"].array, binding.bound["attention_mask"].array
        binding.bound["sentence_embedding"].array[:] = np.stack([mask.sum(1), ids[:, 0]], 1)


@pytest.fixture
def fake_ort(monkeypatch):
    FakeValue.made = []
    fake = SimpleNamespace(OrtValue=FakeValue, RunOptions=FakeRunOptions)
    monkeypatch.setattr(ort_import, "import_onnxruntime", lambda: fake)
    return fake


def padded(rows: int, length: int, first: int) -> Batch:
    ids = np.full((rows, length), first, dtype=np.int64)
    mask = np.zeros((rows, length), dtype=np.int64)
    mask[:, : length // 2 + 1] = 1
    return Batch(np.arange(rows), ids, mask, None)


def test_one_set_of_buffers_and_one_graph_a_shape(fake_ort):
    session = FakeSession()
    plan = choose_device_run("cuda", True, None, "1.22.0")
    runner = BoundRunner(session, 0, "sentence_embedding", plan, StageTimes(), lambda graphs: None)
    shapes = [(4, 16), (2, 32), (4, 16), (2, 32), (4, 16)]
    for k, (rows, length) in enumerate(shapes):
        out = runner.run(padded(rows, length, first=k))
        assert out.dtype == np.float32  # the fp16 graph's output, as float32
        np.testing.assert_array_equal(out, [[length // 2 + 1, k]] * rows)
    # two shapes: buffers made once each (2 inputs + 1 output), a graph id each, reused after
    assert len(FakeValue.made) == 6 and {m[2] for m in FakeValue.made} == {"cuda"}
    assert session.graph_ids == ["1", "2", "1", "2", "1"]


def test_a_failed_capture_says_so_once_and_runs_on_without_graphs(fake_ort, capsys):
    reopened: list[bool] = []

    def reopen(graphs: bool):
        reopened.append(graphs)
        return FakeSession()

    plan = choose_device_run("cuda", True, None, "1.22.0")
    runner = BoundRunner(FakeSession(broken=True), 0, "sentence_embedding", plan, StageTimes(), reopen)
    for k in range(3):
        np.testing.assert_array_equal(runner.run(padded(2, 16, first=k)), [[9, k]] * 2)
    assert reopened == [False] and not runner.plan.cuda_graphs
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("CUDA graphs: not available here (CUDA graph capture failed")
    assert runner.session.graph_ids == [None, None, None]


def test_without_graphs_a_failure_is_the_callers(fake_ort):
    plan = DeviceRun("io_binding", False, "CUDA graphs turned off")
    runner = BoundRunner(FakeSession(broken=True), 0, "sentence_embedding", plan, StageTimes(), None)
    with pytest.raises(RuntimeError, match="capture failed"):
        runner.run(padded(1, 16, first=0))
    assert cuda_run.GRAPH_IDS_SINCE == (1, 18)
