"""PNG figures of `harness.plots` and their place in the run artifacts.

Each figure's drawn data is read back from the returned Figure and compared with the input or
with top-K sets worked out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from harness.analysis import HeadAnalysis
from harness.artifacts import write_artifacts
from harness.plots import plot_head_grid, plot_pointer_vs_writer, plot_vote_curves
from icir_common import UserInputError


def _assert_png(path):
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert 300 <= width <= 2000 and 200 <= height <= 2000
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left


def test_head_grid_image_holds_the_grid_and_names_the_best_head(tmp_path):
    grid = np.array([[0.1, 0.2, 0.3, 0.0], [0.4, 0.9, 0.2, 0.1], [0.3, 0.9, 0.5, 0.2]])
    figure = plot_head_grid(grid, tmp_path / "grid.png", "pointer R@1", chance=0.25)
    _assert_png(tmp_path / "grid.png")
    images = [image for axes in figure.axes for image in axes.images]
    assert len(images) == 1
    np.testing.assert_array_equal(images[0].get_array(), grid)
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert texts == ["L01H01 0.900"]  # tie at 0.9: the smaller flat index (layer 1, head 1) wins
    assert figure.axes[0].get_ylabel() == "layer" and figure.axes[0].get_xlabel() == "head"


def test_head_grid_rejects_a_non_grid(tmp_path):
    with pytest.raises(UserInputError):
        plot_head_grid(np.zeros(4), tmp_path / "grid.png", "x")
    assert not list(tmp_path.iterdir())


def _groups(figure) -> dict[str, set[tuple[float, float]]]:
    return {
        collection.get_gid(): {tuple(point) for point in collection.get_offsets()}
        for collection in figure.axes[0].collections
    }


def test_pointer_vs_writer_groups_are_the_top_k_sets(tmp_path):
    # 2 layers x 3 heads; top-2 by hand: pointer {L00H00 .9, L01H02 .8}, writer {L01H02 .7, L01H00 .6}.
    pointer = np.array([[0.9, 0.1, 0.2], [0.3, 0.4, 0.8]])
    writer = np.array([[0.05, 0.5, 0.1], [0.6, 0.2, 0.7]])
    figure = plot_pointer_vs_writer(pointer, writer, tmp_path / "scatter.png", top_k=2, pointer_chance=1 / 3)
    _assert_png(tmp_path / "scatter.png")
    point = {(l, h): (pointer[l, h], writer[l, h]) for l in range(2) for h in range(3)}
    assert _groups(figure) == {
        "pointer&writer": {point[1, 2]},
        "pointer-only": {point[0, 0]},
        "writer-only": {point[1, 0]},
        "other": {point[0, 1], point[0, 2], point[1, 1]},
    }
    chance_lines = [line for line in figure.axes[0].lines if line.get_linestyle() == ":"]
    assert [list(line.get_xdata()) for line in chance_lines] == [[1 / 3, 1 / 3]]


def test_pointer_vs_writer_clips_top_k_to_the_heads(tmp_path):
    pointer = np.array([[0.9, 0.1], [0.3, 0.4]])
    writer = np.array([[0.2, 0.5], [0.6, 0.1]])
    figure = plot_pointer_vs_writer(pointer, writer, tmp_path / "scatter.png", top_k=100)
    groups = _groups(figure)
    assert len(groups["pointer&writer"]) == 4 and not groups["other"] and not groups["pointer-only"]


def test_vote_curves_draw_the_input(tmp_path):
    curves = {"pointer ranking": {10: 0.7, 1: 0.5, 3: 0.6}, "writer ranking": {1: 0.4, 3: 0.45, 10: 0.55}}
    figure = plot_vote_curves(curves, tmp_path / "vote.png", chance=0.2)
    _assert_png(tmp_path / "vote.png")
    lines = {line.get_label(): line for line in figure.axes[0].lines}
    for label, curve in curves.items():
        assert list(lines[label].get_xdata()) == [1, 3, 10]
        assert list(lines[label].get_ydata()) == [curve[1], curve[3], curve[10]]
    assert list(lines["chance 0.200"].get_ydata()) == [0.2, 0.2]
    assert lines["pointer ranking"].get_linestyle() == "-" and lines["writer ranking"].get_linestyle() == "--"


def _analysis(writer: bool) -> HeadAnalysis:
    rng = np.random.default_rng(0)
    grid = rng.random((2, 3, 4))
    return HeadAnalysis(
        name="toy",
        tasks=["toy"],
        positions=("cattok", "last"),
        grids={"exact": grid, "eq3": rng.random((2, 3, 4))},
        primary="exact",
        chance=0.2,
        head_votes={"exact": rng.integers(0, 5, (8, 3, 4)), "eq3": rng.integers(0, 5, (8, 3, 4))},
        targets=rng.integers(0, 5, 8),
        discovery=True,
        transferred=None,
        vote_ranking=np.arange(12),
        vote_ranking_source="test",
        vote_r1={1: 0.5, 3: 0.6},
        writer_r1=rng.random((3, 4)) if writer else None,
        writer_ranking_source="test" if writer else None,
        writer_vote_r1={1: 0.4, 3: 0.55} if writer else None,
    )


@pytest.mark.parametrize("writer", [False, True])
def test_write_artifacts_adds_the_figures(tmp_path, writer):
    analysis = _analysis(writer)
    write_artifacts(analysis, tmp_path, "toy")
    expected = {"pointer_r1_exact_grid.png", "pointer_r1_eq3_grid.png", "vote_r1.png"} | (
        {"writer_r1_grid.png", "pointer_vs_writer.png"} if writer else set()
    )
    assert {p.name for p in tmp_path.glob("*.png")} == expected
    for name in expected:
        _assert_png(tmp_path / name)
