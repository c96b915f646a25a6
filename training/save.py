"""Writing the trained model folder: Hugging Face weights plus sentence-transformers' modules.

The folder loads with `SentenceTransformer(DIR)`, `embedkit.TorchEncoder(DIR)` and
`transformers.AutoModel.from_pretrained(DIR)`:

- `config.json`, `model.safetensors` (the backbone only: the MLP head is training-only, as in
  SimCSE), the base model's tokenizer files;
- `modules.json` (Transformer, Pooling, Normalize, like all-MiniLM-L6-v2, so vectors are unit
  length), `1_Pooling/config.json`, `sentence_bert_config.json`, `config_sentence_transformers.json`;
  after Matryoshka training with its rotation (`training.rotation`), a Dense module before the
  Normalize, `2_Dense/` (no bias, identity activation, `model.safetensors`);
- `embedkit.json`: how the model was made, and its `fingerprint` (and, after Matryoshka training,
  the prefix sizes it was trained at: `model_folder.MATRYOSHKA_DIMS`).

The folder is written atomically (`atomic_dir`): it replaces `out_dir` as a whole, so a run
folder with checkpoints becomes a clean model folder in one rename. `train_metadata` is what
`embedkit.json` records of a train run; `keeps_base` the rule that gives the base model back.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_file
from torch import nn

from embedkit import __version__
from embedkit.encode.identity import TOKENIZER_FILES  # those present in the base folder are copied
from embedkit.encode.model_folder import MATRYOSHKA_DIMS, fingerprint_files, read_json
from embedkit.encode.st_modules import DENSE_WEIGHTS, dense_weight_files
from embedkit.storage.atomic import atomic_dir

_ST_MODELS = "sentence_transformers.models"
DENSE_CONFIG = "2_Dense/config.json"
IDENTITY = "torch.nn.modules.linear.Identity"  # sentence-transformers' name for no activation

if TYPE_CHECKING:
    from embedkit.evaluation.evaluator import Evaluator
    from embedkit.training.checkpoint import TrainState
    from embedkit.training.config import TrainConfig
    from embedkit.training.views import TrainingExamples


def sentence_transformers_files(
    pooling: str, dim: int, max_seq_length: int, do_lower_case: bool = False, dense: bool = False
) -> dict[str, Any]:
    """The JSON files sentence-transformers reads, by relative path; `dense`: a (dim, dim) Dense
    module without bias or activation after the pooling (its weights are written apart)."""
    kinds = ["Transformer", "Pooling", *(["Dense"] if dense else []), "Normalize"]
    modules = [
        {"idx": i, "name": str(i), "path": f"{i}_{kind}" if i else "", "type": f"{_ST_MODELS}.{kind}"}
        for i, kind in enumerate(kinds)
    ]
    pooling_config = {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    dense_config = {"in_features": dim, "out_features": dim, "bias": False, "activation_function": IDENTITY}
    return {
        "modules.json": modules,
        **({DENSE_CONFIG: dense_config} if dense else {}),
        "1_Pooling/config.json": pooling_config,
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case},
        "config_sentence_transformers.json": {
            "__version__": {"embedkit": __version__},
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    }


def write_model_folder(
    out_dir: Path,
    backbone: nn.Module,
    base_path: Path,
    pooling: str,
    max_seq_length: int,
    metadata: dict[str, Any],
    extra_files: dict[str, Path] | None = None,
    dense: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Write the model folder atomically over `out_dir`; return the `embedkit.json` written.

    `dense`: the (D, D) weight of a Dense module after the pooling (Matryoshka's rotation), or None.

    `max_seq_length` is the inference length (the base model's, e.g. 256), not the training
    truncation. `metadata` is stored in `embedkit.json` with the folder's runtime facts and the
    weights' fingerprint; `extra_files` (name -> source) are copied in, e.g. `metrics.jsonl`.
    """
    dim = int(backbone.config.hidden_size)
    with atomic_dir(out_dir) as tmp:
        backbone.save_pretrained(str(tmp))
        for name in TOKENIZER_FILES:
            if (base_path / name).is_file():
                shutil.copy2(base_path / name, tmp / name)
        lower = _base_lower_case(base_path)
        files = sentence_transformers_files(pooling, dim, max_seq_length, lower, dense is not None)
        for name, data in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        if dense is not None:  # sentence-transformers' Dense stores its nn.Linear as `linear`
            weight = dense.detach().float().cpu().contiguous()
            save_file({"linear.weight": weight}, str(tmp / Path(DENSE_CONFIG).parent / DENSE_WEIGHTS))
        for name, source in (extra_files or {}).items():
            if source.is_file():
                shutil.copy2(source, tmp / name)
        info = {
            "embedkit_version": __version__,
            "kind": "torch",
            "pooling": pooling,
            "normalize": True,
            "dim": dim,
            "max_seq_length": max_seq_length,
            "model_type": str(backbone.config.model_type),
            **metadata,
            "fingerprint": fingerprint_files([tmp / "model.safetensors", *dense_weight_files(tmp)]),
        }
        (tmp / "embedkit.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def _base_lower_case(base_path: Path) -> bool:
    """sentence_bert_config's do_lower_case of the base (False for all-MiniLM-L6-v2)."""
    path = base_path / "sentence_bert_config.json"
    return bool(read_json(path).get("do_lower_case", False)) if path.is_file() else False


def beats_base(best: float | None, base: float | None) -> bool:
    """Whether a trained checkpoint scored above the untrained base (True without a base score)."""
    return best is not None and (base is None or best > base)


def keeps_base(config: TrainConfig, state: TrainState) -> bool:
    """Whether the run gives the base model back: selecting on judged queries, nothing beat it."""
    return bool(config.dev_retrieval) and not beats_base(state.best_score, state.base_score)


def train_metadata(
    config: TrainConfig,
    meta: dict[str, Any],
    state: TrainState,
    corpus: str | Path | Sequence[str],
    sample: TrainingExamples,
    base_path: Path,
    dev: Evaluator | None,
) -> dict[str, Any]:
    """What `embedkit.json` records of a train run: method, settings, data, base model and dev scores.

    `meta` is what its checkpoints record it was made from (settings, fingerprints, stage 1)."""
    source = str(corpus) if isinstance(corpus, (str, Path)) else "a list of texts"
    # the sizes its vectors may be cut to; a run that gave the base back was not trained at them
    dims = [] if keeps_base(config, state) else list(config.matryoshka[0])
    return {
        "method": config.method,
        **({MATRYOSHKA_DIMS: dims} if dims else {}),
        "training": {
            **meta,
            "steps": state.step,
            "seconds": round(state.seconds, 3),
            "final_losses": state.last_losses,
        },
        "data": {"source": source, "fingerprint": sample.fingerprint, "stats": asdict(sample.stats)},
        "base_model": {"path": str(base_path), "fingerprint": meta["base_fingerprint"]},
        "dev": None
        if dev is None
        else {
            **dev.describe(),
            "base_score": state.base_score,
            "best_score": state.best_score,
            "best_step": state.best_step,
            "kept_base": keeps_base(config, state),
        },
    }
