"""How hard InfoCSE's auxiliary MLM term pulls on the encoder, next to InfoNCE.

For a few training batches (batch 64, 32 tokens, Wikipedia sentences) the script computes the
gradient of each term, unweighted, with respect to the encoder's weights, and prints both norms
and their ratio. lambda x ratio is the term's share of the update direction: with lambda = 1e-5
(InfoCSE's Table 8), it says how far `--method infocse` can move from `simcse`.

    python benchmarks/aux_gradient.py --pooling cls [--stage1 ~/.cache/embedkit/infocse-stage1/KEY]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from train_step import make_batches

import embedkit.training.model as model_module
from embedkit.encode.model_folder import default_base_model_path
from embedkit.training.aux_stage1 import load_stage1
from embedkit.training.config import TrainConfig
from embedkit.training.model import ContrastiveModel


def gradient_norm(loss: torch.Tensor, params: list[torch.nn.Parameter], keep: bool) -> float:
    grads = torch.autograd.grad(loss, params, retain_graph=keep, allow_unused=True)
    return float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pooling", default="cls")
    parser.add_argument("--stage1", type=Path, default=None, help="a stage-1 cache folder to load")
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    base = default_base_model_path()
    model = ContrastiveModel.from_folder(base, TrainConfig(method="infocse", pooling=args.pooling))
    if args.stage1 is not None:
        load_stage1(args.stage1.expanduser(), model.aux)
    model.aux.generator = torch.Generator().manual_seed(0)
    model.train()
    params = [p for p in model.backbone.parameters() if p.requires_grad]

    # the step reports detached terms; keep the live tensors of the two terms as they are computed
    live: dict[str, torch.Tensor] = {}
    info_nce, aux_sum = model_module.losses.info_nce, model.aux.sum_and_count

    def record_info_nce(*a, **k):  # noqa: ANN002, ANN003, ANN202
        live["info_nce"] = info_nce(*a, **k)
        return live["info_nce"]

    def record_aux(*a, **k):  # noqa: ANN002, ANN003, ANN202
        total, count = aux_sum(*a, **k)
        live["aux_mlm"] = total / count.clamp(min=1)
        return total, count

    model_module.losses.info_nce = record_info_nce
    model.aux.sum_and_count = record_aux
    rows = []
    for i, batch in enumerate(make_batches(base, 64, 32, args.batches, torch.device("cpu"))):
        model.step(batch, torch.Generator().manual_seed(i))
        nce = gradient_norm(live["info_nce"], params, keep=True)
        mlm = gradient_norm(live["aux_mlm"], params, keep=False)
        rows.append(
            {
                "batch": i,
                "info_nce": live["info_nce"].item(),
                "info_nce_grad_norm": nce,
                "aux_mlm": live["aux_mlm"].item(),
                "aux_mlm_grad_norm": mlm,
                "ratio": mlm / nce,
            }
        )
        print(json.dumps(rows[-1]))


if __name__ == "__main__":
    main()
