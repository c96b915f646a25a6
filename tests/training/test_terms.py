"""A method is a list of weighted terms: which terms each method and ablation of the CLI sums, what
the terms read, and a model that holds no per-method branch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from embedkit.training import losses
from embedkit.training.config import TrainConfig
from embedkit.training.distributed import BatchShard
from embedkit.training.terms import (
    AttentionMI,
    AuxiliaryMLM,
    InfoNCE,
    MatryoshkaInfoNCE,
    MatryoshkaSimilarity,
    Objective,
    Reconstruction,
    StepTensors,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("settings", "terms", "momentum"),
    [
        ({"method": "simcse"}, [InfoNCE()], False),
        ({"method": "ami-simcse"}, [InfoNCE(), AttentionMI()], False),
        ({"method": "moco-simcse"}, [InfoNCE()], True),
        ({"method": "micse"}, [InfoNCE(), AttentionMI()], True),
        ({"method": "micse", "views": "crop"}, [InfoNCE()], True),  # AMI needs dropout views
        ({"method": "infocse"}, [InfoNCE(), AuxiliaryMLM(1e-5)], False),
        (
            {"method": "micse", "reconstruction_weight": 0.5, "aux_mlm_weight": 0.1, "ami_weight": 0.01},
            [InfoNCE(), AttentionMI(0.01), Reconstruction(0.5), AuxiliaryMLM(0.1)],
            True,
        ),
        (
            {"method": "simcse", "matryoshka_dims": (8, 32, 16), "matryoshka_weights": (0.5, 2.0, 0.0)},
            [InfoNCE(2.0), MatryoshkaInfoNCE((8,), (0.5,))],
            False,
        ),
        (
            {"method": "simcse", "matryoshka_dims": (32, 16), "matryoshka_similarity": 0.1},
            [InfoNCE(1.0), MatryoshkaSimilarity((32, 16), 0.1)],
            False,
        ),
        ({"method": "simcse", "matryoshka_dims": (32, 16)}, [InfoNCE(1.0)], False),  # no prefix trained
    ],
)
def test_each_method_is_its_list_of_weighted_terms(settings: dict, terms: list, momentum: bool) -> None:
    objective = Objective.from_config(TrainConfig(**settings).validate())
    assert list(objective.terms) == terms
    assert objective.momentum is momentum


def test_the_objective_sums_its_terms_by_name_and_says_what_they_read() -> None:
    torch.manual_seed(0)
    e1, e2, queued = torch.randn(4, 8), torch.randn(4, 8), torch.randn(6, 8)
    objective = Objective((InfoNCE(0.5, temperature=0.1), Reconstruction(0.25)), momentum=True)
    values = objective(StepTensors(e1, e2, BatchShard.whole(4), queued=queued))
    assert list(values) == ["info_nce", "reconstruction"]
    torch.testing.assert_close(values["info_nce"], 0.5 * losses.info_nce(e1, e2, queued, temperature=0.1))
    expected = 0.25 * ((e1 - e2) ** 2).sum(-1).mean()
    torch.testing.assert_close(values["reconstruction"], expected)
    assert objective.reads("queued") and not objective.reads("maps")
    assert objective.shares(values) == []
    assert Objective((InfoNCE(), AttentionMI())).shares({"info_nce": e1, "ami": e1}) == ["ami"]


def test_terms_say_what_they_miss() -> None:
    x = StepTensors(torch.randn(4, 8), torch.randn(4, 8), BatchShard.whole(4))
    with pytest.raises(ValueError, match="AMI needs the attention maps"):
        AttentionMI()(x)
    with pytest.raises(ValueError, match="prefix terms need the views as saved"):
        MatryoshkaInfoNCE((4,), (1.0,))(x)


def test_the_model_holds_no_per_method_branch() -> None:
    source = (ROOT / "training" / "model.py").read_text(encoding="utf-8")
    per_method = r"config\.(method|uses_\w+|trains_prefixes|\w+_weight|matryoshka\w*|ami_samples)\b"
    assert not re.findall(per_method, source)
