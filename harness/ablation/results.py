"""The grid's results: per-sample outcomes, per-cell statistics, Table 14, the dose-response figure.

Written into ``OUT/ablation/``::

    outcomes.parquet   N, arm, K, seed, cell, doc_id, answer, correct: one row per (document, cell),
                       so every statistic can be recomputed
    cells.parquet      N, arm, K, seed, n, accuracy, drop, random_mean, random_sd, minus_random,
                       mcnemar_p (one per random seed), significant_vs_seeds (`stats.cell_stats`);
                       the same rows in cells.json (what a leaderboard submission carries)
    table14.md         accuracy minus the random mean per (N, K), per arm, and the baseline (Table 14)
    dose_response.png  one panel per N: the arms and the random mean with a +-1 sd band (Fig. 3 / 7)
    grid.json          the arms, the cells' heads, the budgets an arm is too short for, notes
    protocol.json      the protocol version, the grid's settings, model identity, versions, datasets
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from harness.ablation.arms import ARMS, BASELINE, RANDOM, Grid, grid_json
from harness.ablation.stats import CellStats, cell_stats
from harness.constants import vhs_single_size
from icir_common import atomic_file, write_json

ARM_LABELS = {"overlap": "Overlap", "pointer_only": "Pointer-only", "writer_only": "Writer-only"}


def outcome_rows(grid: Grid, logs: Mapping[str, object]) -> list[dict]:
    """One row per (document, cell) of every task, in task, document and cell order."""
    rows = []
    for task in sorted(logs, key=vhs_single_size):
        for doc_id in sorted(logs[task].done):
            line = logs[task].done[doc_id]
            for cell in grid.cells:
                outcome = line["cells"][cell.name]
                rows.append({"N": line["N"], "arm": cell.arm, "K": cell.k, "seed": cell.seed, "cell": cell.name,
                             "doc_id": doc_id, "answer": outcome["answer"], "correct": outcome["correct"]})
    return rows


def grid_stats(grid: Grid, rows: Sequence[dict]) -> list[CellStats]:
    """`stats.cell_stats` of every haystack size, from the outcome rows."""
    stats = []
    for n in sorted({row["N"] for row in rows}):
        outcomes = {}
        for cell in grid.cells:
            picked = sorted((r["doc_id"], r["correct"]) for r in rows if r["N"] == n and r["cell"] == cell.name)
            outcomes[cell.name] = np.array([correct for _, correct in picked], dtype=bool)
        stats += cell_stats(n, grid.cells, outcomes)
    return stats


def table14(stats: Sequence[CellStats]) -> str:
    """Table 14 as markdown: per N and K, each arm's accuracy minus the random mean, and the baseline."""
    ks = sorted({s.k for s in stats if s.arm != BASELINE})
    lines = ["| N | Arm | " + " | ".join(f"K={k}" for k in ks) + " |", "|---|---|" + "---|" * len(ks)]
    for n in sorted({s.n_size for s in stats}):
        at = {(s.arm, s.k): s for s in stats if s.n_size == n}
        lines.append(f"| {n} | Baseline accuracy | " + " | ".join(f"{at[(BASELINE, 0)].accuracy:.3f}" for _ in ks)
                     + " |")
        for arm in ARMS:
            if not any((arm, k) in at for k in ks):
                continue
            cells = []
            for k in ks:
                s = at.get((arm, k))
                cells.append("–" if s is None else f"{s.minus_random:+.3f}" + ("*" * (s.significant or 0)))
            lines.append(f"| {n} | {ARM_LABELS[arm]} − random | " + " | ".join(cells) + " |")
        randoms = [at[(RANDOM, k)] for k in ks if (RANDOM, k) in at]
        if randoms:
            lines.append(f"| {n} | Random mean accuracy (sd) | "
                         + " | ".join(f"{s.random_mean:.3f} ({'–' if s.random_sd is None else f'{s.random_sd:.3f}'})"
                                      for s in randoms) + " |")
    lines.append("")
    lines.append("Accuracy minus the mean of the random controls at the same K; one * per random seed the arm is "
                 "significantly worse than (McNemar exact, p < 0.05); – an arm shorter than K.")
    return "\n".join(lines) + "\n"


def plot_dose_response(stats: Sequence[CellStats], path: Path) -> Path:
    """`harness.plots.plot_dose_response` of the cell statistics: arms, random mean +-1 sd, baseline."""
    from harness.plots import plot_dose_response as draw

    curves: dict[int, dict[str, dict[int, float]]] = {}
    band: dict[int, dict[int, tuple[float, float]]] = {}
    baseline = {}
    for s in stats:
        if s.arm == BASELINE:
            baseline[s.n_size] = s.accuracy
        elif s.arm in ARMS:
            curves.setdefault(s.n_size, {}).setdefault(ARM_LABELS[s.arm], {})[s.k] = s.accuracy
        elif s.random_mean is not None:
            band.setdefault(s.n_size, {})[s.k] = (s.random_mean, s.random_sd or 0.0)
    draw(curves, band, baseline, path)
    return path


def _parquet(path: Path, rows: Sequence[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_file(path) as tmp:
        pq.write_table(pa.Table.from_pylist(list(rows)), tmp)


def write_results(folder: Path, grid: Grid, logs: Mapping[str, object], protocol: Mapping) -> list[CellStats]:
    """Write every file of the module docstring into `folder`; return the cell statistics."""
    rows = outcome_rows(grid, logs)
    stats = grid_stats(grid, rows)
    _parquet(folder / "outcomes.parquet", rows)
    _parquet(folder / "cells.parquet", [s.row() for s in stats])
    write_json(folder / "cells.json", [s.row() for s in stats])
    with atomic_file(folder / "table14.md") as tmp:
        tmp.write_text(table14(stats))
    with atomic_file(folder / "grid.json") as tmp:
        tmp.write_text(grid_json(grid))
    plot_dose_response(stats, folder / "dose_response.png")
    write_json(folder / "protocol.json", dict(protocol), sort_keys=True)
    return stats


def table12(grid: Grid, through: Mapping[str, object], prefill: Mapping[str, object]) -> str:
    """Table 12 (App. I.1) as markdown: per N and arm cell, the accuracy change from zeroing the heads
    through generation instead of the prefill only, and the fraction of parsed answers that change.

    `through` and `prefill` are the outcome logs (``{task: OutcomeLog}``) of two runs of the same grid.

    Raises:
        UserInputError: the runs cover other tasks or documents.
    """
    from icir_common import UserInputError

    if sorted(through) != sorted(prefill) or any(set(through[t].done) != set(prefill[t].done) for t in through):
        raise UserInputError("--compare: the prefill-only run covers other tasks or documents; run it with the "
                             "same --tasks and --limit")
    lines = ["| N | Cell | Accuracy (prefill only) | Accuracy (through generation) | Change | Answers changed |",
             "|---|---|---|---|---|---|"]
    for task in sorted(through, key=vhs_single_size):
        docs = sorted(through[task].done)
        n = through[task].done[docs[0]]["N"]
        for cell in grid.cells:
            if cell.arm == RANDOM:
                continue
            ours = [through[task].done[d]["cells"][cell.name] for d in docs]
            theirs = [prefill[task].done[d]["cells"][cell.name] for d in docs]
            before = float(np.mean([o["correct"] for o in theirs]))
            after = float(np.mean([o["correct"] for o in ours]))
            changed = float(np.mean([a["answer"] != b["answer"] for a, b in zip(ours, theirs)]))
            lines.append(f"| {n} | {cell.name} | {before:.3f} | {after:.3f} | {after - before:+.3f} | {changed:.3f} |")
    return "\n".join(lines) + "\n"
