"""STS: Spearman x 100 of the cosine similarity of sentence pairs against their gold scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedkit.data.sts import STS_FORMATS, read_sts
from embedkit.encode.protocol import Encoder
from embedkit.errors import InputError
from embedkit.evaluation.metrics import spearman

STS_METRIC = "spearman_cosine"


@dataclass(frozen=True)
class StsFileResult:
    """One STS file's score: Spearman x 100 of cosine similarity against the gold scores."""

    path: Path
    name: str  # the file's name without format suffixes, the key prefix in the results dict
    pairs: int
    spearman_cosine: float


class StsEvaluator:
    """Spearman x 100 of cosine similarity vs gold scores per file, and the mean over files.

    One correlation over all pairs of a file (SentEval's "all" setting, as SimCSE and miCSE
    report STS). The files are read when the evaluator is built, so bad input fails early.
    """

    name = "sts"
    primary_metric = STS_METRIC
    greater_is_better = True

    def __init__(
        self, paths: str | Path | Sequence[str | Path], batch_size: int = 64, progress: bool = False
    ):
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        if not paths:
            raise InputError("no STS files given")
        self.paths = [Path(p) for p in paths]
        self.data = [read_sts(p) for p in self.paths]
        self.names = _file_names(self.paths)
        self.batch_size = batch_size
        self.progress = progress

    def evaluate(self, encoder: Encoder) -> list[StsFileResult]:
        results = []
        for path, name, data in zip(self.paths, self.names, self.data, strict=True):
            # Encoding both columns in one call lets length-sorting batch them together.
            vectors = encoder.encode(
                data.sentences1 + data.sentences2,
                batch_size=self.batch_size,
                normalize=True,
                progress=self.progress,
            )
            first, second = vectors[: len(data)], vectors[len(data) :]
            cosine = np.einsum("ij,ij->i", first.astype(np.float64), second.astype(np.float64))
            results.append(StsFileResult(path, name, len(data), 100.0 * spearman(cosine, data.scores)))
        return results

    def describe(self) -> dict[str, Any]:
        return {"files": [str(p) for p in self.paths], "metric": self.primary_metric}

    def __call__(self, encoder: Encoder) -> dict[str, float]:
        results = self.evaluate(encoder)
        scores = {f"{r.name}/{STS_METRIC}": r.spearman_cosine for r in results}
        scores[STS_METRIC] = float(np.mean([r.spearman_cosine for r in results]))
        return scores


def _file_names(paths: list[Path]) -> list[str]:
    """`stsb-test` for `.../stsb-test.tsv.gz`; the full path where two files share a name."""
    names = []
    for path in paths:
        name = path.name
        for suffix in (".gz", *STS_FORMATS):
            if name.lower().endswith(suffix):
                name = name[: -len(suffix)]
        names.append(name)
    if len(set(names)) < len(names):
        return [str(p) for p in paths]
    return names


def evaluate_sts(
    encoder: Encoder, paths: str | Path | Sequence[str | Path], batch_size: int = 64
) -> dict[str, float]:
    """`StsEvaluator(paths)(encoder)`: per-file `<name>/spearman_cosine` and their mean `spearman_cosine`."""
    return StsEvaluator(paths, batch_size=batch_size)(encoder)


