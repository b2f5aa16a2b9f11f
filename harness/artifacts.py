"""Artifacts of a run, written next to lm-eval's results: grids, rankings, per-document records, probes, plots.

One folder per task (and per pooled group); data in JSON and safetensors only (never code), plus
PNG figures of the same numbers (`harness.plots`)::

    summary.json             table metrics (`pointer_values`: ``pointer_r1`` is the ranking score's,
                             ``pointer_r1_exact`` Eq. 1's, ``pointer_r1_eq3`` Eq. 3's), top
                             pointer/writer heads (LxxHyy, R@1), sources, notes
    pointer_r1_exact.json    {position: {LxxHyy: R@1}} for every readout position, chance (Eq. 1)
    pointer_r1_exact.safetensors  "pointer_r1_exact" [P, L, H] float64 (metadata: positions)
    pointer_r1_eq3.json, pointer_r1_eq3.safetensors: the same for the Eq. 3 proxy
    pointer_ranking.json     the ranking this run votes with (its ranking score, at the reported
                             position; `rankings_io`): what heads_ranking=FILE takes
    pointer_ranking_exact.json, pointer_ranking_eq3.json: the ranking of each score
    vote_r1.json             {"pointer": {K: R@1}, "writer": {K: R@1} | null}, ranking sources
    writer_r1.json           writer R@1 grid and fit details (ICIR-MCQ) or in-context grid (VHs)
    writer_r1.safetensors    "writer_r1" [L, H] float64
    writer_ranking.json      the writer ranking
    writer_probes/           the probes fit at the reported position (ICIR-MCQ; `WriterProbes.save`);
                             writer_probes=DIR (other positions: writer_probes@<position>/)
    documents.jsonl          per document (tasks only): doc_id, answer, correct, target_image,
                             pointer_head, pointer_pick, pointer_hit (`analysis.document_records`)
    head_records.safetensors per-document head records (tasks only): "pointer_image_exact"
                             [docs, L, H] int16, the image each head points to at the reported
                             position under Eq. 1, "pointer_image_eq3" under Eq. 3;
                             "target_image" [docs] int16; "doc_id" [docs] int64; with writer
                             probes (VHs) "writer_image" [docs, L, H] int16, each head's probe's
                             pick among the document's own images
    writer_records.safetensors  the writer fit's per-document records (ICIR-MCQ, the unit that fit
                             the probes): "writer_pick" [R, L, H] int32, the pool item each head's
                             probe ranks first for each report document; "writer_target" [R]
                             int64 (its target's pool index); "task_index" [R] (into the
                             summary's tasks), "doc_id" [R] int64
    pointer_r1_exact_grid.png, pointer_r1_eq3_grid.png: layer x head pointer R@1 heatmaps of each
                             score at the reported position (Figure 4)
    vote_r1.png              vote R@1 over K, pointer and (VHs with probes) writer ranking (Figure 6)
    writer_r1_grid.png       layer x head writer R@1 heatmap (Figure 5), when writer R@1 exists
    pointer_vs_writer.png    per-head pointer vs writer R@1, top-100 set membership (Figure 2), idem

A text needle task (App. K) has no image target; its folder holds instead::

    text_retrieval.json      {"grids": {"exact"|"eq3": {LxxHyy: mean needle mass}}, "top_heads", ...}
    text_ranking.json        the heads by mean needle mass (the run's pointer mode's score)
    needle_mass_grid.png     layer x head heatmap of the mean needle mass
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from harness.analysis import HeadAnalysis, TextRetrieval
from harness.lm_eval_plugin.rankings_io import ranking_document
from harness.constants import POINTER_SCORES, TOP_K_SETS
from harness.metrics.rankings import chance_overlap, grid_by_name, top_head_values, top_k_overlap
from harness.plots import plot_head_grid, plot_pointer_vs_writer, plot_vote_curves
from icir_common import atomic_file, flat_head_name, write_json

TOP_K = 10


def _save_tensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    with atomic_file(path) as tmp:
        save_file({name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in tensors.items()}, str(tmp),
                  metadata=metadata)


def _save_arrays(path: Path, name: str, array: np.ndarray, metadata: dict[str, str]) -> None:
    _save_tensors(path, {name: np.asarray(array, dtype=np.float64)}, metadata)


def score_suffixes(analysis: HeadAnalysis) -> tuple[tuple[str, str], ...]:
    """``((score, name suffix), ...)`` of a unit's pointer metrics (`POINTER_SUFFIXES`): the bare
    name is the unit's ranking score (protocol ``icir-heads/2``: Eq. 3), ``_exact`` is Eq. 1 and
    ``_eq3`` is Eq. 3, whatever the ranking score."""
    return ((analysis.primary, ""), *((score, f"_{score}") for score in POINTER_SCORES))


def pointer_values(analysis: HeadAnalysis) -> dict[str, float | int | None]:
    """The pointer metrics of one unit, by `harness.constants.POINTER_METRICS` name (None: not defined).

    ``pointer_r1`` / ``pointer_top_head``: under the unit's ranking score (`score_suffixes`), the
    transferred ranking's top head, else the best head of a discovery set (Table 1), else None;
    ``pointer_r1_exact`` / ``pointer_r1_eq3`` give the same head's R@1 under Eq. 1 / Eq. 3 on a
    transfer set, and each score's own best head on a discovery set. ``pointer_r1_oracle``: the best
    head chosen on these documents, reported for transfer sets and transferred rankings.
    ``pointer_rank_spearman`` is None where a grid is constant.
    """
    n_heads = analysis.table_grid.shape[1]
    values: dict[str, float | int | None] = {"chance_r1": analysis.chance}
    for score, suffix in score_suffixes(analysis):
        reported = analysis.reported(score)
        top = int(analysis.vote_ranking[0]) if analysis.transferred else analysis.top_head(score)
        values[f"pointer_r1{suffix}"] = reported
        values[f"pointer_top_head{suffix}"] = None if reported is None else top
        values[f"pointer_r1_median{suffix}"] = analysis.median(score)
        oracle = analysis.transferred is not None or not analysis.discovery
        values[f"pointer_r1_oracle{suffix}"] = analysis.best(score) if oracle else None
        values[f"pointer_oracle_head{suffix}"] = flat_head_name(analysis.top_head(score), n_heads) if oracle else None
    agreement = analysis.score_agreement
    values["pointer_rank_spearman"] = agreement["spearman"]
    values["pointer_top10_overlap"] = agreement["top10_overlap"]
    return values


def pointer_writer_overlap(analysis: HeadAnalysis) -> dict | None:
    """``{"k", "count", "chance"}``: heads in both the pointer and the writer top-K sets (App. J.1).

    K is `TOP_K_SETS` capped at L*H; chance is ``K^2 / (L*H)`` (`chance_overlap`). None without
    writer R@1.
    """
    if analysis.writer_r1 is None:
        return None
    k = min(TOP_K_SETS, analysis.table_grid.size)
    count = round(top_k_overlap(analysis.table_grid, analysis.writer_r1, k) * k)
    return {"k": k, "count": count, "chance": chance_overlap(k, *analysis.table_grid.shape)}


def summary(analysis: HeadAnalysis, name: str) -> dict:
    """The JSON summary of one analysis (``summary.json``; also what the CLI prints)."""
    values = pointer_values(analysis)
    n_heads = analysis.table_grid.shape[1]
    heads = {}
    for _, suffix in score_suffixes(analysis):
        top = values[f"pointer_top_head{suffix}"]
        heads[f"pointer_top_head{suffix}"] = None if top is None else flat_head_name(top, n_heads)
    return {
        "name": name,
        "tasks": analysis.tasks,
        "n_docs": analysis.n_docs,
        "position": analysis.positions[0],
        "ranking_score": analysis.primary,
        **values,
        **heads,
        "pointer_top_head_index": values["pointer_top_head"],
        "writer_r1": None if analysis.writer_r1 is None else analysis.writer_best,
        "writer_top_head": None if analysis.writer_r1 is None else top_head_values(analysis.writer_r1, 1)[0][0],
        "pointer_writer_overlap": pointer_writer_overlap(analysis),
        "vote_r1": {str(k): v for k, v in analysis.vote_r1.items()},
        "writer_vote_r1": None
        if analysis.writer_vote_r1 is None
        else {str(k): v for k, v in analysis.writer_vote_r1.items()},
        **{f"top_pointer_heads{suffix}": top_head_values(analysis.grids[score][0], TOP_K)
           for score, suffix in score_suffixes(analysis)},
        "top_writer_heads": None if analysis.writer_r1 is None else top_head_values(analysis.writer_r1, TOP_K),
        "vote_ranking": analysis.vote_ranking_source,
        "writer_ranking": analysis.writer_ranking_source,
        "notes": analysis.notes,
    }


def write_artifacts(analysis: HeadAnalysis, folder: Path, name: str, documents: list[dict] | None = None) -> Path:
    """Write every artifact of `analysis` into ``folder`` (created; files replaced one by one).

    Args:
        documents: the task's per-document records (`analysis.document_records`); None for a
            pooled group (its documents are its tasks').

    Returns:
        `folder`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    positions = list(analysis.positions)
    write_json(folder / "summary.json", summary(analysis, name))
    for score in POINTER_SCORES:
        grids = analysis.grids[score]
        write_json(
            folder / f"pointer_r1_{score}.json",
            {"chance": analysis.chance, "grids": {p: grid_by_name(g) for p, g in zip(positions, grids)}},
        )
        metadata = {"positions": ",".join(positions)}
        _save_arrays(folder / f"pointer_r1_{score}.safetensors", f"pointer_r1_{score}", grids, metadata)
        ranking = ranking_document(grids[0], "pointer", positions[0], score)
        write_json(folder / f"pointer_ranking_{score}.json", ranking)
    # The ranking this run votes with (its pointer mode's score): what heads_ranking=FILE takes.
    voting = ranking_document(analysis.table_grid, "pointer", positions[0], analysis.primary)
    write_json(folder / "pointer_ranking.json", voting)
    write_json(
        folder / "vote_r1.json",
        {
            "pointer": {str(k): v for k, v in analysis.vote_r1.items()},
            "pointer_ranking": analysis.vote_ranking_source,
            "writer": None
            if analysis.writer_vote_r1 is None
            else {str(k): v for k, v in analysis.writer_vote_r1.items()},
            "writer_ranking": analysis.writer_ranking_source,
            "note": "K above the number of heads votes with all heads",
        },
    )
    if analysis.writer_r1 is not None:
        _write_writer(analysis, folder)
    if documents is not None:
        _write_documents(analysis, documents, folder)
    _write_plots(analysis, folder, name)
    return folder


def _write_writer(analysis: HeadAnalysis, folder: Path) -> None:
    """Writer R@1 grids, ranking and (when fit in this run) the probes of every readout position."""
    position = analysis.positions[0]
    if analysis.writer_fits:
        details = {p: fit.to_json() for p, fit in analysis.writer_fits.items()}
    else:
        details = {position: {"writer_r1": grid_by_name(analysis.writer_r1)}}
    write_json(folder / "writer_r1.json", details)
    _save_arrays(folder / "writer_r1.safetensors", "writer_r1", analysis.writer_r1, {"position": position})
    write_json(folder / "writer_ranking.json", ranking_document(analysis.writer_r1, "writer", position))
    if analysis.writer_records is not None:
        _save_tensors(folder / "writer_records.safetensors", analysis.writer_records, {"position": position})
    for p, fit in analysis.writer_fits.items():
        fit.probes.save(folder / ("writer_probes" if p == position else f"writer_probes@{p}"), overwrite=True)


def _write_documents(analysis: HeadAnalysis, documents: list[dict], folder: Path) -> None:
    """``documents.jsonl`` and ``head_records.safetensors`` of one task (module docstring)."""
    with atomic_file(folder / "documents.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in documents))
    doc_ids = [row["doc_id"] for row in documents if row["target_image"] is not None]
    tensors = {
        **{f"pointer_image_{score}": analysis.head_votes[score].astype(np.int16) for score in POINTER_SCORES},
        "target_image": analysis.targets.astype(np.int16),
        "doc_id": np.array(doc_ids, dtype=np.int64),
    }
    if analysis.writer_votes is not None:
        tensors["writer_image"] = analysis.writer_votes.astype(np.int16)
    _save_tensors(folder / "head_records.safetensors", tensors, {"position": analysis.positions[0]})


def _write_plots(analysis: HeadAnalysis, folder: Path, name: str) -> None:
    """The PNG figures of the module docstring (writer figures only when writer R@1 exists)."""
    at = f"R@1 at {analysis.positions[0]}"
    for score, label in (("exact", "exact (Eq. 1)"), ("eq3", "Eq. 3")):
        plot_head_grid(analysis.grids[score][0], folder / f"pointer_r1_{score}_grid.png",
                       f"{name}: pointer {label} {at}", analysis.chance)
    curves = {"pointer ranking": analysis.vote_r1}
    if analysis.writer_vote_r1 is not None:
        curves["writer ranking"] = analysis.writer_vote_r1
    plot_vote_curves(curves, folder / "vote_r1.png", analysis.chance)
    if analysis.writer_r1 is None:
        return
    # Pool R@1 (ICIR-MCQ) has chance 1/pool size; in-context writer R@1 (VHs) shares the pointer's mean(1/N).
    fit = analysis.writer_fits.get(analysis.positions[0])
    writer_chance = fit.chance if fit else analysis.chance
    plot_head_grid(analysis.writer_r1, folder / "writer_r1_grid.png", f"{name}: writer {at}", writer_chance)
    plot_pointer_vs_writer(
        analysis.table_grid, analysis.writer_r1, folder / "pointer_vs_writer.png", pointer_chance=analysis.chance
    )


TEXT_POSITION = "last"  # App. K reads the needle mass where the answer is generated


def write_text_artifacts(text: TextRetrieval, folder: Path) -> Path:
    """Write the artifacts of a text needle task (module docstring) into `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    grid = text.grids[text.primary]
    write_json(folder / "text_retrieval.json", {
        "kind": "text_retrieval", "task": text.task, "n_docs": text.n_docs, "position": TEXT_POSITION,
        "score": text.primary, "top_heads": top_head_values(grid, min(TOP_K, grid.size)),
        "grids": {score: grid_by_name(g) for score, g in text.grids.items()},
        "note": "mean attention mass on the needle sentence's tokens at the last prefill position (App. K)",
    })
    write_json(folder / "text_ranking.json", ranking_document(grid, "text_needle_mass", TEXT_POSITION, text.primary))
    plot_head_grid(grid, folder / "needle_mass_grid.png", f"{text.task}: mean attention mass on the needle",
                   label="attention mass")
    return folder
