"""The grid's cells: the set-partition arms of App. I, the random controls, and the baseline.

From an ICIR-MCQ run's rankings (pointer: the protocol's pointer score; writer: the writer
probes' R@1), the union of the two top-``top`` sets splits into *overlap*, *pointer-only* and
*writer-only* (`harness.metrics.rankings.partition_rankings`); overlap and pointer-only follow the
pointer ranking, writer-only the writer ranking. A cell ablates the first K heads of an arm; an arm
shorter than K gives no cell (reported in `Grid.short`, never padded). Random controls draw K
heads uniformly from all L x H heads with ``numpy.random.default_rng([seed, K])``, one draw per
(seed, K). The baseline ablates nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.lm_eval_plugin.rankings_io import load_head_ranking
from harness.metrics.rankings import partition_rankings, ranking_names
from icir_common import UserInputError

ARMS = ("overlap", "pointer_only", "writer_only")
RANDOM, BASELINE = "random", "baseline"
DEFAULT_KS = (5, 10, 15, 20, 25, 30)
DEFAULT_SEEDS = (0, 1, 2)
DEFAULT_TOP = 100
POINTER_RANKING, WRITER_RANKING = "pointer_ranking.json", "writer_ranking.json"


@dataclass(frozen=True)
class Cell:
    """One grid cell: ``arm`` (an `ARMS` name, `RANDOM` or `BASELINE`), budget ``k`` (0 for the
    baseline), ``seed`` (random controls; -1 otherwise) and the ablated ``heads`` (``LxxHyy``)."""

    arm: str
    k: int
    seed: int
    heads: tuple[str, ...]

    @property
    def name(self) -> str:
        """``arm@K`` (``random@K#seed``, ``baseline``): the cell's key in outcomes and progress."""
        if self.arm == BASELINE:
            return BASELINE
        return f"{self.arm}@{self.k}" + (f"#{self.seed}" if self.arm == RANDOM else "")


@dataclass
class Grid:
    """The cells of one grid and what they were made from.

    Attributes:
        cells: baseline first, then each arm by K, then the random controls by seed and K.
        arms: ``{arm: ordered heads}`` of the partition (App. I orders).
        short: ``{arm: [K, ...]}`` budgets an arm is too short for (no cell).
        notes: why an arm is missing (no writer ranking), for the output.
    """

    cells: list[Cell]
    arms: dict[str, list[str]]
    short: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def random_heads(n_layers: int, n_heads: int, k: int, seed: int) -> tuple[str, ...]:
    """K heads drawn uniformly without replacement from all L x H heads, in flat-index order."""
    if not 1 <= k <= n_layers * n_heads:
        raise UserInputError(f"cannot draw {k} random heads from {n_layers} x {n_heads} heads")
    flat = np.sort(np.random.default_rng([seed, k]).choice(n_layers * n_heads, size=k, replace=False))
    return tuple(ranking_names(flat, n_heads))


def load_rankings(folder: str | Path, n_layers: int, n_heads: int) -> tuple[list[str], list[str] | None]:
    """``(pointer order, writer order or None)`` as ``LxxHyy`` names from an ICIR-MCQ run's unit folder.

    The folder is ``icir_artifacts/<unit>`` of an ``icir eval`` run (``pointer_ranking.json``:
    the ranking the run votes with; ``writer_ranking.json`` when it fit writer probes).

    Raises:
        UserInputError: no pointer ranking, or rankings of another L x H.
    """
    folder = Path(folder)
    if not (folder / POINTER_RANKING).is_file():
        raise UserInputError(f"{folder} holds no {POINTER_RANKING}; pass --rankings RUN/icir_artifacts/icir_mcq "
                             "of an icir eval run on ICIR-MCQ")
    pointer = ranking_names(load_head_ranking(folder / POINTER_RANKING, n_layers, n_heads), n_heads)
    writer_file = folder / WRITER_RANKING
    writer = None
    if writer_file.is_file():
        writer = ranking_names(load_head_ranking(writer_file, n_layers, n_heads), n_heads)
    return pointer, writer


def build_grid(pointer: Sequence[str], writer: Sequence[str] | None, n_layers: int, n_heads: int,
               ks: Sequence[int] = DEFAULT_KS, seeds: Sequence[int] = DEFAULT_SEEDS, top: int = DEFAULT_TOP) -> Grid:
    """The `Grid` of App. I for these rankings (module docstring).

    ``top`` is capped at L x H (a small model has fewer heads than the paper's top-100); a K
    above L x H is an error.

    Raises:
        UserInputError: a K below 1 or above L x H, or no seeds and no arm.
    """
    total = n_layers * n_heads
    bad = [k for k in ks if not 1 <= k <= total]
    if bad:
        raise UserInputError(f"--ks {bad} outside 1..{total} (the model's L x H heads)")
    top = min(top, total)
    notes = []
    if writer is None:
        arms = {"pointer_only": list(pointer[:top])}
        notes.append("no writer ranking in the rankings folder: only the pointer arm (its top-"
                     f"{top} heads, by pointer rank) is ablated; pass an ICIR-MCQ run that fit writer probes")
    else:
        partition = partition_rankings(list(pointer), list(writer), top)
        arms = {"overlap": partition.overlap, "pointer_only": partition.pointer_only,
                "writer_only": partition.writer_only}
    cells = [Cell(BASELINE, 0, -1, ())]
    short: dict[str, list[int]] = {}
    for arm, heads in arms.items():
        for k in ks:
            if len(heads) >= k:
                cells.append(Cell(arm, k, -1, tuple(heads[:k])))
            else:
                short.setdefault(arm, []).append(k)
    cells += [Cell(RANDOM, k, seed, random_heads(n_layers, n_heads, k, seed)) for seed in seeds for k in ks]
    for arm, budgets in short.items():
        notes.append(f"{arm} holds {len(arms[arm])} heads: no cell at K = {', '.join(map(str, budgets))}")
    return Grid(cells, arms, short, notes)


def cell_records(grid: Grid) -> list[dict]:
    """The grid's cells as ``grid.json`` lists them: name, arm, k, seed, heads."""
    return [{"name": c.name, "arm": c.arm, "k": c.k, "seed": c.seed, "heads": list(c.heads)} for c in grid.cells]


def grid_json(grid: Grid) -> str:
    """The grid's arms, cells and notes as JSON (the run's ``ablation/grid.json``)."""
    return json.dumps({"arms": grid.arms, "short": grid.short, "notes": grid.notes, "cells": cell_records(grid)},
                      indent=2) + "\n"
