"""The experiment table: one row per method, one column per training-set size, mean ± std over seeds.

The layout follows miCSE's Table 2 (Klein & Nabi 2023, "miCSE: Mutual Information Contrastive
Learning for Low-shot Sentence Embeddings"): the untrained base model is a row of its own, and
every trained cell is the mean and sample standard deviation (ddof=1, as over the paper's seeds)
of one metric across seeds. Each run's result is a `RunRecord`, stored as `runs/<name>.json` by
the experiment runner; this module only reads records and writes Markdown, CSV and JSON. No torch.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from embedkit.errors import InputError
from embedkit.storage.atomic import write_json_atomic, write_text_atomic

BASE_METHOD = "base"  # the row of the untrained base model


@dataclass
class RunRecord:
    """One finished run: a method trained on `size` sentences drawn with `seed`, and its scores.

    The base model's record has method "base" and no size or seed.
    """

    name: str
    method: str
    size: int | None
    seed: int | None
    metrics: dict[str, float]  # table metric name -> value (x100, as the paper reports)
    details: dict[str, Any] = field(default_factory=dict)  # every evaluator's full output
    train: dict[str, Any] = field(default_factory=dict)  # the trainer's summary (steps, loss, seconds)
    settings: str = ""  # hash of the experiment settings this run belongs to
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], source: str = "run record") -> RunRecord:
        try:
            return cls(
                name=str(data["name"]),
                method=str(data["method"]),
                size=None if data.get("size") is None else int(data["size"]),
                seed=None if data.get("seed") is None else int(data["seed"]),
                metrics={str(k): float(v) for k, v in dict(data["metrics"]).items()},
                details=dict(data.get("details") or {}),
                train=dict(data.get("train") or {}),
                settings=str(data.get("settings", "")),
                wall_s=float(data.get("wall_s", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{source} is not a run record: {exc}") from None


@dataclass(frozen=True)
class Cell:
    """One metric of one method at one size: the per-seed values and their mean and spread."""

    values: tuple[float, ...]
    seeds: tuple[int | None, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / len(self.values)

    @property
    def std(self) -> float | None:
        """Sample standard deviation (ddof=1); None for a single value."""
        if len(self.values) < 2:
            return None
        mean = self.mean
        return math.sqrt(math.fsum((v - mean) ** 2 for v in self.values) / (len(self.values) - 1))


@dataclass
class ExperimentTable:
    """Cells keyed by (metric, method, size); the base row's cell is keyed with size None."""

    metrics: list[str]
    methods: list[str]  # row order; "base" first when present
    sizes: list[int]
    cells: dict[tuple[str, str, int | None], Cell]

    def cell(self, metric: str, method: str, size: int | None) -> Cell | None:
        if method == BASE_METHOD:
            size = None
        return self.cells.get((metric, method, size))


def aggregate(records: Iterable[RunRecord], methods: Sequence[str] | None = None) -> ExperimentTable:
    """Group run records into cells. `methods` fixes the row order (base always first)."""
    records = list(records)
    if not records:
        raise InputError("no finished runs to tabulate")
    metrics: list[str] = []
    seen_methods: list[str] = []
    sizes: set[int] = set()
    grouped: dict[tuple[str, str, int | None], list[tuple[int | None, float]]] = {}
    for record in sorted(records, key=lambda r: (r.method, r.size or 0, -1 if r.seed is None else r.seed)):
        size = None if record.method == BASE_METHOD else record.size
        if size is not None:
            sizes.add(size)
        if record.method not in seen_methods:
            seen_methods.append(record.method)
        for metric, value in record.metrics.items():
            if metric not in metrics:
                metrics.append(metric)
            grouped.setdefault((metric, record.method, size), []).append((record.seed, value))
    order = [m for m in (methods or []) if m in seen_methods and m != BASE_METHOD]
    order += [m for m in seen_methods if m not in order and m != BASE_METHOD]
    if BASE_METHOD in seen_methods:
        order.insert(0, BASE_METHOD)
    cells = {
        key: Cell(values=tuple(v for _, v in pairs), seeds=tuple(s for s, _ in pairs))
        for key, pairs in grouped.items()
    }
    return ExperimentTable(metrics=metrics, methods=order, sizes=sorted(sizes), cells=cells)


def format_cell(cell: Cell | None, digits: int = 2) -> str:
    """`"79.53 ± 0.41"`; a single value has no spread; a missing cell is "-"."""
    if cell is None:
        return "-"
    std = cell.std
    return f"{cell.mean:.{digits}f}" if std is None else f"{cell.mean:.{digits}f} ± {std:.{digits}f}"


def size_label(size: int) -> str:
    return f"n={size:,}"


def to_markdown(table: ExperimentTable, digits: int = 2) -> str:
    """One Markdown table per metric; the best mean of each column is bold, as in the paper."""
    parts = [
        "# Experiment results",
        "",
        "Mean ± sample std over seeds (scores x100); `base` is the untrained model.",
    ]
    parts.append("")
    for metric in table.metrics:
        parts += [f"## {metric}", ""]
        parts.append("| method | " + " | ".join(size_label(s) for s in table.sizes) + " |")
        parts.append("| --- |" + " ---: |" * len(table.sizes))
        for method in table.methods:
            row = _row_cells(table, metric, method, digits, "**{}**")
            parts.append(f"| {method} | " + " | ".join(row) + " |")
        parts.append("")
    return "\n".join(parts)


def _row_cells(table: ExperimentTable, metric: str, method: str, digits: int, best_style: str) -> list[str]:
    """One method's formatted cells for `metric`, the best mean of each size marked with `best_style`."""
    row = []
    for size in table.sizes:
        cell = table.cell(metric, method, size)
        text = format_cell(cell, digits)
        best = _best_mean(table, metric, size)
        if cell is not None and best is not None and cell.mean == best:
            text = best_style.format(text)
        row.append(text)
    return row


def _best_mean(table: ExperimentTable, metric: str, size: int) -> float | None:
    means = [c.mean for m in table.methods if (c := table.cell(metric, m, size)) is not None]
    return max(means) if means else None


def to_csv(table: ExperimentTable) -> str:
    """Long format: one line per (metric, method, size); the base row has an empty size."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["metric", "method", "size", "mean", "std", "n", "values"])
    for metric in table.metrics:
        for method in table.methods:
            sizes: list[int | None] = [None] if method == BASE_METHOD else list(table.sizes)
            for size in sizes:
                cell = table.cells.get((metric, method, size))
                if cell is None:
                    continue
                std = cell.std
                writer.writerow(
                    [
                        metric,
                        method,
                        "" if size is None else size,
                        f"{cell.mean:.6g}",
                        "" if std is None else f"{std:.6g}",
                        cell.n,
                        " ".join(f"{v:.6g}" for v in cell.values),
                    ]
                )
    return buffer.getvalue()


def to_json(table: ExperimentTable) -> dict[str, Any]:
    cells = []
    for (metric, method, size), cell in table.cells.items():
        cells.append(
            {
                "metric": metric,
                "method": method,
                "size": size,
                "mean": cell.mean,
                "std": cell.std,
                "n": cell.n,
                "values": list(cell.values),
                "seeds": list(cell.seeds),
            }
        )
    return {"metrics": table.metrics, "methods": table.methods, "sizes": table.sizes, "cells": cells}


def write_reports(table: ExperimentTable, out_dir: Path) -> dict[str, Path]:
    """Write `table.md`, `table.csv` and `table.json` into `out_dir` (each atomically)."""
    out_dir = Path(out_dir)
    paths = {"markdown": out_dir / "table.md", "csv": out_dir / "table.csv", "json": out_dir / "table.json"}
    write_text_atomic(paths["markdown"], to_markdown(table))
    write_text_atomic(paths["csv"], to_csv(table))
    write_json_atomic(paths["json"], to_json(table))
    return paths


def rich_tables(table: ExperimentTable, digits: int = 2) -> list[Any]:
    """The same tables as `to_markdown`, as rich `Table`s for the terminal."""
    from rich.table import Table

    out = []
    for metric in table.metrics:
        rich_table = Table(title=metric, title_justify="left")
        rich_table.add_column("method")
        for size in table.sizes:
            rich_table.add_column(size_label(size), justify="right")
        for method in table.methods:
            rich_table.add_row(method, *_row_cells(table, metric, method, digits, "[bold]{}[/bold]"))
        out.append(rich_table)
    return out


def slug(name: str) -> str:
    """A file-name-safe form of a metric name: `"stsb-dev spearman"` -> `"stsb-dev-spearman"`."""
    return re.sub(r"[^A-Za-z0-9@._-]+", "-", name).strip("-") or "metric"
