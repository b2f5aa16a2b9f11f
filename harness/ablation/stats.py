"""Per-cell statistics of the ablation grid (paper §6.2, App. I, J.2).

For each haystack size N and cell: accuracy over the documents, its drop from the unablated
baseline, the difference from the mean accuracy of the random controls at the same K (and their
standard deviation over seeds, ``ddof=1``), and McNemar's test of an arm against each random seed
on the paired per-document outcomes: the exact two-sided binomial test on the discordant pairs
(``scipy.stats.binomtest(b, b + c, 0.5)``; p = 1 without discordant pairs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.ablation.arms import ARMS, BASELINE, RANDOM, Cell

ALPHA = 0.05


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, int, int]:
    """``(p, a_only, b_only)``: McNemar's exact test of paired outcomes `a` against `b`.

    ``a_only`` counts documents `a` gets right and `b` wrong, ``b_only`` the reverse; p is the
    two-sided exact binomial probability of a split at least this uneven under p = 1/2.

    Raises:
        ValueError: `a` and `b` of different lengths.
    """
    from scipy.stats import binomtest

    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes of different lengths: {a.size} and {b.size}")
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    if a_only + b_only == 0:
        return 1.0, 0, 0
    return float(binomtest(a_only, a_only + b_only, 0.5).pvalue), a_only, b_only


@dataclass(frozen=True)
class CellStats:
    """One row of ``cells.parquet``: the statistics of one cell at one haystack size."""

    n_size: int
    arm: str
    k: int
    seed: int
    n: int
    accuracy: float
    drop: float
    random_mean: float | None
    random_sd: float | None
    minus_random: float | None
    mcnemar_p: tuple[float, ...] | None
    significant: int | None

    @classmethod
    def from_row(cls, row: Mapping) -> CellStats:
        """The inverse of `row` (a ``cells.json`` / ``cells.parquet`` row)."""
        p = row["mcnemar_p"]
        return cls(row["N"], row["arm"], row["K"], row["seed"], row["n"], row["accuracy"], row["drop"],
                   row["random_mean"], row["random_sd"], row["minus_random"], None if p is None else tuple(p),
                   row["significant_vs_seeds"])

    def row(self) -> dict:
        """The parquet row (``mcnemar_p`` as a list, one p per random seed, in seed order)."""
        return {"N": self.n_size, "arm": self.arm, "K": self.k, "seed": self.seed, "n": self.n,
                "accuracy": self.accuracy, "drop": self.drop, "random_mean": self.random_mean,
                "random_sd": self.random_sd, "minus_random": self.minus_random,
                "mcnemar_p": None if self.mcnemar_p is None else list(self.mcnemar_p),
                "significant_vs_seeds": self.significant}


def cell_stats(n_size: int, cells: Sequence[Cell], outcomes: Mapping[str, np.ndarray]) -> list[CellStats]:
    """The `CellStats` of every cell at one size, from ``{cell name: bool [docs]}`` outcomes.

    Every cell's outcomes cover the same documents in the same order (paired). Significance
    counts the seeds against which the arm is *worse* (fewer correct) at p < `ALPHA`.
    """
    baseline = float(np.mean(outcomes[BASELINE]))
    randoms = {k: [c for c in cells if c.arm == RANDOM and c.k == k] for k in {c.k for c in cells}}
    stats = []
    for cell in cells:
        correct = outcomes[cell.name]
        accuracy = float(np.mean(correct))
        controls = randoms.get(cell.k) or []
        accs = [float(np.mean(outcomes[c.name])) for c in controls]
        mean = float(np.mean(accs)) if accs and cell.arm != BASELINE else None
        sd = float(np.std(accs, ddof=1)) if len(accs) > 1 and cell.arm != BASELINE else None
        tests = None
        significant = None
        if cell.arm in ARMS and controls:
            tests = [mcnemar_exact(correct, outcomes[c.name]) for c in controls]
            significant = sum(p < ALPHA and arm_only < random_only for p, arm_only, random_only in tests)
        stats.append(CellStats(n_size, cell.arm, cell.k, cell.seed, int(correct.size), accuracy, baseline - accuracy,
                               mean, sd, None if mean is None else accuracy - mean,
                               None if tests is None else tuple(t[0] for t in tests), significant))
    return stats
