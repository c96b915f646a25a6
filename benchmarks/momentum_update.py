"""Time of one momentum (EMA) update: the generic `ema_update` against `MomentumEncoder.update`.

    .venv/bin/python benchmarks/momentum_update.py --threads 1
    .venv/bin/python benchmarks/momentum_update.py --device cuda

`ema_update` matches the two modules' tensors by name and checks them on every call;
`MomentumEncoder.update` matches them once and then runs one fused `_foreach_lerp_` (and one
`_foreach_copy_` of the buffers) per step. Two shapes: MiniLM's (6 layers x 384, 103 tensors: the
arithmetic), and the same 103 tensors at width 8, where the arithmetic is negligible and what is
left is the host time per update, the part a GPU cannot hide behind its kernels. Prints one JSON line
of median milliseconds per update.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
from transformers import BertConfig, BertModel

from embedkit.encode.devices import torch_device
from embedkit.training.momentum import MomentumEncoder, ema_update


def median_ms(update: Callable[[], None], device: torch.device, repeats: int, rounds: int = 7) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(max(3, repeats // 10)):
        update()
    times = []
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        for _ in range(repeats):
            update()
        sync()
        times.append((time.perf_counter() - start) / repeats)
    return round(1e3 * statistics.median(times), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch_device(args.device)
    results = {}
    for name, width, repeats in (("minilm_shape", 384, 10), ("width_8_host_time", 8, 200)):
        config = BertConfig(
            hidden_size=width, num_hidden_layers=6, num_attention_heads=2, intermediate_size=4 * width
        )
        torch.manual_seed(0)
        online = BertModel(config).to(device)
        target = copy.deepcopy(online).requires_grad_(False)
        momentum = MomentumEncoder(online, dropout=0.0).to(device)
        results[name] = {
            "tensors": len(list(online.parameters())),
            "ema_update_ms": median_ms(partial(ema_update, target, online, 0.995), device, repeats),
            "momentum_encoder_update_ms": median_ms(partial(momentum.update, online), device, repeats),
        }
    report = {
        "benchmark": "momentum_update",
        "date": time.strftime("%Y-%m-%d"),
        "device": str(device),
        "threads": torch.get_num_threads(),
        **results,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
