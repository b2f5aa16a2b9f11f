"""PNG figures of per-head R@1 grids and vote curves, drawn next to the numbers of a run.

Figures mirror the paper's: the layer x head R@1 heatmap (App. C.1 Figure 4 for pointer heads,
App. D Figure 5 for writer heads), the per-head pointer R@1 vs writer R@1 scatter coloured by
top-K set membership (§5.3 Figure 2, sets from `harness.metrics.rankings.set_partition`), and the
top-K majority-vote R@1 curves (App. H Figure 6).

Each function takes plain arrays, writes one PNG atomically (temporary file in the same folder,
then rename, so no half-written image is left behind) and returns the `matplotlib.figure.Figure`.
Figures are built with the Agg canvas directly, never through ``pyplot``, so no figure stays
registered in a global figure manager.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.metrics.rankings import as_flat_indices, check_grid, head_ranking, set_partition
from icir_common import UserInputError, atomic_file, flat_head_name

FIGSIZE = (6.4, 4.8)  # inches; with DPI, a 640 x 480 px image
DPI = 100
CHANCE_STYLE = {"color": "0.3", "linestyle": ":", "linewidth": 1.2}
# §5.3 Figure 2's four head groups, in drawing order (most numerous first, so the top sets stay visible).
SCATTER_GROUPS = {
    "other": "0.75",
    "writer-only": "tab:orange",
    "pointer-only": "tab:blue",
    "pointer&writer": "tab:red",
}
CURVE_STYLES = ("-", "--", "-.", ":")  # App. H Figure 6: solid pointer ranking, dashed writer ranking


def _new_figure() -> tuple[Figure, object]:
    figure = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _save_png(figure: Figure, path: str | os.PathLike) -> None:
    """Save `figure` as PNG at `path` through a temporary file in the same folder (`atomic_file`).

    No Software chunk (matplotlib writes its version there), so the same numbers give the same
    bytes on every machine: the leaderboard site is byte-reproducible.
    """
    with atomic_file(path) as tmp:
        figure.savefig(tmp, format="png", dpi=DPI, metadata={"Software": None})


def plot_head_grid(grid: np.ndarray, path: str | os.PathLike, title: str, chance: float | None = None,
                   label: str = "R@1") -> Figure:
    """Heatmap of a per-head grid (R@1: App. C.1 Figure 4 / App. D Figure 5), written to `path`.

    Args:
        grid: float ``[L, H]`` value per head (layers on the y axis, layer 0 at the bottom; heads on x).
        path: the PNG to write (replaced if present).
        title: figure title; the best head (ties: smaller flat index ``l*H + h``) is annotated
            as ``LxxHyy value`` on its cell.
        chance: chance R@1, drawn as a dotted line on the colourbar when given.
        label: the colourbar's label (what the grid holds).

    Returns:
        The figure (its single `AxesImage` holds `grid` unchanged).

    Raises:
        UserInputError: `grid` not a non-empty 2-D array, or with NaN entries.
    """
    grid = check_grid(grid, "R@1 grid")
    figure, axes = _new_figure()
    image = axes.imshow(grid, origin="lower", aspect="auto", interpolation="nearest", cmap="viridis")
    colourbar = figure.colorbar(image, ax=axes, label=label)
    if chance is not None:
        colourbar.ax.axhline(chance, **CHANCE_STYLE)
    best = int(head_ranking(grid)[0])
    layer, head = divmod(best, grid.shape[1])
    axes.plot(head, layer, marker="o", markersize=10, markerfacecolor="none", markeredgecolor="red")
    axes.annotate(
        f"{flat_head_name(best, grid.shape[1])} {grid[layer, head]:.3f}",
        (head, layer),
        xytext=(6, 6),
        textcoords="offset points",
        color="red",
        fontsize=9,
    )
    axes.set_xlabel("head")
    axes.set_ylabel("layer")
    axes.set_title(title if chance is None else f"{title} (chance {chance:.3f})")
    _save_png(figure, path)
    return figure


def plot_pointer_vs_writer(
    pointer: np.ndarray,
    writer: np.ndarray,
    path: str | os.PathLike,
    top_k: int = 100,
    pointer_chance: float | None = None,
) -> Figure:
    """Per-head pointer R@1 vs writer R@1 scatter (§5.3 Figure 2), written to `path`.

    Each head is one point, in one of four groups by top-K membership (App. I
    `set_partition`): ``pointer&writer``, ``pointer-only``, ``writer-only`` and ``other``. Each
    group is one scatter collection whose gid is the group name (legend label: name and count).

    Args:
        pointer, writer: float ``[L, H]`` R@1 grids of the same shape.
        path: the PNG to write (replaced if present).
        top_k: size K of each top-K set, clipped to L*H (tiny models).
        pointer_chance: pointer chance R@1, drawn as a dotted vertical line when given.

    Returns:
        The figure.

    Raises:
        UserInputError: grids of different shapes, with NaN entries, or ``top_k < 1``.
    """
    pointer, writer = check_grid(pointer, "pointer grid"), check_grid(writer, "writer grid")
    if top_k < 1:
        raise UserInputError(f"top_k must be at least 1, got {top_k}")
    k = min(top_k, pointer.size)
    partition = set_partition(pointer, writer, k)
    members = {
        "pointer&writer": partition.overlap,
        "pointer-only": partition.pointer_only,
        "writer-only": partition.writer_only,
    }
    group_of = np.full(pointer.size, "other", dtype=object)
    for group, heads in members.items():
        group_of[as_flat_indices(heads, *pointer.shape)] = group
    figure, axes = _new_figure()
    for group, colour in SCATTER_GROUPS.items():
        chosen = group_of == group
        axes.scatter(
            pointer.ravel()[chosen],
            writer.ravel()[chosen],
            s=14,
            color=colour,
            label=f"{group} ({int(chosen.sum())})",
            gid=group,
        )
    if pointer_chance is not None:
        axes.axvline(pointer_chance, label=f"pointer chance {pointer_chance:.3f}", **CHANCE_STYLE)
    axes.set_xlabel("pointer R@1")
    axes.set_ylabel("writer R@1")
    axes.set_title(f"pointer vs writer R@1 per head (top-{k} sets)")
    axes.legend(fontsize=8)
    _save_png(figure, path)
    return figure


def plot_vote_curves(
    curves: Mapping[str, Mapping[int, float]], path: str | os.PathLike, chance: float | None = None
) -> Figure:
    """Top-K majority-vote R@1 against K, one line per ranking (App. H Figure 6), written to `path`.

    Args:
        curves: ``{label: {K: R@1}}``, e.g. ``{"pointer": ..., "writer": ...}``; each line is
            drawn over its K in increasing order (log-scaled K axis), first solid, then dashed.
        path: the PNG to write (replaced if present).
        chance: chance R@1, drawn as a dotted horizontal line when given.

    Returns:
        The figure (one `Line2D` per curve, labelled with its key).

    Raises:
        UserInputError: no curves, an empty curve, or more curves than line styles.
    """
    if not curves or any(not curve for curve in curves.values()):
        raise UserInputError("vote curves need at least one non-empty {K: R@1} curve")
    if len(curves) > len(CURVE_STYLES):
        raise UserInputError(f"at most {len(CURVE_STYLES)} vote curves per figure, got {len(curves)}")
    figure, axes = _new_figure()
    for (label, curve), style in zip(curves.items(), CURVE_STYLES):
        ks = sorted(curve)
        axes.plot(ks, [curve[k] for k in ks], linestyle=style, marker="o", label=label)
    if chance is not None:
        axes.axhline(chance, label=f"chance {chance:.3f}", **CHANCE_STYLE)
    axes.set_xscale("log")
    axes.set_xlabel("K (top-K heads voting)")
    axes.set_ylabel("R@1")
    axes.set_title("top-K majority-vote R@1")
    axes.legend(fontsize=8)
    _save_png(figure, path)
    return figure


def plot_dose_response(curves: Mapping[int, Mapping[str, Mapping[int, float]]],
                       random_band: Mapping[int, Mapping[int, tuple[float, float]]], baseline: Mapping[int, float],
                       path: str | os.PathLike) -> Figure:
    """Ablation dose-response (§6.2 Figure 3 / App. J.2 Figure 7): one panel per haystack size N.

    Args:
        curves: ``{N: {arm: {K: accuracy}}}`` of the set-partition arms.
        random_band: ``{N: {K: (mean, sd)}}`` of the random controls (drawn as a line and a +-1 sd band).
        baseline: ``{N: unablated accuracy}`` (a dotted line).
        path: the PNG to write.

    Returns:
        The figure (per panel one `Line2D` per arm, labelled with the arm, then "random (mean)").
    """
    sizes = sorted(baseline)
    figure = Figure(figsize=(4 * len(sizes), 3.4), dpi=DPI)
    FigureCanvasAgg(figure)
    axes_list = figure.subplots(1, len(sizes), squeeze=False, sharey=True)[0]
    for axes, n in zip(axes_list, sizes):
        axes.axhline(baseline[n], label="unablated", **CHANCE_STYLE)
        for arm, curve in curves.get(n, {}).items():
            ks = sorted(curve)
            axes.plot(ks, [curve[k] for k in ks], marker="o", label=arm)
        band = random_band.get(n) or {}
        if band:
            ks = sorted(band)
            mean, sd = np.array([band[k][0] for k in ks]), np.array([band[k][1] for k in ks])
            axes.plot(ks, mean, color="black", label="random (mean)")
            axes.fill_between(ks, mean - sd, mean + sd, color="black", alpha=0.15)
        axes.set_title(f"VHs N={n}")
        axes.set_xlabel("heads ablated (K)")
    axes_list[0].set_ylabel("accuracy")
    axes_list[-1].legend(fontsize=7)
    figure.tight_layout()
    _save_png(figure, path)
    return figure


def plot_readout_positions(series: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                           path: str | os.PathLike) -> Figure:
    """Readout-position study (App. G, Table 10): per position, one line per (model, quantity).

    Args:
        series: ``{model: {quantity: {position: value}}}``, quantities such as "best pointer R@1",
            "pointer rho vs cattok", "best writer R@1"; None values are left out.
        path: the PNG to write.

    Returns:
        The figure (one `Line2D` per model and quantity, labelled ``"model: quantity"``).
    """
    figure, axes = _new_figure()
    positions: list[str] = []
    for quantities in series.values():
        for values in quantities.values():
            positions += [p for p in values if p not in positions]
    for model, quantities in series.items():
        for (quantity, values), style in zip(quantities.items(), CURVE_STYLES * 4):
            kept = [(positions.index(p), v) for p, v in values.items() if v is not None]
            if kept:
                axes.plot(*zip(*kept), linestyle=style, marker="o", label=f"{model}: {quantity}")
    axes.set_xticks(range(len(positions)), positions)
    axes.set_xlabel("readout position")
    axes.set_title("pointer and writer heads by readout position")
    axes.legend(fontsize=7)
    _save_png(figure, path)
    return figure
