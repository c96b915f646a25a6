"""Tiny random BERTs built from a config (importable from any test folder, unlike conftest)."""

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
    from transformers import BertConfig, BertModel, BertTokenizerFast, DistilBertConfig, DistilBertModel

    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *_CHARS, *(f"##{c}" for c in _CHARS), *_WORDS]
    vocab_file = path / "vocab.txt"
    vocab_file.write_text("\n".join(dict.fromkeys(vocab)) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab=str(vocab_file), do_lower_case=True)
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
        tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
        tokenizer_config["model_input_names"] = ["input_ids", "attention_mask"]
        (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
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

    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        normalize_type = "sentence_transformers.models.Normalize"
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": normalize_type})
    (path / "modules.json").write_text(json.dumps(modules, indent=2))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": hidden_size,
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            },
            indent=2,
        )
    )
    (path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_position_embeddings, "do_lower_case": False})
    )
    return path
