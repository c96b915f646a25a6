"""Parity between the PyTorch model and its ONNX exports: a built-in sentence set and the gates.

Every export embeds the same few hundred sentences with PyTorch and with each ONNX file and
compares them row by row (cosine). A precision whose figures miss its gate fails the export.
The math here takes plain arrays, so it is tested without a model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from embedkit.encode.precisions import check_precision
from embedkit.errors import InputError, RunFailure


@dataclass(frozen=True)
class ParityGates:
    """Minimum agreement with PyTorch for each precision (cosine of the sentence vectors)."""

    # fp32 differs from PyTorch only by kernel summation order: ~1e-7 on MiniLM-L6 (measured).
    fp32_min_cosine: float = 0.99999
    # fp16 keeps ~3 significant digits; LayerNorm and pooling stay fp32 where needed (spec gate).
    fp16_min_cosine: float = 0.999
    # int8 per-channel dynamic quantization: mean 0.987 on MiniLM-L6 (measured); the spec's gates.
    int8_mean_cosine: float = 0.98
    int8_min_cosine: float = 0.95
    # With --dev-sts: int8 may lose at most this many Spearman points (x100) against fp32 (spec).
    int8_max_sts_drop: float = 1.0


@dataclass
class ParityReport:
    """How one ONNX file agrees with PyTorch on the parity sentences."""

    precision: str
    sentences: int
    min_cosine: float
    mean_cosine: float
    worst_sentence: str  # the sentence of the minimum, shortened, to show what broke
    passed: bool
    gate: str  # the gate in short words, e.g. "min >= 0.99999" (cosines; STS in Spearman x100)
    sts_spearman: float | None = None  # Spearman x100 on --dev-sts, when given
    torch_sts_spearman: float | None = None

    def as_json(self) -> dict[str, object]:
        return {k: (round(v, 7) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    def summary(self) -> str:
        text = f"{self.precision}: min cosine {self.min_cosine:.6f}, mean {self.mean_cosine:.6f}"
        if self.sts_spearman is not None:
            text += f", STS Spearman {self.sts_spearman:.2f}"
        return text + ("" if self.passed else f" (gate: {self.gate})")


class ParityFailure(RunFailure):
    """A precision missed its parity gate; `reports` holds every figure measured so far."""

    def __init__(self, message: str, reports: Sequence[ParityReport]) -> None:
        super().__init__(message)
        self.reports = list(reports)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of `a` with the same row of `b` (float64; zero rows give 0)."""
    if a.shape != b.shape or a.ndim != 2:
        raise InputError(f"parity needs two [n, dim] arrays of one shape, got {a.shape} and {b.shape}")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)
    dots = np.einsum("ij,ij->i", a64, b64)
    return np.where(norms > 0, dots / np.maximum(norms, 1e-300), 0.0)


def judge(
    precision: str,
    cosines: np.ndarray,
    texts: Sequence[str],
    gates: ParityGates,
    sts_spearman: float | None = None,
    fp32_sts_spearman: float | None = None,
    torch_sts_spearman: float | None = None,
) -> ParityReport:
    """Apply `precision`'s gate to per-sentence cosines (and the STS drop for int8)."""
    if precision is None:
        raise InputError("parity needs a precision")
    check_precision(precision)
    if not len(cosines) or len(cosines) != len(texts):
        raise InputError(f"parity needs one cosine per sentence, got {len(cosines)} for {len(texts)}")
    worst = int(np.argmin(cosines))
    min_cos, mean_cos = float(cosines[worst]), float(np.mean(cosines))
    if precision == "fp32":
        gate, passed = f"min >= {gates.fp32_min_cosine}", min_cos >= gates.fp32_min_cosine
    elif precision == "fp16":
        gate, passed = f"min >= {gates.fp16_min_cosine}", min_cos >= gates.fp16_min_cosine
    else:
        gate = f"mean >= {gates.int8_mean_cosine}, min >= {gates.int8_min_cosine}"
        passed = mean_cos >= gates.int8_mean_cosine and min_cos >= gates.int8_min_cosine
        if sts_spearman is not None and fp32_sts_spearman is not None:
            floor = fp32_sts_spearman - gates.int8_max_sts_drop
            gate += f", STS >= {floor:.2f} (fp32 - {gates.int8_max_sts_drop})"
            passed = passed and sts_spearman >= floor
    # NaN compares False above, but say so plainly: a NaN vector never passes.
    passed = passed and not math.isnan(min_cos)
    shown = texts[worst] if len(texts[worst]) <= 60 else texts[worst][:57] + "..."
    return ParityReport(
        precision=precision,
        sentences=len(texts),
        min_cosine=min_cos,
        mean_cosine=mean_cos,
        worst_sentence=shown,
        passed=bool(passed),
        gate=gate,
        sts_spearman=sts_spearman,
        torch_sts_spearman=torch_sts_spearman,
    )


def read_calibration(path: str | Path) -> list[str]:
    """Non-empty lines of a UTF-8 text file (`.gz` accepted): extra sentences for the parity check."""
    from embedkit.data.textfiles import text_lines

    file = Path(path)
    try:
        lines = [line.strip() for _, line in text_lines(file, "calibration file")]
    except InputError as exc:  # a bad byte names the file and line; say which file it was
        message = str(exc)
        named = message if "calibration file" in message else f"cannot read calibration file {message}"
        raise InputError(named) from None
    lines = [line for line in lines if line]
    if not lines:
        raise InputError(f"calibration file {file} has no sentences")
    return lines


# ----- the built-in sentence set -------------------------------------------------------------

_FIXED = [
    "",
    "a",
    "?",
    "42",
    "OK.",
    "Hello, world!",
    "A man is playing a guitar.",
    "A woman is slicing an onion in the kitchen.",
    "The boundary layer separates near the trailing edge at Mach 2.5.",
    "What is the heat transfer rate behind a shock wave?",
    "Shares fell 3.2% to $41.75 on Tuesday, 14 March 2023.",
    "The patient was given 500 mg of ibuprofen every 6 hours.",
    "Section 4(b)(ii) of the contract shall survive termination.",
    "def encode(texts): return [t.lower() for t in texts]",
    "https://example.org/path?query=1&lang=en",
    "e-mail: first.last@example.com, tel. +1 (555) 010-4477",
    "Zürich, São Paulo, Kraków and Reykjavík are cities.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le café est très chaud, n'est-ce pas ?",
    "¿Dónde está la estación de tren?",
    "Москва — столица России.",
    "東京は日本の首都です。",
    "北京欢迎你",
    "서울은 한국의 수도입니다.",
    "Η γρήγορη καφέ αλεπού.",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "I ❤️ NLP 🤖🚀!!!",
    "naïve façade coöperate résumé",
    "....!!!???;;;:::",
    "UPPER CASE SHOUTING ABOUT THE RESULTS",
    "x = 3.14159 * r ** 2; y = sqrt(x) / 2",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "\"Quoted text,\" she said, 'and more quotes.'",
    "tab\tseparated\tvalues and  double  spaces",
    "The results (Table 3, p < 0.001) confirm the hypothesis.",
    "Two dogs are running through a field of snow.",
    "A cat sits on the mat.",
    "The cat did not sit on the mat.",
    "Bridges under cyclic load show fatigue cracks after 10^6 cycles.",
]

_WORDS_TEXT = (
    "the of and to in is was for on that with as by at from it an be this are which or have "
    "flow wing pressure shock layer boundary heat transfer velocity surface body number mach "
    "court contract plaintiff defendant agreement liability clause statute appeal tenant "
    "patient disease treatment dose clinical trial symptoms diagnosis therapy infection "
    "model training embedding vector search index query retrieval encoder sentence token "
    "market price shares growth revenue quarter inflation bank rate investors "
    "dog cat man woman child plays running guitar beach kitchen field snow ball car street "
    "quickly slowly never always very more less new old large small high low first last"
)
_NON_ASCII_TEXT = "café naïve Zürich über São Kraków Москва 東京 北京 서울 Ελλάδα مرحبا नमस्ते 🙂 ✓ € £ ± µm °C"
_WORDS, _NON_ASCII = _WORDS_TEXT.split(), _NON_ASCII_TEXT.split()
_PUNCT = [",", ";", ":", " -", " (see above)", "!", "?", "..."]


def _generated(count: int, max_words: int, rng: random.Random) -> list[str]:
    """Word-salad sentences with log-uniform lengths from 1 word to past `max_words` (truncated)."""
    out = []
    for _ in range(count):
        n = max(1, round(math.exp(rng.uniform(0.0, math.log(max_words * 1.15)))))
        words = []
        for _ in range(n):
            roll = rng.random()
            if roll < 0.06:
                words.append(rng.choice(_NON_ASCII))
            elif roll < 0.12:
                words.append(
                    rng.choice(
                        [str(rng.randint(0, 9999)), f"{rng.uniform(0, 100):.2f}", f"{rng.randint(1, 99)}%"]
                    )
                )
            else:
                word = rng.choice(_WORDS)
                words.append(word.capitalize() if rng.random() < 0.08 else word)
            if rng.random() < 0.07:
                words[-1] += rng.choice(_PUNCT)
        out.append(" ".join(words) + rng.choice([".", ".", "?", "!", ""]))
    return out


def builtin_sentences(max_seq_length: int, count: int = 300, seed: int = 0) -> list[str]:
    """The fixed hand-written cases plus generated sentences spanning 1 token to `max_seq_length`.

    Deterministic for a given (max_seq_length, count, seed), so parity figures are comparable
    between exports. Word counts are log-uniform: most sentences short, as in real use, but
    every length band up to truncation is covered.
    """
    if count < len(_FIXED):
        raise InputError(f"the parity set needs at least {len(_FIXED)} sentences, got {count}")
    rng = random.Random(seed)
    return _FIXED + _generated(count - len(_FIXED), max(1, max_seq_length), rng)
