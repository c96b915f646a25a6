"""Other libraries' progress bars and log lines kept off embedkit's terminal.

transformers draws a bar for every weight load and save (`Loading weights: 0%| ... 100%`,
`Writing model shards`) and huggingface_hub one per download; under embedkit's own progress bars
and one-line errors they are noise. `HF_HUB_DISABLE_PROGRESS_BARS` is read by both libraries when
they are imported, so the CLI sets it (unless the user did) before either is; where they are
already imported (a test runner, a notebook), their switches are turned too. gRPC's C core (under
pymilvus and Milvus Lite) logs `GOAWAY ... too_many_pings` lines at exit unless its verbosity is
lowered before it starts.
"""

from __future__ import annotations

import os
import sys

QUIET_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "GRPC_VERBOSITY": "NONE"}


def quiet_other_libraries() -> None:
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] != "1":
        return  # the user asked for the bars
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
