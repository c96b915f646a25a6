"""The *run* stage on CUDA: inputs bound to device buffers per (rows, length) bucket, CUDA graphs.

With NumPy feeds, `session.run` copies every input from pageable memory and allocates its output
anew on each call. On CUDA with fixed shapes (`embedkit.encode.shapes`), a batch's shape is one of
a few buckets, so each bucket gets device buffers of its own once (ONNX Runtime's IO binding):
a run copies the batch into them (`update_inplace`) and reads the vectors back from a bound
output, with no allocation. Where the provider can capture the graph (`enable_cuda_graph`), each
bucket is captured as a CUDA graph of its own (run option `gpu_graph_id`) and replayed: one launch
instead of one per kernel. A graph needs every node on CUDA and fixed buffers; where the session
cannot be made or a capture fails, one line says so and the runs go on with IO binding alone.

On the CPU none of this applies: the session reads the NumPy arrays in place (`choose_device_run`
says "numpy"), which a unit test of the choice holds.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from embedkit.encode.token_arrays import Batch, StageTimes

# ONNX Runtime versions whose CUDA provider replays several graphs in one session (`gpu_graph_id`).
GRAPH_IDS_SINCE = (1, 18)
ORT_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
             "tensor(float16)": np.float16}


@dataclass(frozen=True)
class DeviceRun:
    """How the run stage feeds the session: "numpy" arrays or "io_binding", with CUDA graphs or not."""

    feeds: str
    cuda_graphs: bool
    reason: str  # why graphs are off, where they are (a line for the console)


def version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def choose_device_run(
    device: str, fixed_shapes: bool, cuda_graphs: bool | None, ort_version: str
) -> DeviceRun:
    """The run path for a session on `device` ("cpu" or "cuda"): NumPy on the CPU; IO binding on
    CUDA; CUDA graphs on top where the shapes are fixed (a graph is one shape), not turned off
    (`cuda_graphs=False`), and the runtime replays several graphs a session."""
    if not device.startswith("cuda"):
        return DeviceRun("numpy", False, "the CPU session reads the arrays in place")
    if cuda_graphs is False:
        return DeviceRun("io_binding", False, "CUDA graphs turned off")
    if not fixed_shapes:
        return DeviceRun("io_binding", False, "CUDA graphs need fixed shapes")
    if version_tuple(ort_version) < GRAPH_IDS_SINCE:
        wanted = ".".join(map(str, GRAPH_IDS_SINCE))
        reason = f"CUDA graphs need onnxruntime >= {wanted}, this is {ort_version}"
        return DeviceRun("io_binding", False, reason)
    return DeviceRun("io_binding", True, "")


def cuda_provider_options(device_id: int, plan: DeviceRun) -> dict[str, str]:
    options = {"device_id": str(device_id)}
    if plan.cuda_graphs:
        options["enable_cuda_graph"] = "1"
    return options


class _Slot:
    """One bucket's device buffers, binding and run options."""

    __slots__ = ("binding", "inputs", "output", "options")
    binding: Any  # onnxruntime.IOBinding
    inputs: dict[str, Any]  # input name -> onnxruntime.OrtValue on the device
    output: Any  # onnxruntime.OrtValue on the device
    options: Any  # onnxruntime.RunOptions


class BoundRunner:
    """Runs padded batches through a CUDA session with IO binding, a slot of buffers per shape.

    `reopen(graphs)` makes a new session (with or without CUDA graphs) after a failed capture.
    Runs are serialized (one device, and a slot's buffers are shared by the runs of its shape).
    """

    def __init__(
        self,
        session: Any,
        device_id: int,
        output_name: str,
        plan: DeviceRun,
        times: StageTimes,
        reopen: Callable[[bool], Any],
        dim: int | None = None,
    ) -> None:
        self.device_id = device_id
        self.model_dim = dim  # `embedkit.json`'s, where the graph's output names no size
        self.output_name = output_name
        self.plan = plan
        self.times = times
        self._reopen = reopen
        self._lock = threading.Lock()
        self._use(session)

    def _use(self, session: Any) -> None:
        self.session = session
        self.input_types = {i.name: ORT_TYPES.get(i.type, np.int64) for i in session.get_inputs()}
        (output,) = [o for o in session.get_outputs() if o.name == self.output_name]
        self.output_type = ORT_TYPES.get(output.type, np.float32)
        last = output.shape[-1] if output.shape else None
        self.dim = last if isinstance(last, int) else int(self.model_dim or 0)
        self._slots: dict[tuple[int, int], _Slot] = {}

    def _slot(self, rows: int, length: int) -> _Slot:
        from embedkit.encode.ort_import import import_onnxruntime

        ort = import_onnxruntime()
        slot = _Slot()

        def on_device(shape: tuple[int, ...], dtype: Any) -> Any:
            return ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", self.device_id)

        slot.inputs = {name: on_device((rows, length), dtype) for name, dtype in self.input_types.items()}
        slot.output = on_device((rows, self.dim), self.output_type)
        slot.binding = self.session.io_binding()
        for name, value in slot.inputs.items():
            slot.binding.bind_ortvalue_input(name, value)
        slot.binding.bind_ortvalue_output(self.output_name, slot.output)
        slot.options = ort.RunOptions()
        if self.plan.cuda_graphs:  # one graph a bucket; ids from 1 (0 is the default graph)
            slot.options.add_run_config_entry("gpu_graph_id", str(len(self._slots) + 1))
        self._slots[(rows, length)] = slot
        return slot

    def run(self, batch: Batch) -> np.ndarray:
        """float32 (B, dim) of a padded batch (every row, padded ones too)."""
        feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask,
                 "token_type_ids": batch.token_type_ids}
        with self._lock:
            try:
                return self._run(feeds, batch.input_ids.shape)
            except Exception as exc:  # onnxruntime raises its own types for a failed capture
                if not self.plan.cuda_graphs:
                    raise
                reason = " ".join(str(exc).split())[:160]
                print(f"CUDA graphs: not available here ({reason}); running with IO binding", file=sys.stderr)
                self.plan = DeviceRun("io_binding", False, reason)
                self._use(self._reopen(False))
                return self._run(feeds, batch.input_ids.shape)

    def _run(self, feeds: dict[str, np.ndarray | None], shape: tuple[int, int]) -> np.ndarray:
        slot = self._slots.get(shape) or self._slot(*shape)
        start = time.perf_counter()
        for name, value in slot.inputs.items():
            array = feeds[name]
            if array is None:  # the graph takes type ids the batch has none of: zeros
                array = np.zeros(shape, dtype=self.input_types[name])
            value.update_inplace(np.ascontiguousarray(array, dtype=self.input_types[name]))
        self.times.add("copy_s", time.perf_counter() - start)
        self.session.run_with_iobinding(slot.binding, slot.options)
        vectors: np.ndarray = slot.output.numpy()  # an OrtValue's copy (onnxruntime ships no types)
        return vectors.astype(np.float32, copy=False)


__all__ = ["BoundRunner", "DeviceRun", "choose_device_run", "cuda_provider_options"]
