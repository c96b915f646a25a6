"""Token vectors to the sentence vector, in torch: pooling, Dense, Normalize.

Runs what `embedkit.encode.st_modules` read from a folder, with sentence-transformers' math
(`sentence_transformer/modules/pooling.py`, `base/modules/dense.py`, `normalize.py` in 6.2).
The same module serves the torch encoder and is traced into the ONNX graph, so it uses only
ops the tracer records as plain ONNX. embedkit pads on the right (`encode.batching`), so a
row's first token is position 0 and its last is at length - 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from embedkit.encode.st_modules import NORMALIZE, DenseLayer, SentenceModules, parse_pooling_name
from embedkit.errors import InputError


def pool(
    token_embeddings: torch.Tensor, attention_mask: torch.Tensor, modes: str | Sequence[str]
) -> torch.Tensor:
    """Sentence vectors (B, len(modes) x H) from token vectors (B, T, H): each mode, concatenated.

    `modes`: a pooling name ("mean", "cls+mean") or its modes. A mean is over unmasked tokens;
    mean_sqrt_len_tokens divides the sum by sqrt(length) instead; weightedmean weighs position t
    (from 1) by t; max takes the per-dimension maximum; lasttoken the last unmasked token.
    """
    names = parse_pooling_name(modes) if isinstance(modes, str) else tuple(modes)
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)  # (B, T, 1)
    lengths = mask.sum(1).clamp(min=1e-9)  # (B, 1)
    out = []
    for mode in names:
        if mode == "cls":
            out.append(token_embeddings[:, 0])
        elif mode == "max":
            out.append(token_embeddings.masked_fill(mask == 0, float("-inf")).max(dim=1).values)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total = (token_embeddings * mask).sum(1)
            out.append(total / (lengths if mode == "mean" else lengths.sqrt()))
        elif mode == "weightedmean":
            positions = torch.cumsum(torch.ones_like(mask), dim=1)  # (B, T, 1): 1, 2, ..., T
            weights = mask * positions
            out.append((token_embeddings * weights).sum(1) / weights.sum(1).clamp(min=1e-9))
        elif mode == "lasttoken":
            last = (attention_mask.sum(1) - 1).clamp(min=0).long()  # (B,)
            index = last.view(-1, 1, 1).expand(-1, 1, token_embeddings.shape[-1])
            out.append(torch.gather(token_embeddings * mask, 1, index).squeeze(1))
        else:
            raise InputError(f"unknown pooling {mode!r}")
    return out[0] if len(out) == 1 else torch.cat(out, dim=-1)


def l2_normalize(vectors: torch.Tensor) -> torch.Tensor:
    """As torch.nn.functional.normalize (same clamp), written out so the tracer emits plain ops."""
    normalized: torch.Tensor = vectors / vectors.norm(p=2, dim=-1, keepdim=True).clamp(min=1e-12)
    return normalized


class Dense(torch.nn.Module):
    """sentence-transformers' Dense: activation(linear(x)), plus the residual when it has one."""

    def __init__(self, layer: DenseLayer) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(layer.in_features, layer.out_features, bias=layer.bias)
        self.activation = getattr(torch.nn, layer.activation)()
        self.residual = layer.residual
        if layer.residual and layer.in_features != layer.out_features:
            self.residual_linear = torch.nn.Linear(layer.in_features, layer.out_features, bias=False)
        self._load(layer)

    def _load(self, layer: DenseLayer) -> None:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        file = layer.folder / "model.safetensors"
        try:
            stored = load_file(str(file))
        except (OSError, SafetensorError) as exc:
            raise InputError(f"cannot read {file}: {exc}") from None
        # sentence-transformers names the projection of the residual `residual`; here the flag is.
        state = {k.replace("residual.", "residual_linear."): v for k, v in stored.items()}
        expected = self.state_dict()
        missing = sorted(set(expected) - set(state))
        wrong = [k for k in expected if k in state and state[k].shape != expected[k].shape]
        if missing or wrong:
            what = f"no {missing[0]}" if missing else f"{wrong[0]} of shape {tuple(state[wrong[0]].shape)}"
            raise InputError(f"{file} has {what} for a Dense {layer.in_features} -> {layer.out_features}")
        self.load_state_dict({k: state[k] for k in expected})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.activation(self.linear(x))  # a torch.nn activation, named by the folder
        if self.residual:
            out = out + (self.residual_linear(x) if hasattr(self, "residual_linear") else x)
        return out


class SentenceHead(torch.nn.Module):
    """Pooling, then the Dense and inner Normalize steps, then (if asked) the final L2 norm."""

    def __init__(self, modules: SentenceModules) -> None:
        super().__init__()
        self.pooling = modules.pooling
        self.steps = torch.nn.ModuleList(
            [Dense(step) if isinstance(step, DenseLayer) else _Normalize() for step in modules.steps]
        )
        assert all(isinstance(s, DenseLayer) or s == NORMALIZE for s in modules.steps)  # st_modules' contract

    def forward(
        self, token_embeddings: torch.Tensor, attention_mask: torch.Tensor, normalize: bool
    ) -> torch.Tensor:
        vectors = pool(token_embeddings, attention_mask, self.pooling).float()  # (B, D)
        for step in self.steps:
            vectors = step(vectors)
        return l2_normalize(vectors) if normalize else vectors


class _Normalize(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return l2_normalize(x)
