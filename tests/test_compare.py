"""icir compare (Table 4): cross-model ranking similarity equals scipy and brute force on the grids."""

from __future__ import annotations

import json

import numpy as np
import pytest
from lm_eval_helpers import full_run
from scipy.stats import pearsonr, spearmanr

from harness.cli import main as icir_main
from harness.metrics.rankings import correlation_ci
from harness.report import build_table
from harness.tiny_models import save_tiny
from icir_common import UserInputError


@pytest.fixture(scope="module")
def runs(shared, tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    other = save_tiny("qwen3_vl", root / "other_model", seed=3)
    (first,) = [p for p in (shared / "ref_mcq").iterdir() if p.is_dir()]
    return first, full_run(shared, root / "runs", "icir_mcq_n5", model=other)


def _grids(run):
    unit = run / "icir_artifacts" / "icir_mcq_n5"
    position = json.loads((unit / "summary.json").read_text())["position"]
    pointer = json.loads((unit / "pointer_r1_eq3.json").read_text())["grids"][position]
    writer = json.loads((unit / "writer_r1.json").read_text())[position]["writer_r1"]
    as_grid = lambda d: np.array([[d[f"L{l:02d}H{h:02d}"] for h in range(4)] for l in range(4)])  # noqa: E731, E741
    return {"pointer": as_grid(pointer), "writer": as_grid(writer)}


def _top(grid, k):
    flat = grid.ravel()
    return set(sorted(range(flat.size), key=lambda i: (-flat[i], i))[:k])


def test_table_4_equals_scipy_and_brute_force(runs):
    table = build_table(4, list(runs))
    a, b = _grids(runs[0]), _grids(runs[1])
    assert [row["Ranking"] for row in table.rows] == ["pointer", "writer"]
    for row in table.rows:
        x, y = a[row["Ranking"]], b[row["Ranking"]]
        assert row["Pearson"] == pytest.approx(pearsonr(x.ravel(), y.ravel()).statistic, nan_ok=True)
        assert row["Spearman"] == pytest.approx(spearmanr(x.ravel(), y.ravel()).statistic, nan_ok=True)
        assert row["Layer-max Pearson"] == pytest.approx(pearsonr(x.max(axis=1), y.max(axis=1)).statistic,
                                                         nan_ok=True)
        for k in (3, 5, 10):
            assert row[f"Top-{k}"] == f"{len(_top(x, k) & _top(y, k))}/{k} ({k * k / 16:.1f})"
        assert row["Top-100"] == f"{16}/16 (16.0)"  # K capped at the 16 heads: every head
    low, high = (float(v) for v in table.rows[0]["Spearman 95% CI"].strip("[]").split(","))
    assert low <= table.rows[0]["Spearman"] <= high  # the pointer grids: many distinct values
    assert "capped at the models' 16 heads" in table.notes[0]


def test_compare_command_and_refusals(runs, shared, capsys, tmp_path):
    assert icir_main(["compare", *map(str, runs)]) == 0
    assert "Table 4" in capsys.readouterr().out
    assert icir_main(["compare", str(runs[0])]) == 2
    assert "needs two run folders" in capsys.readouterr().err
    wide = full_run(shared, tmp_path / "wide", "icir_mcq_n5",
                    model=save_tiny("qwen3_vl", tmp_path / "wide_model", seed=4, num_attention_heads=8))
    assert icir_main(["compare", str(runs[0]), str(wide)]) == 2
    assert "same shape" in capsys.readouterr().err


def test_correlation_interval_is_seeded_and_holds_the_estimate():
    rng = np.random.default_rng(0)
    a = rng.random((6, 8))
    b = a + 0.3 * rng.random((6, 8))
    first = correlation_ci(a, b, "spearman", n_resamples=500, seed=1)
    assert first == correlation_ci(a, b, "spearman", n_resamples=500, seed=1)
    assert first != correlation_ci(a, b, "spearman", n_resamples=500, seed=2)
    assert first[0] <= spearmanr(a.ravel(), b.ravel()).statistic <= first[1] <= 1.0
    with pytest.raises(UserInputError, match="not constant"):
        correlation_ci(np.ones((2, 2)), a[:2, :2])
