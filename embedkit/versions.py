"""What `embedkit --version` reports: embedkit's version and those of the libraries it runs on.

The libraries' versions come from the installed distributions' metadata (importlib.metadata), so
nothing heavy is imported for them. ONNX Runtime's execution providers are known only to
onnxruntime itself, so it is imported (a fraction of a second), which is fine for --version only.
"""

from __future__ import annotations

import platform
from importlib import metadata
from pathlib import Path

# library -> the distributions that install it (CPU and GPU builds); every one installed is reported
LIBRARIES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "faiss": ("faiss-cpu", "faiss-gpu-cuvs", "faiss-gpu"),
    "tantivy": ("tantivy",),
}


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution`, or None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def onnxruntime_providers() -> str:
    """ONNX Runtime's execution providers in its order of preference, or why they are unknown."""
    from embedkit.encode.ort_import import import_onnxruntime

    try:
        return ", ".join(import_onnxruntime().get_available_providers())
    except (ImportError, OSError) as exc:  # a broken install (a missing CUDA library, say)
        return f"unavailable: {' '.join(str(exc).split())}"


def version_lines() -> list[str]:
    """`embedkit X from FOLDER (Python Y)`, then one line a library: its distribution and version, or
    `LIBRARY: not installed`."""
    import embedkit

    folder = Path(embedkit.__file__).resolve().parent
    lines = [f"embedkit {embedkit.__version__} from {folder} (Python {platform.python_version()})"]
    for library, distributions in LIBRARIES.items():
        found = [(name, version) for name in distributions if (version := installed_version(name))]
        if not found:
            lines.append(f"{library}: not installed")
        for name, version in found:
            extra = f" (providers: {onnxruntime_providers()})" if library == "onnxruntime" else ""
            lines.append(f"{name} {version}{extra}")
    return lines
