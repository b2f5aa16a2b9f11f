"""Head rankings from per-head R@1 grids and the statistics that compare two rankings.

Sources: paper §4.2 and §5.3 (top-K head sets H_K), App. C.2 / Table 4 (Pearson, Spearman,
layer-max correlation, top-K overlap), App. I (set partition of two top-100 lists), App. E.2
(paired head bootstrap for a difference of correlations).

Conventions: a grid is float ``[L, H]`` (layer, head); heads are flattened row-major, so head
``(l, h)`` has flat index ``l * H + h`` (the order of :func:`icir_common.all_head_names`).
A ranking is an int64 array of flat indices, best head first; equal R@1 values are ordered by
flat index (smaller first), so rankings are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from icir_common import UserInputError, flat_head_name, head_name, parse_head_name

CORRELATION_METHODS = ("pearson", "spearman")


def check_grid(grid: np.ndarray, name: str = "grid") -> np.ndarray:
    """``grid`` as float64 ``[L, H]``; ``UserInputError`` for another shape or a NaN entry."""
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 2 or grid.size == 0:
        raise UserInputError(f"{name} must be a non-empty [layers, heads] grid, got shape {grid.shape}")
    if np.isnan(grid).any():
        raise UserInputError(f"{name} has NaN entries; every head needs an R@1 value to be ranked")
    return grid


def _check_pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = check_grid(a, "first grid"), check_grid(b, "second grid")
    if a.shape != b.shape:
        raise UserInputError(f"grids of different shapes cannot be compared: {a.shape} vs {b.shape}")
    return a, b


def head_ranking(grid: np.ndarray) -> np.ndarray:
    """Flat head indices ``[L*H]`` by decreasing R@1; ties by increasing flat index ``l*H + h``."""
    return np.argsort(-check_grid(grid).ravel(), kind="stable").astype(np.int64)


def ranking_names(ranking: Sequence[int], n_heads: int) -> list[str]:
    """``LxxHyy`` names of flat head indices, in the given order (``n_heads`` = H per layer)."""
    return [flat_head_name(i, n_heads) for i in ranking]


def top_head_values(grid: np.ndarray, k: int) -> list[list]:
    """``[[LxxHyy, R@1], ...]`` of the top-``k`` heads of ``grid``, best first (ties by flat index)."""
    order = head_ranking(grid)[:k]
    return [[name, float(np.asarray(grid).ravel()[i])] for name, i in zip(ranking_names(order, grid.shape[1]), order)]


def top_heads(grid: np.ndarray, k: int) -> list[str]:
    """Names of the top-``k`` heads of ``grid`` (H_K in the paper), best first."""
    grid = check_grid(grid)
    _check_k(k, grid.size)
    return ranking_names(head_ranking(grid)[:k], grid.shape[1])


def as_flat_indices(heads: Iterable[int | str], n_layers: int, n_heads: int) -> np.ndarray:
    """Heads given as flat indices or ``LxxHyy`` names, as int64 flat indices (order kept).

    Raises ``UserInputError`` for a head outside the ``n_layers x n_heads`` model.
    """
    flat = []
    for head in heads:
        if isinstance(head, str):
            try:
                layer, index = parse_head_name(head)
            except ValueError as err:
                raise UserInputError(str(err)) from None
            if layer >= n_layers or index >= n_heads:
                raise UserInputError(f"head {head} is outside a model with {n_layers} layers x {n_heads} heads")
            flat.append(layer * n_heads + index)
        else:
            if not 0 <= int(head) < n_layers * n_heads:
                raise UserInputError(f"flat head index {head} is outside [0, {n_layers * n_heads})")
            flat.append(int(head))
    return np.array(flat, dtype=np.int64)


def grid_by_name(grid: np.ndarray) -> dict[str, float]:
    """A grid as ``{"LxxHyy": value}`` in flat order, for JSON artifacts."""
    grid = np.asarray(grid, dtype=np.float64)
    return {
        head_name(layer, head): float(grid[layer, head])
        for layer in range(grid.shape[0])
        for head in range(grid.shape[1])
    }


def correlation(x: np.ndarray, y: np.ndarray, method: str = "pearson", axis: int = -1) -> np.ndarray:
    """Pearson or Spearman correlation of ``x`` and ``y`` along ``axis`` (vectorised over the rest).

    Spearman is Pearson on average ranks (ties share their mean rank), as
    ``scipy.stats.spearmanr`` computes it; Pearson matches ``scipy.stats.pearsonr``. A constant
    input gives NaN. Used for single values and for batches of bootstrap resamples.
    Raises ``UserInputError`` for a method other than "pearson" / "spearman".
    """
    if method not in CORRELATION_METHODS:
        raise UserInputError(f"unknown correlation method {method!r}; use one of {CORRELATION_METHODS}")
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    y = np.moveaxis(np.asarray(y, dtype=np.float64), axis, -1)
    if method == "spearman":
        from scipy.stats import rankdata  # scipy.stats takes seconds to import; only Spearman needs it

        x = rankdata(x, axis=-1)
        y = rankdata(y, axis=-1)
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (x * y).sum(-1) / np.sqrt((x * x).sum(-1) * (y * y).sum(-1))
    return np.clip(r, -1.0, 1.0)


def _point_correlation(x: np.ndarray, y: np.ndarray, method: str) -> float:
    r = float(correlation(x, y, method))
    if np.isnan(r):
        raise UserInputError("correlation is undefined: one of the two R@1 vectors is constant")
    return r


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two per-head R@1 grids over all L*H heads (App. C.2)."""
    a, b = _check_pair(a, b)
    return _point_correlation(a.ravel(), b.ravel(), "pearson")


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation of two per-head R@1 grids over all L*H heads (App. C.2)."""
    a, b = _check_pair(a, b)
    return _point_correlation(a.ravel(), b.ravel(), "spearman")


def layer_max_correlation(a: np.ndarray, b: np.ndarray, method: str = "pearson") -> float:
    """Correlation of the per-layer maximum R@1 vectors ``[L]`` of two grids (Table 4)."""
    a, b = _check_pair(a, b)
    return _point_correlation(a.max(axis=1), b.max(axis=1), method)


def _check_k(k: int, total: int) -> None:
    if not 1 <= k <= total:
        raise UserInputError(f"K = {k} must be between 1 and the number of heads ({total})")


def top_k_overlap(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """``|H_K(a) ∩ H_K(b)| / K``: the shared fraction of the two top-K head sets (Table 4)."""
    a, b = _check_pair(a, b)
    _check_k(k, a.size)
    shared = np.intersect1d(head_ranking(a)[:k], head_ranking(b)[:k])
    return shared.size / k


def chance_overlap(k: int, n_layers: int, n_heads: int) -> float:
    """Expected number of heads shared by two random K-sets of the L*H heads: ``K^2 / (L*H)``.

    This is a count (the hypergeometric mean); divide by K to compare with :func:`top_k_overlap`.
    """
    _check_k(k, n_layers * n_heads)
    return k * k / (n_layers * n_heads)


@dataclass(frozen=True)
class SetPartition:
    """The union of the pointer and writer top-K sets split into three disjoint subsets (App. I).

    Attributes:
        overlap: heads in both top-K sets, by pointer rank (the ablation order).
        pointer_only: pointer top-K heads outside the writer top-K, by pointer rank.
        writer_only: writer top-K heads outside the pointer top-K, by writer rank.
        pointer_rank / writer_rank: 1-indexed rank of every head in the union under each
            ranking (Table 11 prints them as ``LxxHyy(a x/r y)``).
    """

    k: int
    overlap: list[str]
    pointer_only: list[str]
    writer_only: list[str]
    pointer_rank: dict[str, int]
    writer_rank: dict[str, int]

    def to_json(self) -> dict:
        """A JSON-ready dict of every field."""
        return {
            "k": self.k,
            "overlap": self.overlap,
            "pointer_only": self.pointer_only,
            "writer_only": self.writer_only,
            "pointer_rank": self.pointer_rank,
            "writer_rank": self.writer_rank,
        }


def set_partition(pointer_grid: np.ndarray, writer_grid: np.ndarray, k: int = 100) -> SetPartition:
    """Partition the pointer and writer top-``k`` sets into overlap / pointer-only / writer-only.

    Orders follow App. I: overlap and pointer-only by pointer rank, writer-only by writer rank.
    Raises ``UserInputError`` for grids of different shapes or ``k`` outside ``[1, L*H]``.
    """
    pointer_grid, writer_grid = _check_pair(pointer_grid, writer_grid)
    _check_k(k, pointer_grid.size)
    n_heads = pointer_grid.shape[1]
    return partition_rankings(ranking_names(head_ranking(pointer_grid), n_heads),
                              ranking_names(head_ranking(writer_grid), n_heads), k)


def partition_rankings(pointer_order: Sequence[str], writer_order: Sequence[str], k: int = 100) -> SetPartition:
    """`set_partition` of two full rankings (``LxxHyy`` names, best first) instead of grids.

    Raises ``UserInputError`` for rankings of different head sets or ``k`` outside ``[1, L*H]``.
    """
    if sorted(pointer_order) != sorted(writer_order) or len(set(pointer_order)) != len(pointer_order):
        raise UserInputError("the pointer and writer rankings must rank the same heads, each once")
    _check_k(k, len(pointer_order))
    pointer_top, writer_top = list(pointer_order[:k]), list(writer_order[:k])
    pointer_set, writer_set = set(pointer_top), set(writer_top)
    union = pointer_set | writer_set
    return SetPartition(
        k=k,
        overlap=[h for h in pointer_top if h in writer_set],
        pointer_only=[h for h in pointer_top if h not in writer_set],
        writer_only=[h for h in writer_top if h not in pointer_set],
        pointer_rank={h: r + 1 for r, h in enumerate(pointer_order) if h in union},
        writer_rank={h: r + 1 for r, h in enumerate(writer_order) if h in union},
    )


@dataclass(frozen=True)
class CorrelationDifference:
    """``delta = corr(reference, a) - corr(reference, b)`` with a paired head-bootstrap CI (App. E.2)."""

    method: str
    corr_a: float
    corr_b: float
    delta: float
    low: float
    high: float
    confidence: float
    n_resamples: int
    seed: int


def correlation_difference_ci(
    reference: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    method: str = "spearman",
    n_resamples: int = 5000,
    confidence: float = 0.95,
    seed: int = 0,
    ci_method: str = "percentile",
) -> CorrelationDifference:
    """Paired head bootstrap for the difference of two correlations with a common reference.

    Heads are resampled with replacement (the same heads for all three grids), and
    ``corr(reference, a) - corr(reference, b)`` is recomputed on each of ``n_resamples``
    resamples; the interval is ``scipy.stats.bootstrap``'s (``ci_method`` "percentile" by
    default, "BCa" or "basic" also accepted), seeded by ``seed``. E.2 uses the in-context writer
    grid as reference, the held-out writer grid as ``a`` and the pointer grid as ``b``.

    Raises ``UserInputError`` for grids of different shapes or a constant grid.
    """
    from scipy.stats import bootstrap

    reference, a = _check_pair(reference, a)
    reference, b = _check_pair(reference, b)
    x, ya, yb = reference.ravel(), a.ravel(), b.ravel()
    corr_a = _point_correlation(x, ya, method)
    corr_b = _point_correlation(x, yb, method)

    def statistic(x, ya, yb, axis=-1):
        return correlation(x, ya, method, axis) - correlation(x, yb, method, axis)

    result = bootstrap(
        (x, ya, yb),
        statistic,
        n_resamples=n_resamples,
        vectorized=True,
        paired=True,
        confidence_level=confidence,
        method=ci_method,
        rng=np.random.default_rng(seed),
    )
    return CorrelationDifference(
        method=method,
        corr_a=corr_a,
        corr_b=corr_b,
        delta=corr_a - corr_b,
        low=float(result.confidence_interval.low),
        high=float(result.confidence_interval.high),
        confidence=confidence,
        n_resamples=n_resamples,
        seed=seed,
    )


def correlation_ci(a: np.ndarray, b: np.ndarray, method: str = "spearman", n_resamples: int = 2000,
                   confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Paired head-bootstrap interval of ``corr(a, b)`` over the L*H heads (App. E.2 resampling).

    The same heads are drawn for both grids (``scipy.stats.bootstrap`` with ``paired=True``,
    percentile interval, seeded by ``seed``). NaN bounds where resampled heads can be constant
    (grids of few distinct values, e.g. a small writer pool). Raises ``UserInputError`` for grids
    of different shapes or a constant grid.
    """
    from scipy.stats import bootstrap

    a, b = _check_pair(a, b)
    x, y = a.ravel(), b.ravel()
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        raise UserInputError("a correlation interval needs grids that are not constant")
    result = bootstrap((x, y), lambda u, v, axis=-1: correlation(u, v, method, axis), paired=True, vectorized=True,
                       n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                       rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def compare_rankings(a: np.ndarray, b: np.ndarray, ks: Sequence[int] = (3, 5, 10, 100)) -> dict:
    """The App. C.2 / Table 4 statistics of two grids: Pearson, Spearman, layer-max, top-K overlap.

    ``ks`` larger than L*H are left out (tiny models). A correlation that is undefined (a
    constant vector, e.g. a one-layer model's layer maxima) is None. Returns a JSON-ready dict.
    """
    a, b = _check_pair(a, b)
    ks = [k for k in ks if k <= a.size]

    def defined(r: np.ndarray) -> float | None:
        return None if np.isnan(r) else float(r)

    return {
        "pearson": defined(correlation(a.ravel(), b.ravel(), "pearson")),
        "spearman": defined(correlation(a.ravel(), b.ravel(), "spearman")),
        "layer_max_pearson": defined(correlation(a.max(axis=1), b.max(axis=1), "pearson")),
        "top_k_overlap": {str(k): top_k_overlap(a, b, k) for k in ks},
        "chance_overlap_count": {str(k): chance_overlap(k, *a.shape) for k in ks},
    }
