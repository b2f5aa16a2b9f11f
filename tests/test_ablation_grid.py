"""The ablation grid's parts on hand-worked inputs: App. I arms, random controls, McNemar, statistics."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from harness.ablation.arms import BASELINE, RANDOM, build_grid, random_heads
from harness.ablation.stats import cell_stats, mcnemar_exact
from icir_common import UserInputError

# 2 layers x 4 heads; rankings worked by hand.
POINTER = ["L00H00", "L01H02", "L00H01", "L01H00", "L00H03", "L01H01", "L00H02", "L01H03"]
WRITER = ["L01H02", "L01H03", "L00H00", "L00H02", "L00H01", "L01H00", "L01H01", "L00H03"]


def test_partition_and_arm_orders():
    grid = build_grid(POINTER, WRITER, 2, 4, ks=(1, 2, 3), seeds=(0,), top=4)
    # pointer top-4: L00H00 L01H02 L00H01 L01H00; writer top-4: L01H02 L01H03 L00H00 L00H02
    assert grid.arms == {"overlap": ["L00H00", "L01H02"],  # pointer order
                         "pointer_only": ["L00H01", "L01H00"],  # pointer order
                         "writer_only": ["L01H03", "L00H02"]}  # writer order
    names = [cell.name for cell in grid.cells]
    assert names == ["baseline", "overlap@1", "overlap@2", "pointer_only@1", "pointer_only@2", "writer_only@1",
                     "writer_only@2", "random@1#0", "random@2#0", "random@3#0"]
    assert grid.short == {"overlap": [3], "pointer_only": [3], "writer_only": [3]}
    cells = {cell.name: cell.heads for cell in grid.cells}
    assert cells["writer_only@2"] == ("L01H03", "L00H02") and cells[BASELINE] == ()
    assert any("no cell at K = 3" in note for note in grid.notes)


def test_without_writer_ranking_only_the_pointer_arm():
    grid = build_grid(POINTER, None, 2, 4, ks=(2,), seeds=(0,), top=3)
    assert grid.arms == {"pointer_only": ["L00H00", "L01H02", "L00H01"]}
    assert "only the pointer arm" in grid.notes[0]


def test_budgets_beyond_the_model_are_refused():
    with pytest.raises(UserInputError, match=r"--ks \[9\] outside 1..8"):
        build_grid(POINTER, WRITER, 2, 4, ks=(2, 9))


def test_random_controls_are_seeded_per_seed_and_k():
    first = random_heads(6, 8, 5, seed=1)
    assert first == random_heads(6, 8, 5, seed=1) and len(set(first)) == 5
    assert first == tuple(sorted(first, key=lambda n: (int(n[1:3]), int(n[4:6]))))
    assert first != random_heads(6, 8, 5, seed=2)
    # uniform over heads: over many seeds every head is drawn about K / (L*H) of the time
    counts = np.zeros(48)
    for seed in range(3000):
        for name in random_heads(6, 8, 5, seed):
            counts[int(name[1:3]) * 8 + int(name[4:6])] += 1
    assert np.allclose(counts / 3000, 5 / 48, atol=0.025)
    grid = build_grid(POINTER, WRITER, 2, 4, ks=(2,), seeds=(0, 1, 2), top=4)
    randoms = [c for c in grid.cells if c.arm == RANDOM]
    assert [c.seed for c in randoms] == [0, 1, 2]
    assert all(c.heads == random_heads(2, 4, 2, c.seed) for c in randoms)


def test_mcnemar_on_hand_counts():
    # 7 documents only the arm gets right, 1 only the control: p = 2 * (C(8,0) + C(8,1)) / 2^8
    a = [True] * 7 + [False] + [True] * 5 + [False] * 3
    b = [False] * 7 + [True] + [True] * 5 + [False] * 3
    p, a_only, b_only = mcnemar_exact(a, b)
    assert (a_only, b_only) == (7, 1)
    assert p == pytest.approx(18 / 256, abs=1e-15) == pytest.approx(binomtest(7, 8, 0.5).pvalue)
    assert mcnemar_exact([True, False], [True, False]) == (1.0, 0, 0)
    assert mcnemar_exact([False] * 10, [True] * 10)[0] == pytest.approx(2 / 1024)


def test_cell_statistics_by_hand():
    grid = build_grid(POINTER, WRITER, 2, 4, ks=(1,), seeds=(0, 1), top=4)
    n = 10
    outcomes = {
        "baseline": np.array([True] * 9 + [False]),
        "overlap@1": np.array([True] * 2 + [False] * 8),
        "pointer_only@1": np.array([True] * 8 + [False] * 2),
        "writer_only@1": np.array([True] * 9 + [False]),
        "random@1#0": np.array([True] * 9 + [False]),
        "random@1#1": np.array([True] * 7 + [False] * 3),
    }
    stats = {(s.arm, s.k, s.seed): s for s in cell_stats(5, grid.cells, outcomes)}
    overlap = stats[("overlap", 1, -1)]
    assert overlap.n == n and overlap.accuracy == pytest.approx(0.2) and overlap.drop == pytest.approx(0.7)
    assert overlap.random_mean == pytest.approx(0.8) and overlap.random_sd == pytest.approx(np.std([0.9, 0.7], ddof=1))
    assert overlap.minus_random == pytest.approx(-0.6)
    # vs seed 0: the control alone right on docs 2..8 (7), the arm alone on none -> p = 2 / 2^7
    assert overlap.mcnemar_p[0] == pytest.approx(2 / 128)
    assert overlap.mcnemar_p[1] == pytest.approx(binomtest(0, 5, 0.5).pvalue)
    assert overlap.significant == 1  # p = 0.0625 against seed 1 is not below 0.05
    assert stats[("baseline", 0, -1)].minus_random is None and stats[("baseline", 0, -1)].mcnemar_p is None
    assert stats[("random", 1, 0)].mcnemar_p is None


def test_rankings_of_another_shape_are_refused(shared, tmp_path):
    """The tiny model's rankings (4 x 4 heads) for the demo model (4 x 6): one line, before it loads."""
    from harness.ablation.arms import load_rankings

    (run,) = [p for p in (shared / "ref_mcq").iterdir() if p.is_dir()]
    with pytest.raises(UserInputError, match="is for 4 layers x 4 heads; this model has 4 x 6"):
        load_rankings(run / "icir_artifacts" / "icir_mcq_n5", 4, 6)
    pointer, writer = load_rankings(run / "icir_artifacts" / "icir_mcq_n5", 4, 4)
    assert len(pointer) == 16 and sorted(pointer) == sorted(writer)
