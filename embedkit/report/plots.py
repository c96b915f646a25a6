"""PNG plots of an experiment: score against training-set size, and each method's gain over SimCSE.

The two kinds mirror miCSE's Fig. 3/4 (Klein & Nabi 2023): one line per method with error bars
(sample std over seeds) on a log-scaled size axis, the untrained base model as a dashed line; and
the difference to SimCSE, paired by seed (the same seed draws the same subset for every method, so
the per-seed differences cancel the subset's own variance).

matplotlib is optional (`pip install embedkit[plots]`) and imported only here, inside the
functions; figures are drawn on an Agg canvas, never through pyplot, so no display is needed and
no global state is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedkit.extras import extra_available, require_extra
from embedkit.report.tables import BASE_METHOD, Cell, ExperimentTable, slug
from embedkit.storage.atomic import atomic_path

REFERENCE_METHOD = "simcse"  # the paper's baseline; deltas are against it


def plots_available() -> bool:
    return extra_available("plots")


def _figure() -> Any:
    require_extra("plots", "plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.0, 4.0), dpi=120)
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Any, path: Path) -> Path:
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", bbox_inches="tight")
    return path


def paired_delta(cell: Cell, reference: Cell) -> Cell | None:
    """Per-seed differences `cell - reference` over the seeds both have; None when none are shared."""
    ref = dict(zip(reference.seeds, reference.values, strict=True))
    pairs = [
        (seed, value - ref[seed]) for seed, value in zip(cell.seeds, cell.values, strict=True) if seed in ref
    ]
    if not pairs:
        return None
    return Cell(values=tuple(v for _, v in pairs), seeds=tuple(s for s, _ in pairs))


def plot_scores(table: ExperimentTable, metric: str, path: Path) -> Path:
    """Mean ± std of `metric` against training-set size, one line per method."""
    figure = _figure()
    axes = figure.add_subplot(1, 1, 1)
    for method in table.methods:
        if method == BASE_METHOD:
            base = table.cell(metric, method, None)
            if base is not None:
                axes.axhline(base.mean, color="grey", linestyle="--", linewidth=1, label="base (untrained)")
            continue
        points = [(s, c) for s in table.sizes if (c := table.cell(metric, method, s)) is not None]
        if points:
            axes.errorbar(
                [s for s, _ in points],
                [c.mean for _, c in points],
                yerr=[c.std or 0.0 for _, c in points],
                marker="o",
                capsize=3,
                label=method,
            )
    _style(axes, table, metric, "score x100 (mean ± std over seeds)")
    return _save(figure, path)


def plot_delta(
    table: ExperimentTable, metric: str, path: Path, reference: str = REFERENCE_METHOD
) -> Path | None:
    """Each method's gain over `reference` (paired by seed) against size; None without the reference."""
    if reference not in table.methods:
        return None
    figure = _figure()
    axes = figure.add_subplot(1, 1, 1)
    axes.axhline(0.0, color="black", linewidth=0.8)
    drawn = False
    for method in table.methods:
        if method == reference:
            continue
        points = []
        for size in table.sizes:
            cell, ref = table.cell(metric, method, size), table.cell(metric, reference, size)
            delta = paired_delta(cell, ref) if cell is not None and ref is not None else None
            if method == BASE_METHOD and cell is not None and ref is not None:
                # The base model has one value for every size: its gap to each of SimCSE's seeds.
                delta = Cell(values=tuple(cell.values[0] - v for v in ref.values), seeds=ref.seeds)
            if delta is not None:
                points.append((size, delta))
        if points:
            drawn = True
            axes.errorbar(
                [s for s, _ in points],
                [d.mean for _, d in points],
                yerr=[d.std or 0.0 for _, d in points],
                marker="o",
                capsize=3,
                linestyle="--" if method == BASE_METHOD else "-",
                label=method,
            )
    if not drawn:
        return None
    _style(axes, table, f"{metric}: difference to {reference}", "points (mean ± std of per-seed differences)")
    return _save(figure, path)


def _style(axes: Any, table: ExperimentTable, title: str, ylabel: str) -> None:
    if table.sizes and max(table.sizes) / max(min(table.sizes), 1) >= 4:
        axes.set_xscale("log")
    axes.set_xticks(table.sizes)
    axes.set_xticklabels([f"{s:,}" for s in table.sizes])
    axes.minorticks_off()
    axes.set_xlabel("training sentences")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")


def write_plots(table: ExperimentTable, out_dir: Path, reference: str = REFERENCE_METHOD) -> list[Path]:
    """`<metric>.png` and `<metric>-delta.png` (when `reference` ran) for every metric, in `out_dir`."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    if not table.sizes:
        return written
    for metric in table.metrics:
        name = slug(metric)
        written.append(plot_scores(table, metric, out_dir / f"{name}.png"))
        delta = plot_delta(table, metric, out_dir / f"{name}-delta.png", reference)
        if delta is not None:
            written.append(delta)
    return written


def plot_modes(scores: dict[str, dict[str, float]], metric: str, path: Path) -> Path:
    """Grouped bars of `metric` per search mode (dense, lexical, hybrid), one group per collection.

    `scores`: collection -> mode -> value, as `embedkit eval retrieval --mode all` reports them.
    """
    figure = _figure()
    axes = figure.add_subplot()
    modes = list(dict.fromkeys(mode for by_mode in scores.values() for mode in by_mode))
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        xs = [g + (i - (len(modes) - 1) / 2) * width for g in range(len(scores))]
        values = [by_mode.get(mode, float("nan")) for by_mode in scores.values()]
        bars = axes.bar(xs, values, width, label=mode)
        axes.bar_label(bars, fmt="%.3f", fontsize=7, padding=2)
    axes.set_xticks(range(len(scores)), list(scores))
    axes.set_ylabel(metric)
    top = max((v for by_mode in scores.values() for v in by_mode.values()), default=1.0)
    axes.set_ylim(0, min(1.0, top * 1.15) if top <= 1 else top * 1.15)
    axes.legend(frameon=False, ncols=len(modes), loc="upper center", bbox_to_anchor=(0.5, 1.12))
    axes.spines[["top", "right"]].set_visible(False)
    return _save(figure, path)
