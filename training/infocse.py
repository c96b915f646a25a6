"""InfoCSE's auxiliary MLM network: sentence reconstruction through the sentence vector alone.

InfoCSE (Wu et al., "InfoCSE: Information-aggregated Contrastive Learning of Sentence Embeddings",
EMNLP 2022 Findings, arXiv 2210.06432) adds to SimCSE's loss lambda x an MLM loss computed by a
separate network that reaches the encoder only through the sentence vector:

1. the masked sentence runs through a frozen copy of the base model's lower layers (the paper's
   lower 6 of BERT-base's 12; here `aux_lower_layers`, default half the depth: 3 of MiniLM's 6), in
   eval mode and without gradient, so these features are a fixed function of the masked tokens;
2. the state at the first ([CLS]) position is replaced by the encoder's sentence vector (the paper's
   "12-cls": the top layer's [CLS]);
3. `aux_layers` (2) transformer layers and an MLM head (BERT's transform, then a decoder tied to the
   frozen copy's word embeddings plus a bias) predict the masked tokens.

Which sentence vector: the pooled output *before* the training-only MLP head, for both dropout views,
each with its own mask. That is what the authors' code feeds (`models_cls_mlm.py`: the last hidden
state's [CLS] of the flattened two-view batch, while the MLP applies to the pooler output only), and
it is the vector the saved model produces. With mean pooling (MiniLM's own) it is the mean-pooled
vector that takes the [CLS] slot.

The decoder is tied to the *frozen* word embeddings, not the encoder's, so that the MLM gradient has
no path into the encoder but the sentence vector. The masked-token logits are computed at the masked
positions only (the loss is an average over those), which saves most of the vocabulary projection.

The extra layers start as copies of the base's layers `lower .. lower + aux_layers - 1` (the ones that
read the lower half's output in the base; the last layer where the base has no such layer), so a
short stage 1 (`aux_stage1`) starts from a working network. InfoCSE instead starts from Condenser's
pre-trained head (Gao & Callan 2021), which all-MiniLM-L6-v2 does not have.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from embedkit.errors import InputError

if TYPE_CHECKING:
    from embedkit.training.distributed import BatchShard

IGNORE = -100  # label of the positions that are not predicted (PyTorch's cross-entropy default)


def special_token_ids(base_path: Path) -> tuple[list[int], int]:
    """The tokenizer's special token ids (never masked) and the id of its mask token."""
    from embedkit.encode.batching import load_tokenizer

    tokenizer = load_tokenizer(base_path, 512)
    special = sorted(i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special)
    mask_id = tokenizer.token_to_id("[MASK]")
    if mask_id is None:
        mask_id = tokenizer.token_to_id("<mask>")
    if mask_id is None:
        raise InputError(f"the tokenizer of {base_path} has no mask token: the auxiliary MLM needs one")
    return special, int(mask_id)


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special_ids: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    rate: float,
    generator: torch.Generator | None,
    shard: BatchShard | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: pick each real, non-special token with probability `rate`; of those, 80%
    become the mask token, 10% a uniformly random token, 10% stay (Devlin et al. 2019, Sec. 3.1).

    Returns (masked input ids, labels): labels hold the original id at picked positions, else -100.
    Padding and special tokens are never picked. With `shard` (several ranks), the draws are made
    for the whole global batch and this rank keeps its rows, as a single process would mask them.
    """
    device = input_ids.device

    def draw(make: Callable[[torch.Size], torch.Tensor]) -> torch.Tensor:
        return make(input_ids.shape) if shard is None else shard.draw(make, input_ids.shape)

    candidates = attention_mask.bool() & ~torch.isin(input_ids, special_ids.to(device))
    picked = (draw(lambda s: torch.rand(s, generator=generator, device=device)) < rate) & candidates
    how = draw(lambda s: torch.rand(s, generator=generator, device=device))
    random_ids = draw(lambda s: torch.randint(vocab_size, s, generator=generator, device=device))
    masked = torch.where(picked & (how < 0.8), torch.full_like(input_ids, mask_id), input_ids)
    masked = torch.where(picked & (how >= 0.8) & (how < 0.9), random_ids, masked)
    labels = torch.where(picked, input_ids, torch.full_like(input_ids, IGNORE))
    return masked, labels


def prediction_slots(positions: int, rate: float) -> int:
    """How many of `positions` tokens the MLM head predicts: the masked count's mean plus six of its
    standard deviations and 8 (each token is masked with probability at most `rate`), so that a
    batch masks more only with a probability below 1e-9; all of them for a small batch."""
    spread = math.sqrt(positions * rate * (1 - rate))
    return min(positions, math.ceil(positions * rate + 6 * spread) + 8)


def _bert_layers(backbone: nn.Module) -> nn.ModuleList:
    # the BERT layout of transformers (4.x, 5.x): `encoder.layer`; other models lack it (an error below)
    layers = getattr(getattr(backbone, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        kind = type(backbone).__name__
        raise InputError(
            f"the auxiliary MLM network needs a BERT-style encoder (encoder.layer); {kind} has none"
        )
    return layers


class AuxMLM(nn.Module):
    """Frozen lower layers + `extra` trainable transformer layers + an MLM head (see the module doc)."""

    def __init__(
        self, backbone: nn.Module, lower: int, extra: int, special_ids: list[int], mask_id: int, rate: float
    ) -> None:
        super().__init__()
        layers = _bert_layers(backbone)
        depth = len(layers)
        if not 1 <= lower < depth:
            raise InputError(f"aux_lower_layers must be between 1 and {depth - 1} for this base, got {lower}")
        self.lower, self.rate, self.mask_id = lower, rate, mask_id
        config = backbone.config
        self.vocab_size = int(config.vocab_size)
        # The frozen feature extractor: the base's embeddings and lower layers, copied now (before any
        # training step), so the features stay those of the base model.
        frozen = copy.deepcopy(backbone)
        frozen.encoder.layer = nn.ModuleList(list(frozen.encoder.layer)[:lower])
        frozen.config.num_hidden_layers = lower
        if getattr(frozen, "pooler", None) is not None:
            frozen.pooler = None
        frozen.requires_grad_(False)
        self.frozen = frozen.eval()
        # One deepcopy call, so the extra layers share one config copy (their attention kernel).
        sources = [layers[min(lower + i, depth - 1)] for i in range(extra)]
        self.attn_config = copy.deepcopy(config)
        self.layers = nn.ModuleList(copy.deepcopy(sources, {id(config): self.attn_config}))
        self.layers.requires_grad_(True)
        # BERT's config fields (transformers 4.x, 5.x), BERT's own values where a config lacks one
        hidden = int(config.hidden_size)
        self.dense = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=float(getattr(config, "layer_norm_eps", 1e-12)))
        from transformers.activations import ACT2FN

        act = getattr(config, "hidden_act", "gelu")
        self.act = ACT2FN[act] if isinstance(act, str) else act
        self.bias = nn.Parameter(torch.zeros(self.vocab_size))
        std = float(getattr(config, "initializer_range", 0.02))
        nn.init.normal_(self.dense.weight, std=std)  # BERT's init of the head's transform
        nn.init.zeros_(self.dense.bias)
        self.register_buffer("special_ids", torch.tensor(special_ids, dtype=torch.long), persistent=False)
        self.generator: torch.Generator | None = None  # the masking RNG, set by the trainer
        # Where the masking RNG is on the GPU, the extra layers' dropout seeds come from this host
        # generator instead: a seed drawn on the GPU would have to be read back, waiting for it.
        self.host_seeds = torch.Generator().manual_seed(0)

    def train(self, mode: bool = True) -> AuxMLM:
        super().train(mode)
        self.frozen.eval()  # a fixed feature extractor: never dropout
        return self

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The stage-1 result: the extra layers and the head (the frozen part comes from the base)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("frozen.")}

    def mask(
        self, batch: dict[str, torch.Tensor], shard: BatchShard | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return mask_tokens(
            batch["input_ids"],
            batch["attention_mask"],
            self.special_ids,
            self.mask_id,
            self.vocab_size,
            self.rate,
            self.generator,
            shard,
        )

    def features(self, masked_inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, T, H) token features of the masked sentence from the frozen lower layers (detached)."""
        with torch.no_grad():
            return self.frozen(**masked_inputs).last_hidden_state.detach()

    def loss_sum(
        self,
        sentence: torch.Tensor,
        features: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor,
        rank: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-entropy summed over the masked positions, and their count; the gradient flows
        into `sentence` only. With no masked position the sum is a 0 that still reaches every
        trainable weight (DDP expects a gradient for each). `rank` varies the extra layers' dropout.

        The masked positions are taken at one shape whatever the masking drew (`prediction_slots`;
        selecting exactly them would make a shape from the values, a wait for the GPU): the masked
        ones first, then unmasked ones, which the cross-entropy ignores."""
        from transformers.masking_utils import create_bidirectional_mask

        hidden = torch.cat([sentence.unsqueeze(1).to(features.dtype), features[:, 1:]], dim=1)
        mask = create_bidirectional_mask(
            config=self.attn_config, inputs_embeds=hidden, attention_mask=attention_mask
        )
        with self._own_dropout(hidden.device, rank):
            for layer in self.layers:
                out = layer(hidden, mask)
                hidden = out[0] if isinstance(out, tuple) else out
        targets = labels.flatten()
        slots = torch.topk(
            (targets != IGNORE).to(torch.int8), prediction_slots(targets.numel(), self.rate)
        ).indices
        targets = targets[slots]
        states = self.norm(self.act(self.dense(hidden.flatten(0, 1)[slots])))  # (slots, H)
        logits = F.linear(states, self.frozen.embeddings.word_embeddings.weight, self.bias)
        loss = F.cross_entropy(logits.float(), targets, reduction="sum", ignore_index=IGNORE)
        return loss, (targets != IGNORE).sum()

    def loss(
        self,
        sentence: torch.Tensor,
        features: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor,
    ) -> torch.Tensor:
        """Mean cross-entropy over the masked positions (0 when none is); gradient into `sentence` only."""
        total, count = self.loss_sum(sentence, features, attention_mask, labels)
        return total / count.clamp(min=1)

    def sum_and_count(
        self, sentence: torch.Tensor, batch: dict[str, torch.Tensor], shard: BatchShard | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask `batch` (this rank's rows of the global masking with `shard`), extract the frozen
        features, and return `loss_sum` given `sentence` (B, H)."""
        masked, labels = self.mask(batch, shard)
        inputs = {k: v for k, v in batch.items() if k != "input_ids"} | {"input_ids": masked}
        rank = shard.rank if shard is not None else 0
        return self.loss_sum(sentence, self.features(inputs), batch["attention_mask"], labels, rank)

    def forward(self, sentence: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mask `batch`, extract the frozen features, and return the MLM loss given `sentence` (B, H)."""
        total, count = self.sum_and_count(sentence, batch)
        return total / count.clamp(min=1)

    @contextlib.contextmanager
    def _own_dropout(self, device: torch.device, rank: int = 0) -> Iterator[None]:
        """Draw the extra layers' dropout masks from a stream seeded by the masking generator, so the
        global RNG (the encoder's dropout) advances exactly as without this term; with several ranks
        the rank is added to the seed, so that they do not repeat each other's masks."""
        if not self.training or self.generator is None:
            yield
            return
        seed = self._dropout_seed()
        devices = [device.index or torch.cuda.current_device()] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed + rank)
            yield

    def _dropout_seed(self) -> int:
        """The next seed of the extra layers' dropout, drawn on the host: from the masking RNG where
        it is a CPU generator, else from `host_seeds`."""
        on_host = self.generator is not None and self.generator.device.type == "cpu"
        source = self.generator if on_host else self.host_seeds
        return int(torch.randint(1 << 62, (1,), generator=source))


def build_aux(backbone: nn.Module, base_path: Path, config) -> AuxMLM:  # config: TrainConfig
    """The auxiliary network for `config`, built without touching the global RNG."""
    depth = len(_bert_layers(backbone))
    lower = config.aux_lower_layers or depth // 2
    special, mask_id = special_token_ids(base_path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the head's init does not depend on the training seed (stage 1 is shared)
        return AuxMLM(backbone, lower, config.aux_layers, special, mask_id, config.aux_mask_rate)


__all__ = ["IGNORE", "AuxMLM", "build_aux", "mask_tokens", "special_token_ids"]
