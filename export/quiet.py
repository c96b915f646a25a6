"""Run onnxruntime's converters quietly and in a scratch folder.

Their messages (a fusion that did not apply, a suggestion to pre-process) say nothing that the
fusion counts and parity figures in `embedkit.json` do not, and they would bury the CLI's output.
Their symbolic shape inference also saves a debug copy of the model (`sym_shape_infer_temp.onnx`
plus a uuid-named `.data` file) into the current folder when it gives up, which would litter the
user's folder; the block therefore runs in a temporary working folder that is then removed.
Paths handed to the converters inside the block must be absolute.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator

from embedkit.storage.atomic import scratch_dir


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Suppress warnings, log records below ERROR and prints; work in a throwaway folder."""
    previous_disable = logging.root.manager.disable
    previous_cwd = os.getcwd()
    # Some fusion code reports with print() ("failed in shape inference ..."), hence stdout too.
    with (
        scratch_dir("embedkit-onnx-scratch-") as scratch,
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(previous_cwd)
            logging.disable(previous_disable)
