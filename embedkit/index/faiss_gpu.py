"""FAISS on the GPU: which GPU faiss gets for a device name, and an index moved there and back.

`--device cuda` (or `cuda:N`) builds and searches flat and IVF-PQ indexes on that GPU. `auto` and
`cpu` keep faiss on the CPU: `auto` must not make the index kind of a corpus depend on which faiss
package is installed (on the GPU, `auto` builds IVF-PQ where the CPU builds HNSW), and one query
is answered sooner on the CPU than the index is copied to a GPU. Which GPU a `Runtime` puts faiss
on is its own answer (`embedkit.encode.runtime.Runtime.faiss_gpu`); `--gpu`, the older switch, is
`--device cuda`.

A faiss without GPU support (faiss-cpu) when a GPU is asked for is an `InputError` that names the
`gpu` extra, never a CPU run in its place; faiss has no GPU HNSW index. What is written to disk is
always the CPU form (`index_gpu_to_cpu`), which any faiss reads.
"""

from __future__ import annotations

from embedkit.encode.runtime import Runtime
from embedkit.errors import InputError
from embedkit.index.kinds import FaissIndex, faiss_module
from embedkit.versions import LIBRARIES, installed_version

GPU_EXTRA = "pip install 'embedkit[gpu]'"
# faiss's GPU k-selection takes k (and an IVF index's nprobe) up to 2048 (GPU_MAX_SELECTION_K)
GPU_MAX_K = 2048
# A CUDA block's shared memory without opt-in (48 KiB on every GPU faiss supports): GPU IVF-PQ holds
# a query's float32 lookup table (m sub-quantizers x 2^nbits centroids) there, or refuses to clone.
SHARED_MEMORY_BYTES = 48 * 1024


def faiss_gpu_count() -> int:
    """GPUs faiss can use here: 0 for a faiss built without GPU support (faiss-cpu)."""
    faiss = faiss_module()
    if not hasattr(faiss, "StandardGpuResources"):  # faiss-cpu 1.8 to 1.15 builds have no GPU symbols
        return 0
    return int(faiss.get_num_gpus())


def faiss_gpu_for(runtime: Runtime) -> int | None:
    """The GPU faiss runs on where `runtime` says, or None for the CPU.

    A GPU that faiss cannot have is an `InputError` naming the `gpu` extra.
    """
    number = runtime.faiss_gpu
    if number is None:
        return None
    asked, other = f"--device {runtime.device}", "use --device auto or cpu"
    count = faiss_gpu_count()
    if count < 1:
        installed = [f"{d} {v}" for d in LIBRARIES["faiss"] if (v := installed_version(d))]
        which = f" ({', '.join(installed)})" if installed else ""
        raise InputError(
            f"{asked} runs faiss on the GPU, but faiss sees no GPU: this faiss{which} has no GPU "
            f"support or no CUDA GPU is visible; {GPU_EXTRA} on a CUDA machine, or {other}"
        )
    if number >= count:
        raise InputError(f"{asked}: faiss sees {count} GPU(s), numbered from 0")
    return number


def needs_float16_tables(index: FaissIndex) -> bool:
    """Whether an IVF-PQ index's float32 lookup table overflows a block's shared memory on the GPU."""
    pq = getattr(index, "pq", None)  # faiss 1.8 to 1.15: only product-quantized indexes have `pq`
    return pq is not None and int(pq.M) * (1 << int(pq.nbits)) * 4 > SHARED_MEMORY_BYTES


class GpuPlacement:
    """Moves an index to one GPU and back, keeping faiss's GPU resources alive meanwhile."""

    def __init__(self, gpu: int = 0, asked: str = "--device cuda") -> None:
        self.gpu = gpu
        self.asked = asked
        self.resources = faiss_module().StandardGpuResources()

    @property
    def name(self) -> str:
        return f"cuda:{self.gpu}"

    def to_gpu(self, index: FaissIndex, kind: str) -> FaissIndex:  # a faiss GPU index
        if kind == "hnsw":
            raise InputError(
                f"faiss has no GPU HNSW index: {self.asked} builds and searches flat and ivf-pq indexes; "
                "use this one with faiss on the CPU (--device auto or cpu)"
            )
        faiss = faiss_module()
        options = faiss.GpuClonerOptions()
        # float16 storage would change a flat index's scores: only IVF-PQ's lookup tables, and only
        # where float32 ones cannot be had (m x 2^nbits above SHARED_MEMORY_BYTES / 4)
        options.useFloat16 = needs_float16_tables(index)
        return faiss.index_cpu_to_gpu(self.resources, self.gpu, index, options)

    @staticmethod
    def to_cpu(index: FaissIndex) -> FaissIndex:  # a faiss CPU index, the form that is saved
        return faiss_module().index_gpu_to_cpu(index)


def placement_for(runtime: Runtime) -> GpuPlacement | None:
    """A `GpuPlacement` where `runtime` puts faiss on a GPU, else None; checked here, before any
    work, so that a missing GPU faiss is one line before minutes of embedding."""
    number = faiss_gpu_for(runtime)
    if number is None:
        return None
    return GpuPlacement(number, f"--device {runtime.device}")


def check_gpu_k(k: int, faiss_device: str) -> None:
    """faiss's GPU search returns at most `GPU_MAX_K` neighbours: a larger k there is an `InputError`."""
    if faiss_device != "cpu" and k > GPU_MAX_K:
        raise InputError(f"faiss on the GPU returns at most {GPU_MAX_K} results a query; got -k {k}")
