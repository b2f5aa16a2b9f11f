"""Head rankings and ranking statistics (App. C.2, E.2, I) with hand-worked values and scipy checks."""

import math

import numpy as np
import pytest
import scipy.stats

from harness.metrics import (
    chance_overlap,
    compare_rankings,
    correlation_difference_ci,
    head_ranking,
    layer_max_correlation,
    pearson,
    ranking_names,
    set_partition,
    spearman,
    top_heads,
    top_k_overlap,
)
from harness.metrics.rankings import correlation
from icir_common import UserInputError


def test_ranking_orders_ties_by_flat_head_index():
    grid = np.array([[0.5, 0.9], [0.9, 0.1]])
    np.testing.assert_array_equal(head_ranking(grid), [1, 2, 0, 3])
    assert ranking_names(head_ranking(grid), 2) == ["L00H01", "L01H00", "L00H00", "L01H01"]
    assert top_heads(grid, 2) == ["L00H01", "L01H00"]


def test_hand_worked_correlations():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    squares = np.array([[1.0, 4.0], [9.0, 16.0]])
    # deviations (-1.5, -.5, .5, 1.5) and (-6.5, -3.5, 1.5, 8.5): r = 25 / sqrt(5 * 129)
    assert pearson(a, squares) == pytest.approx(25 / math.sqrt(645))
    assert spearman(a, squares) == pytest.approx(1.0)
    swapped = np.array([[1.0, 3.0], [2.0, 4.0]])
    # one swapped pair: 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 2 / 60
    assert spearman(a, swapped) == pytest.approx(0.8)
    # per-layer maxima (3, 2, 5) and (1, 4, 6): r = 39 / sqrt(42 * 114)
    first = np.array([[1.0, 3.0], [2.0, 0.0], [5.0, 4.0]])
    second = np.array([[0.0, 1.0], [4.0, 1.0], [2.0, 6.0]])
    assert layer_max_correlation(first, second) == pytest.approx(39 / math.sqrt(42 * 114))


def test_correlations_match_scipy_with_ties_and_batches():
    rng = np.random.default_rng(2)
    a = np.round(rng.random((6, 8)), 1)  # rounding creates many ties
    b = np.round(a + 0.3 * rng.random((6, 8)), 1)
    assert pearson(a, b) == pytest.approx(scipy.stats.pearsonr(a.ravel(), b.ravel()).statistic, abs=1e-12)
    assert spearman(a, b) == pytest.approx(scipy.stats.spearmanr(a.ravel(), b.ravel()).statistic, abs=1e-12)
    # the vectorised form used by the bootstrap, row by row along axis 1
    x, y = rng.integers(0, 5, size=(7, 30)), rng.integers(0, 5, size=(7, 30))
    expected = [scipy.stats.spearmanr(x[i], y[i]).statistic for i in range(7)]
    np.testing.assert_allclose(correlation(x, y, "spearman", axis=1), expected, atol=1e-12)
    np.testing.assert_allclose(correlation(x.T, y.T, "pearson", axis=0),
                               [scipy.stats.pearsonr(x[i], y[i]).statistic for i in range(7)], atol=1e-12)


def test_top_k_overlap_and_chance():
    a = np.array([[0.9, 0.8, 0.7, 0.1, 0.0]])  # top-3: heads 0, 1, 2
    b = np.array([[0.7, 0.9, 0.0, 0.8, 0.1]])  # top-3: heads 1, 3, 0
    assert top_k_overlap(a, b, 3) == pytest.approx(2 / 3)
    assert top_k_overlap(a, b, 1) == 0.0
    assert top_k_overlap(a, b, 5) == 1.0
    assert chance_overlap(100, 36, 32) == pytest.approx(10000 / 1152)
    stats = compare_rankings(a, b, ks=(1, 3, 100))
    assert stats["top_k_overlap"] == {"1": 0.0, "3": pytest.approx(2 / 3)}
    assert stats["chance_overlap_count"] == {"1": pytest.approx(1 / 5), "3": pytest.approx(9 / 5)}
    assert stats["spearman"] == pytest.approx(scipy.stats.spearmanr(a.ravel(), b.ravel()).statistic)
    assert stats["layer_max_pearson"] is None  # one layer: a single maximum per grid
    with pytest.raises(UserInputError, match="K = 6"):
        top_k_overlap(a, b, 6)


def test_set_partition_membership_and_order():
    # flat heads 0..5 (2 layers x 3 heads)
    pointer = np.array([[0.9, 0.1, 0.8], [0.2, 0.7, 0.6]])  # ranks: 0, 2, 4, 5, 3, 1
    writer = np.array([[0.3, 0.9, 0.2], [0.8, 0.6, 0.1]])  # ranks: 1, 3, 4, 0, 2, 5
    part = set_partition(pointer, writer, k=3)
    # pointer top-3: L00H00, L00H02, L01H01; writer top-3: L00H01, L01H00, L01H01
    assert part.overlap == ["L01H01"]
    assert part.pointer_only == ["L00H00", "L00H02"]
    assert part.writer_only == ["L00H01", "L01H00"]
    assert part.pointer_rank == {"L00H00": 1, "L00H02": 2, "L01H01": 3, "L01H00": 5, "L00H01": 6}
    assert part.writer_rank["L01H01"] == 3 and part.writer_rank["L00H00"] == 4
    four = set_partition(pointer, writer, k=4)
    # pointer top-4 adds L01H02; writer top-4 adds L00H00; overlap in pointer order
    assert four.overlap == ["L00H00", "L01H01"]
    assert four.pointer_only == ["L00H02", "L01H02"]
    assert four.writer_only == ["L00H01", "L01H00"]


def test_correlation_difference_bootstrap_is_seeded_and_brackets_delta():
    rng = np.random.default_rng(3)
    reference = rng.random((8, 16))
    close = reference + 0.05 * rng.random((8, 16))
    far = reference + 0.8 * rng.random((8, 16))
    result = correlation_difference_ci(reference, close, far, n_resamples=2000, seed=7)
    assert result.delta == pytest.approx(spearman(reference, close) - spearman(reference, far))
    assert 0 < result.low <= result.delta <= result.high
    again = correlation_difference_ci(reference, close, far, n_resamples=2000, seed=7)
    assert (again.low, again.high) == (result.low, result.high)
    other = correlation_difference_ci(reference, close, far, n_resamples=2000, seed=8)
    assert (other.low, other.high) != (result.low, result.high)


def test_bad_grids_are_rejected():
    with pytest.raises(UserInputError, match="different shapes"):
        pearson(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(UserInputError, match="constant"):
        spearman(np.ones((2, 2)), np.arange(4.0).reshape(2, 2))
    with pytest.raises(UserInputError, match="NaN"):
        head_ranking(np.array([[np.nan, 1.0]]))
