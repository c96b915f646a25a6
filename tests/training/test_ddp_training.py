"""Training on several ranks (DistributedDataParallel, CPU with gloo) against the single-process run.

The references are independent of the distributed code: a single-process `train` in this process,
and for the gradient bookkeeping the loss of the whole batch computed at once. Dropout is off
(a tiny BERT with dropout 0, momentum dropout 0), so that a run is a deterministic function of the
data and both sides draw the same numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from embedkit.training import ami, losses
from embedkit.training.config import TrainConfig
from embedkit.training.distributed import BatchShard
from embedkit.training.trainer import train

pytestmark = pytest.mark.usefixtures("one_thread")

WORKER = Path(__file__).with_name("ddp_worker.py")
ROOT = Path(__file__).resolve().parents[2]
# 11 sentences in batches of 4: steps of 4, 4 and 3 rows, the last split 2 + 1 over two ranks.
CORPUS = [" ".join(["wing flow"] * n) + f" {n}" for n in range(1, 12)]


def config(base: Path, method: str, **changes: object) -> TrainConfig:
    settings = {
        "base_model": str(base),
        "method": method,
        "batch_size": 4,
        "epochs": 1,
        "max_steps": 3,
        "queue_size": 6,
        "momentum_dropout": 0.0,
        "learning_rate": 1e-4,
        "warmup_ratio": 0.0,
        "save_steps": 3,
        # no clipping: AdamW's moments then hold the gradients themselves, scale included
        "max_grad_norm": 0.0,
        "device": "cpu",
        "dist_timeout": 60.0,
    }
    return TrainConfig(**{**settings, **changes})  # type: ignore[arg-type]


def torchrun(spec: dict, folder: Path, nproc: int = 2, timeout: float = 150) -> subprocess.CompletedProcess:
    """`ddp_worker.py` on `nproc` CPU ranks; `--standalone` picks a free port. InfoCSE's stage 1 is
    cached in `folder/cache-ddp`."""
    path = folder / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "EMBEDKIT_CACHE_DIR": str(folder / "cache-ddp")}
    return subprocess.run(
        [*command, str(WORKER), str(path)], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def single_run(base: Path, cfg: TrainConfig, out: Path, keep: Path, keep_step: int) -> None:
    """The reference: one process, keeping the checkpoint of `keep_step` as the worker does."""
    import shutil

    def on_step(step: int, _terms: dict[str, float]) -> None:
        if step == keep_step:
            shutil.copytree(out / "checkpoints" / f"step-{step:06d}", keep)

    train(CORPUS, out, cfg, progress=False, on_step=on_step)


def loss_records(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if k not in ("lr", "seconds", "sentences_per_s")}
        for r in records
        if "loss" in r
    ]


def dev_records(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if "dev_spearman_cosine" in r]


def assert_same_tensors(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=0, atol=1e-5, msg=name)


def optimizer_moments(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, weights_only=True)["state"]
    return {f"{i}.{k}": v for i, s in state.items() for k, v in s.items() if k.startswith("exp_avg")}


# --- the bookkeeping, with the ranks simulated in one process ------------------------------------------


def test_a_shard_draws_its_rows_of_the_single_process_draw() -> None:
    def uniform(seed: int):
        generator = torch.Generator().manual_seed(seed)
        return lambda shape: torch.rand(shape, generator=generator)

    whole = uniform(0)((7, 3))
    doubled_whole = uniform(0)((14, 3))
    sizes = (4, 3)
    parts = [BatchShard(r, sizes).draw(uniform(0), (sizes[r], 3)) for r in range(2)]
    torch.testing.assert_close(torch.cat(parts), whole, rtol=0, atol=0)
    # the doubled batch [x; x]: each half is the rank's rows of the global half
    second = BatchShard(1, sizes).doubled().draw(uniform(0), (6, 3))
    torch.testing.assert_close(second, torch.cat([doubled_whole[4:7], doubled_whole[11:14]]), rtol=0, atol=0)
    assert BatchShard.whole(5).draw(uniform(0), (5, 3)).shape == (5, 3)


def test_ami_shares_add_up_to_the_single_process_loss_and_gradient() -> None:
    """Each rank's share (its sum over the global count) sums to ami_loss; so do the gradients."""
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 4, 5, 5, requires_grad=True)  # (views, B, H, T, T)
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[4:, 3:] = 0

    def maps(x: torch.Tensor) -> list[torch.Tensor]:
        return [x.softmax(-1), (2 * x).softmax(-1)]  # two "layers"

    full = ami.ami_loss(
        maps(logits[0]),
        maps(logits[1]),
        mask,
        weight=0.1,
        num_samples=20,
        generator=torch.Generator().manual_seed(1),
    )
    (expected,) = torch.autograd.grad(full, logits)

    sizes = (3, 3)
    sums, counts = [], []
    for rank in range(2):
        rows = slice(rank * 3, rank * 3 + 3)
        total, count = ami.ami_sum_and_count(
            maps(logits[0, rows]),
            maps(logits[1, rows]),
            mask[rows],
            weight=0.1,
            num_samples=20,
            generator=torch.Generator().manual_seed(1),  # the same stream on every rank
            shard=BatchShard(rank, sizes),
        )
        sums.append(total)
        counts.append(count)
    shares = [s / sum(counts).clamp(min=1.0) for s in sums]
    torch.testing.assert_close(sum(shares), full)
    grads = [torch.autograd.grad(share, logits)[0] for share in shares]
    torch.testing.assert_close(sum(grads), expected)


def test_gathered_info_nce_times_the_world_size_gives_the_batch_gradient() -> None:
    """With the local rows kept in place (others detached), each rank's gradient is partial; DDP
    averages them, so N x the loss makes the average equal the single-process gradient."""
    torch.manual_seed(0)
    weight = torch.randn(8, 8, requires_grad=True)
    x1, x2 = torch.randn(6, 8), torch.randn(6, 8)
    queue = torch.randn(5, 8)
    full = losses.info_nce(x1 @ weight, x2 @ weight, queue=queue)
    (expected,) = torch.autograd.grad(full, weight)

    world = 3
    grads = []
    for rank in range(world):
        rows = slice(2 * rank, 2 * rank + 2)
        e1 = (x1 @ weight).detach()
        e2 = (x2 @ weight).detach()
        e1 = torch.cat([e1[: rows.start], x1[rows] @ weight, e1[rows.stop :]])
        e2 = torch.cat([e2[: rows.start], x2[rows] @ weight, e2[rows.stop :]])
        loss = world * losses.info_nce(e1, e2, queue=queue)
        torch.testing.assert_close(loss / world, full)
        grads.append(torch.autograd.grad(loss, weight)[0])
    torch.testing.assert_close(sum(grads) / world, expected)  # DDP's average


# --- real ranks -------------------------------------------------------------------------------------------


def test_two_ranks_train_as_one_process(
    tmp_path: Path, still_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """simcse; micse with AMI, the queue and a dev set (rank 0 evaluates); infocse with its stage 1
    and masking: the same loss terms every step, dev scores, weights (backbone, head, momentum
    encoder, auxiliary network), optimizer moments, queue and sampler states after 3 steps, the
    same model. The last batch (3 rows) splits 2 + 1."""
    monkeypatch.setenv("EMBEDKIT_CACHE_DIR", str(tmp_path / "cache-one"))  # stage 1 trained apart
    dev = tmp_path / "dev.tsv"
    pairs = [(CORPUS[i], CORPUS[(i * 5 + 1) % 11], float(i % 5)) for i in range(11)]
    dev.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs))
    methods = {
        "simcse": {},
        "micse": {"reconstruction_weight": 0.1, "dev_sts": str(dev), "eval_steps": 2},
        "infocse": {"aux_stage1_steps": 3, "aux_mlm_weight": 0.1},
    }
    runs = []
    for method, changes in methods.items():
        cfg = config(still_bert, method, **changes)
        runs.append(
            {
                "out": str(tmp_path / f"ddp-{method}"),
                "config": cfg.to_dict(),
                "keep_step": 3,
                "keep": str(tmp_path / f"ddp-{method}-step3"),
            }
        )
    done = torchrun({"corpus": CORPUS, "runs": runs}, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    for method, changes in methods.items():
        single, ddp = tmp_path / f"one-{method}", tmp_path / f"ddp-{method}"
        single_run(
            still_bert, config(still_bert, method, **changes), single, tmp_path / f"one-{method}-step3", 3
        )
        expected, actual = loss_records(single), loss_records(ddp)
        assert [r["step"] for r in actual] == [1, 2, 3]
        for got, want in zip(actual, expected, strict=True):
            assert got.keys() == want.keys()
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6), method
        if method == "micse":
            assert "ami" in want and [r["queue"] for r in actual] == [4, 6, 6]
            dev_scores = [dev_records(out) for out in (ddp, single)]
            assert [r["step"] for r in dev_scores[0]] == [0, 2, 3]
            scores = [[r["dev_spearman_cosine"] for r in records] for records in dev_scores]
            assert scores[0] == pytest.approx(scores[1], abs=1e-4)
        if method == "infocse":
            assert "aux_mlm" in want

        kept_single, kept_ddp = tmp_path / f"one-{method}-step3", tmp_path / f"ddp-{method}-step3"
        # every weight: backbone, MLP head and (micse) the momentum encoder
        assert_same_tensors(
            load_file(kept_ddp / "model.safetensors"), load_file(kept_single / "model.safetensors")
        )
        assert_same_tensors(load_file(ddp / "model.safetensors"), load_file(single / "model.safetensors"))
        # AdamW's moments hold the gradients themselves, so a wrong scale of the loss shows here (the
        # weights would not show it: Adam's step is invariant to it); float noise relative to each
        # tensor's scale, and a floor for the gradients that are round-off alone (softmax ignores
        # the key biases: theirs are ~1e-12).
        moments = [optimizer_moments(k / "optimizer.pt") for k in (kept_ddp, kept_single)]
        assert moments[0].keys() == moments[1].keys()
        for name, tensor in moments[1].items():
            atol = max(1e-4 * tensor.abs().max().item(), 1e-10)
            torch.testing.assert_close(moments[0][name], tensor, rtol=1e-3, atol=atol, msg=name)
        if method == "micse":
            assert_same_tensors(
                load_file(kept_ddp / "queue.safetensors"), load_file(kept_single / "queue.safetensors")
            )
            state = [json.loads((k / "state.json").read_text())["queue"] for k in (kept_ddp, kept_single)]
            assert state[0] == state[1] and state[0]["filled"] == 6
            rng = [load_file(k / "rng.safetensors") for k in (kept_ddp, kept_single)]
            assert torch.equal(rng[0]["ami_sampler"], rng[1]["ami_sampler"])  # AMI drew what one process drew
            assert {"rank0_torch_cpu", "rank1_torch_cpu"} <= rng[0].keys()
        if method == "infocse":  # the masking drew what one process drew
            rng = [load_file(k / "rng.safetensors") for k in (kept_ddp, kept_single)]
            assert torch.equal(rng[0]["aux_masking"], rng[1]["aux_masking"])


def test_two_ranks_train_matryoshka_as_one_process(tmp_path: Path, still_bert: Path) -> None:
    """miCSE with Matryoshka: rank 0 fits the rotation alone, the others receive it with the weights;
    the prefix terms, the (Q, 2D) queue, the weights and the saved Dense module match one process."""
    cfg = config(still_bert, "micse", matryoshka_dims=(32, 16, 8), matryoshka_weights=(1.0, 1.0, 1.0))
    spec = {
        "out": str(tmp_path / "ddp"),
        "config": cfg.to_dict(),
        "keep_step": 3,
        "keep": str(tmp_path / "ddp-3"),
    }
    done = torchrun({"corpus": CORPUS, "runs": [spec]}, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    single_run(still_bert, cfg, tmp_path / "one", tmp_path / "one-3", 3)
    expected, actual = loss_records(tmp_path / "one"), loss_records(tmp_path / "ddp")
    assert "info_nce@8" in expected[0] and [r["step"] for r in actual] == [1, 2, 3]
    for got, want in zip(actual, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for name in ("ddp-3/model.safetensors", "ddp-3/queue.safetensors", "ddp/2_Dense/model.safetensors"):
        reference = name.replace("ddp", "one")
        assert_same_tensors(load_file(tmp_path / name), load_file(tmp_path / reference))
    weight = load_file(tmp_path / "ddp" / "2_Dense" / "model.safetensors")["linear.weight"]
    assert not torch.equal(weight, torch.eye(32))  # fitted, not the identity it starts as


def test_a_killed_rank_fails_the_job_and_resume_finishes_it_on_one_process(
    tmp_path: Path, still_bert: Path
) -> None:
    """Rank 1 is killed after step 3 (checkpoint at step 2): torchrun fails promptly, not hanging; the
    DDP checkpoint then resumes on a single process and ends where an uninterrupted run ends."""
    cfg = config(still_bert, "micse", max_steps=None, epochs=2, save_steps=2)  # 6 steps
    out = tmp_path / "run"
    spec = {
        "corpus": CORPUS,
        "runs": [{"out": str(out), "config": cfg.to_dict(), "kill_rank": 1, "kill_step": 3}],
    }
    done = torchrun(spec, tmp_path, timeout=120)
    assert done.returncode != 0
    assert "lost contact with the other ranks" in done.stderr or "SIGKILL" in done.stderr
    assert (out / "checkpoints" / "step-000002").is_dir()
    assert not (out / "model.safetensors").exists()

    resumed = train(CORPUS, out, cfg, progress=False, resume=True)
    whole = train(CORPUS, tmp_path / "whole", cfg, progress=False)
    assert resumed.steps == whole.steps == 6
    assert resumed.final_losses == pytest.approx(whole.final_losses, rel=1e-5, abs=1e-6)
    assert_same_tensors(
        load_file(out / "model.safetensors"), load_file(tmp_path / "whole" / "model.safetensors")
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["world_size"] for r in records if r.get("event") in ("start", "resume")] == [2, 1]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_a_batch_that_does_not_divide_by_the_ranks_is_refused(
    tmp_path: Path, still_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embedkit.errors import InputError
    from embedkit.training import distributed

    # rank 0 of two: the check comes before any collective, so no second process is needed
    monkeypatch.setattr(distributed, "setup", lambda *_: distributed.Context(0, 2))
    with pytest.raises(InputError, match="--batch-size 5 does not divide by the 2 ranks"):
        train(CORPUS, tmp_path / "out", config(still_bert, "simcse", batch_size=5), progress=False)
    assert not (tmp_path / "out").exists()
