"""Seconds per training step of simcse vs micse, the ablations, infocse and micse + aux; where the time goes.

    .venv/bin/python benchmarks/train_step.py --steps 10 --warmup 3
    .venv/bin/python benchmarks/train_step.py --device cuda --dtype bf16 --model-size bert-base
    python benchmarks/train_step.py --device cuda --dtype bf16 --fixed-shapes --whole-step --compile auto
    .venv/bin/python benchmarks/train_step.py --model-size tiny --batch-size 8 --seq-len 16 --no-memory
    (--model-size minilm-random: MiniLM's shape with random weights, for machines without the weights)
    torchrun --nproc-per-node 1 benchmarks/train_step.py ...   (works too: one process, no process group)

Every method trains its own copy of the model on the same batches (batch 64, length 32 by
default); the methods take turns step by step, so a change in machine load hits all of them
alike, and the ratios compare medians from the same run. The step's parts are timed with a device
sync at their edges: `views_forward` (the [x; x] pass, the AMI layers forming their maps),
`momentum_forward` (the momentum encoder's pass on x), `loss` (every term of the objective, forward:
within it `info_nce`, `ami`, `aux_mlm`, ... each on its own), `backward` (backward and clipping),
`optimizer` (AdamW's step) and `momentum_update` (the EMA update and the enqueue); with InfoCSE's
term, `aux_network` (masking, frozen lower layers, extra layers and head, forward).
Peak memory is measured per method on its own: CUDA's peak allocation, or on CPU the peak resident
memory of a subprocess that runs two steps of that method alone. Prints one JSON line.

The training loop's speed settings (`training/step_speed.py`): `--fixed-shapes` pads every batch to
--seq-len (the trainer's default on CUDA), `--compile MODE` compiles the step's forward passes
(CUDA only; `auto`, the trainer's default, is reduce-overhead there), and `--whole-step` times each
method's steps back to back with one device sync per block of `--block` steps and no section
timers, as the trainer runs them (host and device overlap): its `median_step_s` is a block's time /
its steps, and there are no sections. Tiny on a CPU: `--model-size tiny` (2 layers, 64 wide, random).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from embedkit.data.corpus import load_sentences
from embedkit.encode.batching import TokenBatcher
from embedkit.encode.devices import torch_device
from embedkit.encode.model_folder import default_base_model_path
from embedkit.training import step_speed
from embedkit.training.batches import pad_batch
from embedkit.training.config import COMPILE_MODES, TrainConfig
from embedkit.training.model import ContrastiveModel
from embedkit.training.optimizer import make_optimizer, make_scheduler, optimizer_step

ROOT = Path(__file__).resolve().parents[1]
# name -> (TrainConfig.method, attention implementation: auto = SDPA, AMI's layers forming their maps)
VARIANTS = {
    "simcse": ("simcse", "auto"),
    "simcse-eager": ("simcse", "eager"),
    "ami-simcse": ("ami-simcse", "auto"),
    "moco-simcse": ("moco-simcse", "auto"),
    "micse": ("micse", "auto"),
    "micse-eager": ("micse", "eager"),  # every layer eager, as before AMI's maps came from its layers
    "infocse": ("infocse", "auto"),  # simcse + InfoCSE's auxiliary MLM term (lambda 1e-5)
    "micse-aux": ("micse", "auto"),  # micse + the same term (AUX_WEIGHTS)
}
AUX_WEIGHTS = {"micse-aux": 1e-5}  # aux_mlm_weight of the variants that add the term to a method


def base_model(size: str, workdir: Path) -> Path:
    """The bundled MiniLM; or random weights in MiniLM's shape or BERT-base's (12 x 768), with its tokenizer.

    Random weights time the same as trained ones; `minilm-random` serves machines without the weights.
    """
    minilm = default_base_model_path()
    if size == "minilm":
        return minilm
    from transformers import BertConfig, BertModel

    path = workdir / size
    shutil.copytree(minilm, path, ignore=shutil.ignore_patterns("model.safetensors", "*.bin"))
    config = BertConfig.from_pretrained(str(minilm)) if size != "bert-base" else BertConfig()
    if size == "tiny":  # MiniLM's vocabulary, 2 layers of 64: the whole step in seconds on a CPU
        config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 64, 128
        config.num_attention_heads = 4
    torch.manual_seed(0)
    BertModel(config).save_pretrained(str(path))
    pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    pooling["word_embedding_dimension"] = config.hidden_size
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return path


def training_sentences(count: int) -> list[str]:
    """Wikipedia sentences (SimCSE's training data) when ../shared/data is present, else Cranfield."""
    wiki = ROOT.parent / "shared" / "data" / "corpora" / "wiki1m-sample.txt"
    source = wiki if wiki.is_file() else ROOT / "examples" / "cranfield" / "corpus.jsonl.gz"
    sentences = load_sentences(source, split_sentences=not wiki.is_file()).sentences
    return [sentences[i % len(sentences)] for i in range(count)]


class SectionTimer:
    """Sums wall time per named section, with a device sync at both edges."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def add(self, name: str, start: float) -> None:
        """Count the time since `start` (perf_counter) to `name`, after a device sync."""
        self.sync()
        self.seconds[name] += time.perf_counter() - start

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.sync()
        start = time.perf_counter()
        yield
        self.sync()
        self.seconds[name] += time.perf_counter() - start


@contextlib.contextmanager
def timed_sections(
    model: ContrastiveModel, optimizer: torch.optim.Optimizer, timer: SectionTimer
) -> Iterator[None]:
    """Time the step's parts from outside: wrap the backbone, the momentum encoder, the objective and
    each of its terms, and the optimizer's step; the wrappers go when the step is done.

    The model's code stays free of timing. `backward` is timed from outside `optimizer_step`, whose
    time less the optimizer's is backward and clipping.
    """

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with timer(name):
                return function(*args, **kwargs)

        return wrapper

    patches: list[tuple[Any, str, str]] = [
        (model.backbone, "forward", "views_forward"),
        (type(model.objective), "__call__", "loss"),
    ]
    if model.aux is not None:  # InfoCSE's network: masking, frozen lower layers, extra layers, head
        patches.append((model.aux, "sum_and_count", "aux_network"))
    for term in model.objective.terms:  # each term's forward, named as the losses it reports
        patches.append((type(term), "__call__", TERM_SECTIONS.get(type(term).__name__, type(term).__name__)))
    if model.momentum is not None:
        patches.append((model.momentum, "forward", "momentum_forward"))
    saved = []
    for owner, attribute, name in patches:
        original = getattr(owner, attribute)
        saved.append((owner, attribute, original, attribute in vars(owner)))
        setattr(owner, attribute, timed(name, original))
    # the optimizer's step through its hooks: the schedule watches `step` itself
    started: list[float] = []

    def before(*_: Any) -> None:
        timer.sync()
        started.append(time.perf_counter())

    def after(*_: Any) -> None:
        timer.add("optimizer", started.pop())

    hooks = [optimizer.register_step_pre_hook(before), optimizer.register_step_post_hook(after)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        for owner, attribute, original, was_own in reversed(saved):
            if was_own:
                setattr(owner, attribute, original)
            else:
                delattr(owner, attribute)


# a term's class -> the name of its section (the loss it reports)
TERM_SECTIONS = {
    "InfoNCE": "info_nce",
    "AttentionMI": "ami",
    "AuxiliaryMLM": "aux_mlm",
    "Reconstruction": "reconstruction",
    "MatryoshkaInfoNCE": "info_nce@m",
    "MatryoshkaSimilarity": "similarity@m",
}


class Runner:
    """One method's model, optimizer and RNG; `step` runs and times one training step."""

    def __init__(
        self,
        name: str,
        base: Path,
        device: torch.device,
        dtype: torch.dtype | None,
        total: int,
        compile_mode: str = "off",
    ) -> None:
        method, attention = VARIANTS[name]
        self.config = TrainConfig(
            base_model=str(base),
            method=method,
            attn_implementation=attention,
            aux_mlm_weight=AUX_WEIGHTS.get(name),
        )
        torch.manual_seed(0)
        self.model = ContrastiveModel.from_folder(base, self.config).to(device)
        if self.model.aux is not None:  # untrained auxiliary weights: the same arithmetic as stage 1's
            self.model.aux.generator = torch.Generator(device=device).manual_seed(0)
        step_speed.compile_model(self.model, compile_mode, device)
        self.optimizer = make_optimizer(self.model, self.config)
        self.scheduler = make_scheduler(self.optimizer, total, self.config.warmup_ratio)
        self.generator = torch.Generator(device=device).manual_seed(0)
        self.device, self.dtype = device, dtype

    def block(self, batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
        """Seconds per step over `batches` run back to back: one device sync at each end, no reads."""
        timer = SectionTimer(self.device)
        self.model.train()
        timer.sync()
        start = time.perf_counter()
        for batch in batches:
            with torch.autocast(
                self.device.type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None
            ):
                out = self.model.step(batch, self.generator)
            optimizer_step(
                out.loss, self.model, self.optimizer, self.scheduler, None, self.config.max_grad_norm
            )
            self.model.after_step(out.keys)
        timer.sync()
        return {"step": (time.perf_counter() - start) / len(batches)}

    def step(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        timer = SectionTimer(self.device)
        self.model.train()
        timer.sync()
        start = time.perf_counter()
        with timed_sections(self.model, self.optimizer, timer):
            with torch.autocast(
                self.device.type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None
            ):
                out = self.model.step(batch, self.generator)
            with timer("backward"):  # less the optimizer's own section below
                optimizer_step(
                    out.loss, self.model, self.optimizer, self.scheduler, None, self.config.max_grad_norm
                )
        with timer("momentum_update"):
            self.model.after_step(out.keys)
        timer.sync()
        seconds = dict(timer.seconds)
        seconds["backward"] -= seconds.get("optimizer", 0.0)
        return {"step": time.perf_counter() - start, **seconds}


def make_batches(
    base: Path, batch_size: int, length: int, count: int, device: torch.device, fixed: bool = False
) -> list[dict]:
    """`count` batches, padded to their longest sentence, or to `length` with `fixed` shapes."""
    batcher = TokenBatcher(base, length)
    sentences = training_sentences(batch_size * count)
    encodings = batcher.tokenizer.encode_batch(sentences)
    rows = np.arange(len(sentences)).reshape(count, batch_size)
    return [pad_batch(encodings, r, batcher.pad_id, device, length if fixed else None) for r in rows]


def peak_memory_mb(
    name: str, args: argparse.Namespace, base: Path, device: torch.device, dtype: torch.dtype | None
) -> float:
    """Peak memory of two steps of one method alone: CUDA allocations, or a CPU subprocess's RSS."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        runner = Runner(name, base, device, dtype, total=2)
        for batch in make_batches(base, args.batch_size, args.seq_len, 2, device):
            runner.step(batch)
        peak = torch.cuda.max_memory_allocated(device) / 2**20
        del runner
        return round(peak, 1)
    command = [
        sys.executable,
        __file__,
        "--memory-of",
        name,
        "--model-size",
        args.model_size,
        "--device",
        "cpu",
        "--batch-size",
        str(args.batch_size),
        "--seq-len",
        str(args.seq_len),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per method")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per method first")
    parser.add_argument(
        "--dtype", choices=("fp32", "bf16"), default="fp32", help="autocast dtype (bf16 on GPU)"
    )
    parser.add_argument(
        "--model-size", choices=("minilm", "minilm-random", "bert-base", "tiny"), default="minilm"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument(
        "--methods", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    parser.add_argument("--fixed-shapes", action="store_true", help="pad every batch to --seq-len")
    parser.add_argument(
        "--compile", default="off", choices=COMPILE_MODES, help="torch.compile mode (CUDA; auto)"
    )
    parser.add_argument("--whole-step", action="store_true", help="time blocks of steps, no section syncs")
    parser.add_argument("--block", type=int, default=5, help="steps per timed block with --whole-step")
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)  # internal: the CPU memory subprocess
    args = parser.parse_args()

    from transformers.utils import logging as hf_logging

    if args.threads:
        torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    device = torch_device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else None
    with tempfile.TemporaryDirectory() as tmp:
        base = base_model(args.model_size, Path(tmp))
        if args.memory_of:
            runner = Runner(args.memory_of, base, device, dtype, total=2)
            for batch in make_batches(base, args.batch_size, args.seq_len, 2, device):
                runner.step(batch)
            print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # KiB on Linux
            return
        names = [n.strip() for n in args.methods.split(",") if n.strip()]
        memory = {} if args.no_memory else {n: peak_memory_mb(n, args, base, device, dtype) for n in names}
        total = args.warmup + args.steps
        batches = make_batches(base, args.batch_size, args.seq_len, total, device, args.fixed_shapes)
        runners = {n: Runner(n, base, device, dtype, total, args.compile) for n in names}
        samples: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for runner in runners.values():  # the warm-up (and the compile) untimed
            for batch in batches[: args.warmup]:
                runner.step(batch)
        size = args.block if args.whole_step else 1
        for i in range(args.warmup, total, size):
            part = batches[i : i + size]
            for name, runner in runners.items():  # round-robin: machine load drifts hit every method
                samples[name].append(runner.block(part) if args.whole_step else runner.step(part[0]))

    results = {}
    for name in names:
        keys = sorted({k for s in samples[name] for k in s})
        median = {k: statistics.median(s.get(k, 0.0) for s in samples[name]) for k in keys}
        results[name] = {
            "median_step_s": round(median.pop("step"), 4),
            "median_section_s": {k: round(v, 4) for k, v in median.items()},
            "peak_memory_mb": memory.get(name),
        }
    report = {
        "benchmark": "train_step",
        "date": time.strftime("%Y-%m-%d"),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "model": args.model_size,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "dtype": args.dtype,
        "steps": args.steps,
        "warmup": args.warmup,
        "fixed_shapes": args.fixed_shapes,
        "compile": args.compile,
        "whole_step": args.whole_step,
        "methods": results,
    }
    if "micse" in results and "simcse" in results:
        micse = results["micse"]
        report["micse_over_simcse"] = round(micse["median_step_s"] / results["simcse"]["median_step_s"], 3)
        if "simcse-eager" in results:
            report["micse_over_simcse_eager"] = round(
                micse["median_step_s"] / results["simcse-eager"]["median_step_s"], 3
            )
        report["micse_share_ami_forward"] = round(
            micse["median_section_s"].get("ami", 0) / micse["median_step_s"], 4
        )
        momentum = sum(v for k, v in micse["median_section_s"].items() if k.startswith("momentum"))
        report["micse_share_momentum"] = round(momentum / micse["median_step_s"], 4)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
