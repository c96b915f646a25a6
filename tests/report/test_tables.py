"""The experiment table and its plots, from hand-made run records (no model, no torch)."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest
from runtime_helpers import is_png

from embedkit.errors import InputError
from embedkit.report.plots import paired_delta, write_plots
from embedkit.report.tables import (
    Cell,
    RunRecord,
    aggregate,
    format_cell,
    to_csv,
    to_json,
    to_markdown,
    write_reports,
)

# method -> size -> seed -> score
SCORES = {
    "simcse": {100: {0: 70.0, 1: 72.0, 2: 71.0}, 400: {0: 74.0, 1: 75.0, 2: 76.5}},
    "micse": {100: {0: 71.5, 1: 74.0, 2: 72.0}, 400: {0: 75.0, 1: 75.5, 2: 77.0}},
}
BASE = 65.25


def _records() -> list[RunRecord]:
    records = [RunRecord(name="base", method="base", size=None, seed=None, metrics={"sts spearman": BASE})]
    for method, by_size in SCORES.items():
        for size, by_seed in by_size.items():
            for seed, value in by_seed.items():
                records.append(
                    RunRecord(
                        name=f"{method}-n{size}-s{seed}",
                        method=method,
                        size=size,
                        seed=seed,
                        metrics={"sts spearman": value, "pseudo ndcg@10": value / 2},
                    )
                )
    return records


def test_aggregate_mean_and_sample_std_match_statistics() -> None:
    table = aggregate(_records(), methods=["simcse", "micse"])
    assert table.methods == ["base", "simcse", "micse"]
    assert table.sizes == [100, 400]
    assert table.metrics == ["sts spearman", "pseudo ndcg@10"]
    for method, by_size in SCORES.items():
        for size, by_seed in by_size.items():
            cell = table.cell("sts spearman", method, size)
            assert cell is not None and cell.n == 3
            assert cell.mean == pytest.approx(statistics.mean(by_seed.values()))
            assert cell.std == pytest.approx(statistics.stdev(by_seed.values()))
    base = table.cell("sts spearman", "base", 400)
    assert base is not None and base.n == 1 and base.std is None and base.mean == BASE
    assert table.cell("pseudo ndcg@10", "base", 100) is None  # the base record has no such metric


def test_format_cell() -> None:
    assert format_cell(Cell(values=(1.0, 3.0), seeds=(0, 1))) == "2.00 ± 1.41"
    assert format_cell(Cell(values=(65.25,), seeds=(None,))) == "65.25"
    assert format_cell(None) == "-"


def test_markdown_has_one_row_per_method_and_one_column_per_size() -> None:
    text = to_markdown(aggregate(_records(), methods=["simcse", "micse"]))
    section = text.split("## sts spearman")[1].split("##")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0] == "| method | n=100 | n=400 |"
    assert [r.split("|")[1].strip() for r in rows[2:]] == ["base", "simcse", "micse"]
    # micse at n=100: mean 72.5, std of (71.5, 74, 72) = 1.3229; best in its column, so bold
    assert "**72.50 ± 1.32**" in rows[4]
    assert rows[2] == "| base | 65.25 | 65.25 |"


def test_csv_and_json_round_trip_the_cells(tmp_path) -> None:
    table = aggregate(_records())
    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    # sts: base (1 row) + 2 methods x 2 sizes; pseudo: 2 methods x 2 sizes
    assert len(rows) == 1 + 4 + 4
    simcse_400 = next(
        r for r in rows if r["method"] == "simcse" and r["size"] == "400" and r["metric"] == "sts spearman"
    )
    assert float(simcse_400["mean"]) == pytest.approx(75.1666667)
    assert int(simcse_400["n"]) == 3
    paths = write_reports(table, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data == json.loads(json.dumps(to_json(table)))
    assert {p.name for p in tmp_path.iterdir()} == {"table.md", "table.csv", "table.json"}


def test_run_record_round_trip_and_bad_record() -> None:
    record = _records()[1]
    assert RunRecord.from_json(record.to_json()) == record
    with pytest.raises(InputError, match="is not a run record"):
        RunRecord.from_json({"name": "x"}, source="runs/x.json")


def test_aggregate_of_nothing_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no finished runs"):
        aggregate([])


def test_paired_delta_pairs_by_seed() -> None:
    micse = Cell(values=(71.5, 74.0, 72.0), seeds=(0, 1, 2))
    simcse = Cell(values=(70.0, 72.0), seeds=(0, 1))  # seed 2 missing: only 2 pairs
    delta = paired_delta(micse, simcse)
    assert delta is not None
    assert delta.values == pytest.approx((1.5, 2.0))
    assert delta.seeds == (0, 1)


def test_plots_are_written_as_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    paths = write_plots(aggregate(_records()), tmp_path)
    names = sorted(p.name for p in paths)
    assert names == [
        "pseudo-ndcg@10-delta.png",
        "pseudo-ndcg@10.png",
        "sts-spearman-delta.png",
        "sts-spearman.png",
    ]
    assert all(is_png(p) and p.stat().st_size > 1000 for p in paths)


def test_no_delta_plot_without_simcse(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    records = [r for r in _records() if r.method != "simcse"]
    paths = write_plots(aggregate(records), tmp_path)
    assert sorted(p.name for p in paths) == ["pseudo-ndcg@10.png", "sts-spearman.png"]
