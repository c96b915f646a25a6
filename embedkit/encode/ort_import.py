"""Import onnxruntime without its start-up telemetry notice.

onnxruntime 1.32 writes a coloured "Failed to persist telemetry device ID" warning straight to
file descriptor 2 when it is imported by an account that cannot write its device-id file (any
non-root user on a shared machine), on every command. It comes from C++ before any Python-side
logging setting can apply, so the import runs with fd 2 captured, and everything else onnxruntime
wrote there is passed on.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
from types import ModuleType

_NOISE = ("telemetry device ID",)


def import_onnxruntime() -> ModuleType:
    """`import onnxruntime`, with its telemetry notice dropped (other stderr output is kept)."""
    if "onnxruntime" in sys.modules:
        return sys.modules["onnxruntime"]
    sys.stderr.flush()
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
        try:
            module = importlib.import_module("onnxruntime")  # typed, as onnxruntime itself is not
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", "replace")
    kept = [line for line in text.splitlines(keepends=True) if not any(n in line for n in _NOISE)]
    if kept:
        sys.stderr.write("".join(kept))
    return module
