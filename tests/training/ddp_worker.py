"""A training job for torchrun, driven by a JSON spec: `torchrun ... ddp_worker.py SPEC.json`.

The spec holds `corpus` (a list of sentences) and `runs`, each `{"out", "config", "keep_step",
"keep", "kill_rank", "kill_step"}`: train `config` into `out`; after step `keep_step` rank 0 copies
that step's checkpoint to `keep` (the run deletes its checkpoints when it finishes); after step
`kill_step` rank `kill_rank` kills itself with SIGKILL, as a machine failure would.

The worker joins the process group itself, so `train` runs in a group it did not create (and runs
several trainings in one launch).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers.utils import logging as hf_logging

from embedkit.training.config import TrainConfig
from embedkit.training.trainer import train


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for run in spec["runs"]:
        out = Path(run["out"])

        def on_step(step: int, _terms: dict[str, float], run: dict = run, out: Path = out) -> None:
            if rank == 0 and step == run.get("keep_step"):
                shutil.copytree(out / "checkpoints" / f"step-{step:06d}", run["keep"])
            if rank == run.get("kill_rank") and step == run.get("kill_step"):
                os.kill(os.getpid(), signal.SIGKILL)

        train(spec["corpus"], out, TrainConfig.from_dict(run["config"]), progress=False, on_step=on_step)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
