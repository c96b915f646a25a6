"""A stand-in for faiss's GPU half, on faiss-cpu: the code paths of `--device cuda` run without a GPU.

`install(monkeypatch, gpus)` gives the imported faiss module `StandardGpuResources`,
`GpuClonerOptions`, `get_num_gpus`, `index_cpu_to_gpu` and `index_gpu_to_cpu`. A "GPU index" is a
copy of the CPU index (as faiss copies one to the device) whose every method call is recorded with
its GPU number, so a test sees which work reached the GPU and which index was written back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GpuLog:
    calls: list[tuple[str, int]] = field(default_factory=list)  # (method, gpu) on a GPU index
    to_gpu: list[tuple[int, str, bool]] = field(default_factory=list)  # (gpu, CPU class, useFloat16)
    to_cpu: int = 0  # index_gpu_to_cpu calls

    def methods(self) -> set[str]:
        return {name for name, _ in self.calls}


class FakeGpuIndex:
    """A copy of a CPU index, standing for its GPU form; calls pass through and are logged."""

    def __init__(self, cpu_index: Any, gpu: int, log: GpuLog) -> None:
        import faiss

        self.__dict__.update(_cpu=faiss.clone_index(cpu_index), _gpu=gpu, _log=log)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cpu, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._log.calls.append((name, self._gpu))
            return value(*args, **kwargs)

        return call


def install(monkeypatch: Any, gpus: int = 1) -> GpuLog:
    """faiss with `gpus` fake GPUs, for the rest of the test; the log of what reached them."""
    import faiss

    log = GpuLog()

    class StandardGpuResources:
        pass

    class GpuClonerOptions:
        useFloat16 = False

    def index_cpu_to_gpu(resources: Any, gpu: int, index: Any, options: Any = None) -> FakeGpuIndex:
        if not isinstance(resources, StandardGpuResources) or not 0 <= gpu < gpus:
            raise RuntimeError(f"invalid GPU resources or device {gpu}")
        log.to_gpu.append((gpu, type(index).__name__, bool(options and options.useFloat16)))
        return FakeGpuIndex(index, gpu, log)

    def index_gpu_to_cpu(index: FakeGpuIndex) -> Any:
        log.to_cpu += 1
        return faiss.clone_index(index._cpu)

    for name, value in {
        "StandardGpuResources": StandardGpuResources,
        "GpuClonerOptions": GpuClonerOptions,
        "get_num_gpus": lambda: gpus,
        "index_cpu_to_gpu": index_cpu_to_gpu,
        "index_gpu_to_cpu": index_gpu_to_cpu,
    }.items():
        monkeypatch.setattr(faiss, name, value, raising=False)
    return log
