"""Tiny random sentence encoders built from a config (importable from any test folder, unlike conftest).

`make_tiny_bert` writes the BERT (or DistilBERT) the tests have always used. `make_tiny_encoder`
writes one of every architecture transformers offers for sentence encoders that can be built
offline (`ENCODER_ARCHITECTURES`), each with a tokenizer of its own family (WordPiece, byte-level
BPE or Unigram, trained or written here) and the special tokens and position numbering of the real
models, in the Hugging Face + sentence-transformers layout.
"""

from __future__ import annotations

import json
from pathlib import Path

# A small vocabulary: enough real words that test sentences tokenize into varied lengths.
_WORDS = (  # noqa: SIM905 (a word list reads best as one string)
    "the a an of in on at to for with and or is are was were be been it this that these those "
    "wing flow air pressure boundary layer shock wave heat transfer mach number speed body drag lift "
    "model test data result method theory equation solution value high low small large new first "
    "cat dog man woman girl boy plays playing guitar soccer beach hair food eats runs is sitting "
    "legal court contract patient disease drug engine bridge load stress strain temperature "
    "one two three four five six seven eight nine ten"
).split()
_CHARS = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?;:'\"-()")

# The architectures `make_tiny_encoder` builds: model_type values of config.json.
ENCODER_ARCHITECTURES = (
    "bert",
    "distilbert",
    "electra",
    "mpnet",
    "roberta",
    "xlm-roberta",
    "deberta-v2",
    "modernbert",
)


def make_tiny_bert(
    path: Path,
    *,
    pooling: str = "mean",
    normalize: bool = True,
    architecture: str = "bert",
    num_hidden_layers: int = 4,
    num_attention_heads: int = 4,
    hidden_size: int = 32,
    max_position_embeddings: int = 64,
    seed: int = 0,
    dropout: float | None = None,
) -> Path:
    """Write a random BERT in Hugging Face + sentence-transformers layout to `path`.

    `architecture="distilbert"` gives the same shape of model without token_type_ids; `dropout`
    sets every dropout probability (None: the config's defaults, 0.1), 0 for deterministic training.
    """
    import torch
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _wordpiece_tokenizer(path, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]")
    tokenizer.model_max_length = max_position_embeddings
    tokenizer.save_pretrained(str(path))

    torch.manual_seed(seed)
    if architecture == "distilbert":
        config = DistilBertConfig(
            vocab_size=len(tokenizer),
            dim=hidden_size,
            n_layers=num_hidden_layers,
            n_heads=num_attention_heads,
            hidden_dim=hidden_size * 2,
            max_position_embeddings=max_position_embeddings,
            **({} if dropout is None else {"dropout": dropout, "attention_dropout": dropout}),
        )
        DistilBertModel(config).eval().save_pretrained(str(path))
        _without_token_types(path)
    else:
        config = BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            intermediate_size=hidden_size * 2,
            max_position_embeddings=max_position_embeddings,
            **(
                {}
                if dropout is None
                else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
            ),
        )
        BertModel(config).eval().save_pretrained(str(path))
    write_st_modules(path, hidden_size, pooling, normalize, max_position_embeddings)
    return path


def make_tiny_encoder(
    path: Path,
    architecture: str,
    *,
    pooling: str = "mean",
    normalize: bool = True,
    num_hidden_layers: int = 3,
    num_attention_heads: int = 4,
    hidden_size: int = 32,
    max_seq_length: int = 48,
    seed: int = 0,
    prompts: dict[str, str] | None = None,
    dense: int | None = None,
) -> Path:
    """Write a random `architecture` (one of `ENCODER_ARCHITECTURES`) with its family's tokenizer.

    Models that number positions from the padding index (MPNet, RoBERTa, XLM-R) get the two
    positions more that they need, as the real ones do (514 for 512 tokens). ModernBERT gets a
    local attention window of 8 tokens, so that its sliding-window layers differ from its global
    ones on the test sentences. `pooling` and `dense` as `write_st_modules` takes them; `prompts`
    go into `config_sentence_transformers.json`.
    """
    import torch
    from transformers import AutoModel

    config = _tokenizer_and_config(
        path, architecture, num_hidden_layers, num_attention_heads, hidden_size, max_seq_length
    )
    torch.manual_seed(seed)
    AutoModel.from_config(config).eval().save_pretrained(str(path))
    write_st_modules(path, hidden_size, pooling, normalize, max_seq_length, prompts, dense)
    return path


def make_tiny_cross_encoder(
    path: Path,
    architecture: str = "bert",
    *,
    num_labels: int = 1,
    num_hidden_layers: int = 2,
    hidden_size: int = 32,
    max_seq_length: int = 48,
    seed: int = 0,
) -> Path:
    """Write a random `architecture`ForSequenceClassification (a cross-encoder) with its family's
    tokenizer, as a plain Hugging Face folder (what sentence-transformers' CrossEncoder loads).

    Its weights are drawn wider than transformers' default (initializer_range 0.5, not 0.02), so
    that the tiny model's scores differ from pair to pair instead of all sitting near 0.5.
    """
    import torch
    from transformers import AutoModelForSequenceClassification

    config = _tokenizer_and_config(path, architecture, num_hidden_layers, 4, hidden_size, max_seq_length)
    config.num_labels = num_labels
    config.initializer_range = 0.5
    torch.manual_seed(seed)
    AutoModelForSequenceClassification.from_config(config).eval().save_pretrained(str(path))
    return path


def _tokenizer_and_config(
    path: Path, architecture: str, layers: int, heads: int, hidden: int, max_seq_length: int
):
    """Write `architecture`'s tiny tokenizer into `path`; the model's config to go with it."""
    if architecture not in ENCODER_ARCHITECTURES:
        raise ValueError(f"no tiny {architecture!r}: choose from {', '.join(ENCODER_ARCHITECTURES)}")
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _TOKENIZERS[architecture](path)
    tokenizer.model_max_length = max_seq_length
    tokenizer.save_pretrained(str(path))
    if architecture == "distilbert":
        _without_token_types(path)
    return _config(architecture, tokenizer, layers, heads, hidden, max_seq_length)


_POOLING_KEYS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def write_st_modules(
    path: Path,
    hidden_size: int,
    pooling: str,
    normalize: bool,
    max_seq_length: int,
    prompts: dict[str, str] | None = None,
    dense: int | None = None,
) -> None:
    """sentence-transformers' files: Transformer, Pooling, a Dense (Tanh) when asked, Normalize when asked.

    `pooling`: one mode or several joined by "+" ("cls+mean"), written as the boolean keys that
    sentence-transformers 2 to 6 all read.
    """
    kinds = ["Transformer", "Pooling"] + (["Dense"] if dense else []) + (["Normalize"] if normalize else [])
    folders = {"Transformer": "", "Pooling": "1_Pooling", "Dense": "2_Dense"}
    modules = [
        {
            "idx": i,
            "name": str(i),
            "path": folders.get(kind, f"{i}_{kind}"),
            "type": f"sentence_transformers.models.{kind}",
        }
        for i, kind in enumerate(kinds)
    ]
    (path / "modules.json").write_text(json.dumps(modules, indent=2))
    (path / "1_Pooling").mkdir(exist_ok=True)
    modes = pooling.split("+")
    pooling_config = {"word_embedding_dimension": hidden_size}
    pooling_config |= {key: mode in modes for mode, key in _POOLING_KEYS.items()}
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config, indent=2))
    if dense:
        _write_dense(path / "2_Dense", len(modes) * hidden_size, dense)
    (path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    if prompts is not None:
        st_config = {"prompts": prompts, "default_prompt_name": None, "similarity_fn_name": "cosine"}
        (path / "config_sentence_transformers.json").write_text(json.dumps(st_config, indent=2))


def _write_dense(folder: Path, in_features: int, out_features: int) -> None:
    """A sentence-transformers Dense module (Tanh) with random weights in safetensors."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(exist_ok=True)
    config = {
        "in_features": in_features,
        "out_features": out_features,
        "bias": True,
        "activation_function": "torch.nn.modules.activation.Tanh",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    linear = torch.nn.Linear(in_features, out_features)
    save_file(
        {"linear.weight": linear.weight.detach(), "linear.bias": linear.bias.detach()},
        str(folder / "model.safetensors"),
    )


# ----- tokenizers, one per family ----------------------------------------------------------------


def _wordpiece_tokenizer(path: Path, specials: list[str], unk: str, cls=None, **kwargs):
    """A lower-casing WordPiece tokenizer over the word list (BERT, DistilBERT, ELECTRA, MPNet)."""
    from transformers import BertTokenizerFast

    vocab = [*specials, *_CHARS, *(f"##{c}" for c in _CHARS), *_WORDS]
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    return (cls or BertTokenizerFast)(vocab=str(vocab_file), do_lower_case=True, unk_token=unk, **kwargs)


def _bert_tokenizer(path: Path):
    return _wordpiece_tokenizer(path, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "[UNK]")


def _mpnet_tokenizer(path: Path):
    from transformers import MPNetTokenizer

    # MPNet's own order: <s> 0, <pad> 1, </s> 2; its position ids count from the padding index.
    return _wordpiece_tokenizer(path, ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"], "[UNK]", MPNetTokenizer)


def _byte_level_bpe(specials: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE vocabulary and merges trained on the word list (deterministic)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    corpus = [" ".join(_WORDS[i : i + 7]) for i in range(0, len(_WORDS), 3)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    state = json.loads(tokenizer.to_str())["model"]
    return state["vocab"], [tuple(m) for m in state["merges"]]


def _roberta_tokenizer(path: Path):
    from transformers import RobertaTokenizer

    vocab, merges = _byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return RobertaTokenizer(vocab=vocab, merges=merges)


def _modernbert_tokenizer(path: Path):
    """ModernBERT's kind: byte-level BPE with BERT's special tokens around each text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    vocab, merges = _byte_level_bpe(specials)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    names = ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_input_names=["input_ids", "attention_mask"],
        **dict(zip(names, specials, strict=True)),
    )


def _unigram_pieces(specials: list[str]) -> list[tuple[str, float]]:
    """A SentencePiece-style Unigram vocabulary: specials, whole words, single characters."""
    words = [(f"\u2581{w}", -3.0 - i / 1000) for i, w in enumerate(dict.fromkeys(_WORDS))]
    return [(s, 0.0) for s in specials] + words + [(c, -8.0) for c in _CHARS] + [("\u2581", -5.0)]


def _xlm_roberta_tokenizer(path: Path):
    from transformers import XLMRobertaTokenizer

    return XLMRobertaTokenizer(vocab=[*_unigram_pieces(["<s>", "<pad>", "</s>", "<unk>"]), ("<mask>", 0.0)])


def _deberta_v2_tokenizer(path: Path):
    from transformers import DebertaV2Tokenizer

    return DebertaV2Tokenizer(vocab=_unigram_pieces(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))


_TOKENIZERS = {
    "bert": _bert_tokenizer,
    "distilbert": _bert_tokenizer,
    "electra": _bert_tokenizer,
    "mpnet": _mpnet_tokenizer,
    "roberta": _roberta_tokenizer,
    "xlm-roberta": _xlm_roberta_tokenizer,
    "deberta-v2": _deberta_v2_tokenizer,
    "modernbert": _modernbert_tokenizer,
}


def _without_token_types(path: Path) -> None:
    """DistilBERT and ModernBERT take no token_type_ids: the tokenizer must not make them."""
    config_path = path / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["model_input_names"] = ["input_ids", "attention_mask"]
    config_path.write_text(json.dumps(tokenizer_config, indent=2))


def _config(architecture: str, tokenizer, layers: int, heads: int, hidden: int, max_seq_length: int):
    """The transformers config of a tiny `architecture`, with the tokenizer's special token ids."""
    from transformers import AutoConfig

    common = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": hidden * 2,
        "max_position_embeddings": max_seq_length,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if architecture == "distilbert":
        names = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads"}
        common = {names.get(k, k): v for k, v in common.items() if k != "intermediate_size"}
        common["hidden_dim"] = hidden * 2
    elif architecture == "electra":
        common["embedding_size"] = hidden // 2  # ELECTRA projects its smaller embeddings up
    elif architecture in ("mpnet", "roberta", "xlm-roberta"):
        common["max_position_embeddings"] = max_seq_length + 2  # positions count from pad id + 1
        common |= {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
        if architecture != "mpnet":
            common["type_vocab_size"] = 1
    elif architecture == "deberta-v2":
        # DeBERTa-v3's attention: relative positions (content-to-position and back), no absolute ones
        common |= {
            "relative_attention": True,
            "position_buckets": 16,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "max_relative_positions": -1,
        }
    elif architecture == "modernbert":
        common |= {
            "max_position_embeddings": 512,
            "local_attention": 8,
            "cls_token_id": tokenizer.cls_token_id,
            "sep_token_id": tokenizer.sep_token_id,
            "bos_token_id": tokenizer.cls_token_id,
            "eos_token_id": tokenizer.sep_token_id,
        }
    return AutoConfig.for_model(architecture, **common)
