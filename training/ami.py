"""Attention mutual information (AMI): miCSE's attention-level term (Klein & Nabi, ACL 2023, Sec. 2.2).

The two dropout views of a sentence should attend alike. miCSE measures this per *slice*: a layer
and a pair of adjacent heads. For each (sentence, slice) it samples attention entries, treats the
attention weights as log-normal (Algorithm 1), and estimates the mutual information between the two
views from the Pearson correlation rho of the log-weights, ``I = -1/2 log(1 - rho^2)`` (Eq. 3-4), the
mutual information of a bivariate Gaussian. The loss is ``-lambda`` times the mean of I (Eq. 5).

Conventions shared by every function here:

* Slice order: layer-major, then head pair: slice ``s = j * P + p`` is layer ``layers[j]`` and heads
  ``(2p, 2p + 1)``, with ``P = H // 2`` pairs per layer. An odd head count drops the last head, since
  the pairs do not overlap.
* Entry order in a slice: ``n = h * T * T + q * T + k`` for head ``h`` in {0, 1} of the pair, query
  ``q`` and key ``k``: ``N = 2 * T * T`` entries per slice.
* An entry is valid when its query and its key are real tokens (``attention_mask``) and its weight is
  > 0 in both views: attention dropout zeroes entries, and log(0) has no Gaussian.

Memory is linear in B * S * T * T (one bool and one float per candidate entry); no slice-by-slice
correlation matrix is formed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from embedkit.training.distributed import BatchShard

# rho^2 is clamped to at most 1 - 1e-6 so that identical views give a finite I (at most
# -1/2 log(1e-6) ~= 6.9 nats) and a finite gradient instead of log(0).
_MAX_RHO_SQUARED = 1.0 - 1e-6
# Below this product of the two centred sums of squares rho is taken as 0: a slice whose sampled
# log-weights are constant in one view carries no correlation, and sqrt(0) has no gradient.
_MIN_VARIANCE_PRODUCT = 1e-12
# A correlation needs at least three points to be more than a line through two of them.
_MIN_SAMPLES = 3


def ami_layers(num_layers: int) -> tuple[int, ...]:
    """0-based indices of the layers whose attention enters AMI by default: the upper-middle layers.

    For a 12-layer BERT-base these are 7, 8, 9, 10 (1-based 8-11): the paper's four layers, each cut
    into H/2 head-pair chunks, as the authors' runs select with ``--min_layer 7 --max_layer 11``.
    Other depths keep the same relative position: ``start = floor(L * 7/12 + 1/2)``,
    ``stop = floor(L * 11/12 + 1/2)`` (half-open), and at least one layer. A 6-layer MiniLM gets
    (4, 5); a 4-layer model (2, 3).
    """
    if num_layers < 1:
        raise ValueError(f"a model needs at least one layer for AMI, got {num_layers}")
    # Integer arithmetic for floor(L * a / 12 + 1/2): no float rounding at the .5 boundaries.
    start = (num_layers * 14 + 12) // 24
    stop = (num_layers * 22 + 12) // 24
    start = min(start, num_layers - 1)
    stop = min(max(stop, start + 1), num_layers)
    return tuple(range(start, stop))


def _check_inputs(
    attn1: Sequence[torch.Tensor],
    attn2: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    layers: Sequence[int] | None,
) -> tuple[int, ...]:
    """The layers to use, after checking that both views and the mask have matching shapes."""
    if len(attn1) == 0 or len(attn2) == 0:
        raise ValueError(
            "no attention maps: load the model with attn_implementation='eager' (SDPA returns none) "
            "and call it with output_attentions=True"
        )
    if len(attn1) != len(attn2):
        raise ValueError(
            f"AMI needs the same number of attention layers per view, got {len(attn1)} and {len(attn2)}"
        )
    shape = tuple(attn1[0].shape)
    if len(shape) != 4 or shape[2] != shape[3]:
        raise ValueError(f"attention maps must be (B, H, T, T), got {shape}")
    for a in (*attn1, *attn2):
        if tuple(a.shape) != shape:
            raise ValueError(f"every attention map must have shape {shape}, got {tuple(a.shape)}")
    if tuple(attention_mask.shape) != (shape[0], shape[2]):
        raise ValueError(
            f"attention_mask must be (B, T) = {(shape[0], shape[2])}, got {tuple(attention_mask.shape)}"
        )
    if shape[1] < 2:
        raise ValueError("AMI pairs adjacent heads and needs at least two attention heads")
    chosen = ami_layers(len(attn1)) if layers is None else tuple(int(x) for x in layers)
    if not chosen or any(not 0 <= x < len(attn1) for x in chosen):
        raise ValueError(f"AMI layers must be 0-based indices below {len(attn1)}, got {chosen}")
    return chosen


def _pair_view(attn: torch.Tensor) -> torch.Tensor:
    """(B, H, T, T) -> (B, H // 2, 2 * T * T), a view when `attn` is contiguous (no copy)."""
    b, h, t, _ = attn.shape
    pairs = h // 2
    return attn[:, : 2 * pairs].reshape(b, pairs, 2 * t * t)


def _valid_from_pairs(
    pairs1: list[torch.Tensor], pairs2: list[torch.Tensor], attention_mask: torch.Tensor
) -> torch.Tensor:
    """(B, S, N) validity from the per-layer pair views of both views."""
    real = attention_mask.bool()
    tokens = (real[:, :, None] & real[:, None, :]).reshape(real.shape[0], 1, -1)  # (B, 1, T*T)
    tokens = tokens.repeat(1, 1, 2)  # (B, 1, 2*T*T): the same token grid for both heads of a pair
    with torch.no_grad():
        positive = torch.cat([(x1 > 0) & (x2 > 0) for x1, x2 in zip(pairs1, pairs2, strict=True)], dim=1)
        return positive & tokens


def ami_valid_entries(
    attn1: Sequence[torch.Tensor],
    attn2: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    layers: Sequence[int] | None = None,
) -> torch.Tensor:
    """(B, S, N) bool: the entries of each (sentence, slice) that AMI may sample (see module doc)."""
    chosen = _check_inputs(attn1, attn2, attention_mask, layers)
    return _valid_from_pairs(
        [_pair_view(attn1[j]) for j in chosen], [_pair_view(attn2[j]) for j in chosen], attention_mask
    )


def sample_slice_entries(
    valid: torch.Tensor,
    num_samples: int = 150,
    generator: torch.Generator | None = None,
    shard: BatchShard | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample entries uniformly without replacement among the valid ones of every (sentence, slice).

    Args:
        valid: (B, S, N) bool, the candidate entries (`ami_valid_entries`).
        num_samples: m, the sample size per slice; 150 as in the authors' code.
        generator: a torch.Generator for reproducible draws (best on ``valid``'s device).
        shard: with several ranks, the rows of the global batch that ``valid`` holds: the random keys
            are drawn for the whole global batch and this rank keeps its rows, so each rank samples
            what a single process samples for those sentences (`distributed.BatchShard.draw`).

    Returns:
        ``indices`` (B, S, m') long and ``sample_mask`` (B, S, m') bool with m' = min(m, N). A slice
        with fewer than m' valid entries gets all of them, and ``sample_mask`` is False in the
        remaining positions (whose indices point at invalid entries and must be ignored). The same
        indices serve both views.
    """
    if valid.ndim != 3 or valid.dtype != torch.bool:
        raise ValueError(f"valid must be a (B, S, N) bool tensor, got {tuple(valid.shape)} {valid.dtype}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    m = min(num_samples, valid.shape[-1])
    # Random keys with the invalid entries pushed to +inf: the m smallest keys are a uniform sample
    # without replacement of the valid entries, for every slice at once.
    # Drawn where the generator lives (a CPU generator also serves CUDA tensors, at a copy's cost).
    source = valid.device if generator is None else generator.device

    def uniform(shape: tuple[int, ...]) -> torch.Tensor:
        return torch.rand(shape, generator=generator, device=source)

    keys = (uniform(valid.shape) if shard is None else shard.draw(uniform, valid.shape)).to(valid.device)
    keys.masked_fill_(~valid, float("inf"))
    drawn, indices = torch.topk(keys, m, dim=-1, largest=False, sorted=False)
    return indices, drawn <= 1.0  # rand is in [0, 1); only the invalid keys are +inf


def attention_mutual_information(
    attn1: Sequence[torch.Tensor],
    attn2: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    layers: Sequence[int] | None = None,
    num_samples: int = 150,
    generator: torch.Generator | None = None,
    indices: tuple[torch.Tensor, torch.Tensor] | None = None,
    shard: BatchShard | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (sentence, slice) mutual information between the two views' attention: miCSE Algorithm 1.

    For every sentence and slice: sample up to m valid entries (the same for both views), take
    z = log(w) of the attention weights w, centre z1 and z2 over the sample, rho = their cosine
    similarity (the Pearson correlation), and ``I = -1/2 log(1 - rho^2)`` (Eq. 3-4), with rho^2
    clamped to at most 1 - 1e-6. Computed in float32, also under autocast.

    Args:
        attn1, attn2: per-layer attention probabilities of the two views, as Hugging Face models
            return them with ``output_attentions=True``: each (B, H, T, T).
        attention_mask: (B, T), 1 for real tokens and 0 for padding.
        layers: 0-based layers to use; default `ami_layers(len(attn1))`.
        num_samples: entries sampled per slice (150, the authors' code).
        generator: a torch.Generator for reproducible sampling (best on the attention's device).
        indices: ``(indices, sample_mask)`` as `sample_slice_entries` returns them, used instead of
            sampling (sampled entries that are not valid are ignored).

    Returns:
        ``mi`` (B, S) float32, and ``slice_valid`` (B, S) bool; a slice with fewer than 3 valid
        sampled entries is invalid and its ``mi`` is 0.
    """
    chosen = _check_inputs(attn1, attn2, attention_mask, layers)
    pairs1 = [_pair_view(attn1[j]) for j in chosen]
    pairs2 = [_pair_view(attn2[j]) for j in chosen]
    valid = _valid_from_pairs(pairs1, pairs2, attention_mask)  # (B, S, N)
    if indices is None:
        idx, sample_mask = sample_slice_entries(valid, num_samples, generator, shard)
    else:
        idx, sample_mask = _given_samples(indices, valid)
    return _sampled_mi(pairs1, pairs2, idx, sample_mask, attention_mask.device.type)


def _given_samples(
    indices: tuple[torch.Tensor, torch.Tensor], valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A caller's ``(indices, sample_mask)``, checked against (B, S, N) ``valid``; sampled entries
    that are not valid are masked out."""
    idx, sample_mask = indices
    if idx.shape != sample_mask.shape or idx.shape[:2] != valid.shape[:2]:
        raise ValueError(
            f"indices must be two (B, S, m) tensors with (B, S) = {tuple(valid.shape[:2])}, "
            f"got {tuple(idx.shape)} and {tuple(sample_mask.shape)}"
        )
    idx = idx.to(valid.device).long()
    return idx, sample_mask.to(valid.device).bool() & valid.gather(-1, idx)


def _sampled_mi(
    pairs1: list[torch.Tensor],
    pairs2: list[torch.Tensor],
    idx: torch.Tensor,
    sample_mask: torch.Tensor,
    device_type: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3-4 on the sampled entries of each (sentence, slice): (B, S) float32 ``mi`` and (B, S)
    ``slice_valid``. ``pairs1``, ``pairs2``: each chosen layer's (B, P, 2*T*T) pair view per view;
    ``idx``, ``sample_mask``: (B, S, m) with S = layers x P."""
    batch, num_slices, m = idx.shape
    num_layers, pairs = len(pairs1), num_slices // len(pairs1)
    # Work in (view, layer, B, pair, m) so that both views share every kernel; slice s = j * P + p.
    layer_idx = idx.reshape(batch, num_layers, pairs, m)
    mask = sample_mask.reshape(batch, num_layers, pairs, m).transpose(0, 1)  # (L', B, P, m)
    with torch.autocast(device_type=device_type, enabled=False):
        gathered = [x.gather(-1, layer_idx[:, j]) for views in (pairs1, pairs2) for j, x in enumerate(views)]
        w = torch.stack(gathered).view(2, num_layers, batch, pairs, m).float()
        # Unsampled positions read 1, so z = 0 there: no NaN value or gradient, and plain sums are
        # the sums over the sample.
        z = w.masked_fill(~mask, 1.0).log()
        weight = mask.float()
        count = weight.sum(-1)  # (L', B, P)
        centred = (z - z.sum(-1, keepdim=True) / count.clamp(min=1.0).unsqueeze(-1)) * weight
        covariance = (centred[0] * centred[1]).sum(-1)
        squares = centred.square().sum(-1)  # (2, L', B, P)
        rho = covariance * (squares[0] * squares[1]).clamp(min=_MIN_VARIANCE_PRODUCT).rsqrt()
        mi = -0.5 * torch.log1p(-rho.square().clamp(max=_MAX_RHO_SQUARED))
        slice_valid = count >= _MIN_SAMPLES
        mi = mi.masked_fill(~slice_valid, 0.0)
    # Back to (B, S) with slice s = j * P + p.
    mi = mi.transpose(0, 1).reshape(batch, num_slices)
    return mi, slice_valid.transpose(0, 1).reshape(batch, num_slices)


def ami_sum_and_count(
    attn1: Sequence[torch.Tensor],
    attn2: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    weight: float = 2.5e-3,
    layers: Sequence[int] | None = None,
    num_samples: int = 150,
    generator: torch.Generator | None = None,
    shard: BatchShard | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``-weight`` x the sum of I over the valid (sentence, slice) pairs, and how many there are.

    `ami_loss` is their ratio. Split over ranks, each rank returns its rows' sum and count, and the
    ratio of the totals is the single-process loss (the trainer all-reduces the count). Arguments
    are those of `attention_mutual_information`.
    """
    mi, slice_valid = attention_mutual_information(
        attn1,
        attn2,
        attention_mask,
        layers=layers,
        num_samples=num_samples,
        generator=generator,
        shard=shard,
    )
    # A masked sum instead of mi[slice_valid]: no host sync.
    kept = slice_valid.float()
    return -weight * (mi * kept).sum(), kept.sum()


def ami_loss(
    attn1: Sequence[torch.Tensor],
    attn2: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    weight: float = 2.5e-3,
    layers: Sequence[int] | None = None,
    num_samples: int = 150,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """miCSE's attention term L_D = -lambda * mean of I over the valid (sentence, slice) pairs.

    miCSE Eq. 5 and Sec. 3.1: maximising the mutual information between the two dropout views'
    attention, with weight lambda. The default lambda = 2.5e-3 is this project's default (the
    authors' code defaults to 0.011 and also scales the term by the squared fraction of non-zero
    attention entries, which we do not). Arguments are those of `attention_mutual_information`.

    Returns:
        A float32 scalar; 0 (with the graph intact, so ``backward`` works) when no slice has at
        least 3 valid entries.

    Example:
        >>> out1 = model(**batch, output_attentions=True)  # an eager-attention HF encoder in train mode
        >>> out2 = model(**batch, output_attentions=True)  # second dropout view
        >>> loss = ami_loss(out1.attentions, out2.attentions, batch["attention_mask"])
    """
    total, count = ami_sum_and_count(
        attn1, attn2, attention_mask, weight, layers=layers, num_samples=num_samples, generator=generator
    )
    # no NaN when no slice is valid
    return total / count.clamp(min=1.0)
