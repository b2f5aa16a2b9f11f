"""Every reported aggregate of a submission, recomputed from its per-document records."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.constants import ICIR_MCQ_GROUP, ICIR_MCQ_TASKS, POOLED_GROUPS, VOTE_KS
from harness.leaderboard.checks import Report, close_enough, load_json, load_tensors
from icir_common import UserInputError


def check_unit(root: Path, manifest: Mapping[str, Any], listed: set[str], unit: str, tasks: list[str],
                report: Report) -> None:
    folder = f"artifacts/{unit}"
    for relative in sorted(n for n in listed if n.startswith(folder + "/")):
        if relative.endswith(".safetensors"):
            load_tensors(root, relative, report)
        elif relative.endswith(".json"):
            load_json(root, relative, listed, report)
    summary = load_json(root, f"{folder}/summary.json", listed, report)
    if summary is None:
        return
    if unit not in tasks:  # a pooled group: its documents are its tasks'; not recomputed in this slice
        report.notes.append(f"{unit}: pooled group, aggregates not recomputed (its tasks' are)")
        return
    task = unit
    records = _task_records(root, manifest, listed, folder, task, report)
    if records is None:
        return
    documents, pointer, pointer_eq3, targets = records
    results = load_json(root, manifest["results"][task], listed, report) if task in manifest["results"] else None
    row = ((results or {}).get("results") or {}).get(task)
    if row is None:
        report.fail(f"{task}: not in its results file")
        row = {}
    where = f"{task}"
    n_layers, n_heads = manifest["model"]["n_layers"], manifest["model"]["n_heads"]
    accuracy = float(np.mean([bool(d.get("correct")) for d in documents])) if documents else math.nan
    report.compare(f"{where} acc", row.get("acc,none"), accuracy)
    _check_pointer(root, manifest, listed, folder, task, summary, row, pointer, pointer_eq3, targets,
                   n_layers, n_heads, report)


def _task_records(root: Path, manifest: Mapping[str, Any], listed: set[str], folder: str, task: str,
                  report: Report):
    docs_file, heads_file = f"{folder}/documents.jsonl", f"{folder}/head_records.safetensors"
    for relative in (docs_file, heads_file):
        if relative not in listed:
            report.fail(f"{relative}: missing (per-document records are required)")
            return None
    try:
        documents = [json.loads(line) for line in (root / docs_file).read_text().splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        report.fail(f"{docs_file}: not JSON lines ({err})")
        return None
    expected = manifest["protocol"]["datasets"].get(task, {}).get("documents")
    if len(documents) != expected:
        report.fail(f"{docs_file}: {len(documents)} documents, the protocol record's dataset has {expected}")
    tensors = load_tensors(root, heads_file, report)
    if tensors is None:
        return None
    n_layers, n_heads = manifest["model"]["n_layers"], manifest["model"]["n_heads"]
    scored = [d for d in documents if d.get("target_image") is not None]
    n_docs = len(scored)
    shapes = {"pointer_image": ((n_docs, n_layers, n_heads), np.int16),
              "pointer_image_eq3": ((n_docs, n_layers, n_heads), np.int16),
              "target_image": ((n_docs,), np.int16), "doc_id": ((n_docs,), np.int64)}
    ok = True
    for name, (shape, dtype) in shapes.items():
        array = tensors.get(name)
        if array is None:
            report.fail(f"{heads_file}: no tensor {name!r}")
            ok = False
            continue
        if array.dtype != dtype:
            report.fail(f"{heads_file}: {name} is {array.dtype}, expected {np.dtype(dtype).name}")
            ok = False
        if tuple(array.shape) != shape:
            report.fail(f"{heads_file}: {name} has shape {list(array.shape)}, expected {list(shape)} "
                        f"([docs, L, H] with {n_docs} documents and the manifest's {n_layers} x {n_heads})")
            ok = False
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        report.fail(f"{heads_file}: unexpected tensors {', '.join(extra)}")
    if not ok:
        return None
    if [d["doc_id"] for d in scored] != tensors["doc_id"].tolist():
        report.fail(f"{heads_file}: doc_id differs from documents.jsonl's")
    if [d["target_image"] for d in scored] != tensors["target_image"].tolist():
        report.fail(f"{heads_file}: target_image differs from documents.jsonl's")
    if n_docs == 0:
        report.fail(f"{task}: no document with a target image")
        return None
    return documents, tensors["pointer_image"], tensors["pointer_image_eq3"], tensors["target_image"]


def _ranking_indices(document: Any, relative: str, n_layers: int, n_heads: int, report: Report):
    from harness.metrics.rankings import as_flat_indices

    try:
        flat = as_flat_indices(document["ranking"], n_layers, n_heads)
    except (UserInputError, KeyError, TypeError) as err:
        report.fail(f"{relative}: not a head ranking of {n_layers} x {n_heads} heads ({err})")
        return None
    if sorted(flat.tolist()) != list(range(n_layers * n_heads)):
        report.fail(f"{relative}: does not rank every head exactly once")
        return None
    return flat


def _check_pointer(root, manifest, listed, folder, task, summary, row, pointer, pointer_eq3, targets,
                   n_layers, n_heads, report: Report) -> None:
    from harness.metrics.rankings import head_ranking, ranking_names
    from harness.metrics.vote import vote_r1_curve
    from icir_common import flat_head_name

    target = targets.astype(np.int64)
    grids = {"exact": (pointer == target[:, None, None]).mean(axis=0, dtype=np.float64),
             "eq3": (pointer_eq3 == target[:, None, None]).mean(axis=0, dtype=np.float64)}
    votes = {"exact": pointer.astype(np.int64), "eq3": pointer_eq3.astype(np.int64)}
    primary = summary.get("ranking_score")
    if primary not in grids:
        report.fail(f"{folder}/summary.json: ranking_score {primary!r} is not exact or eq3")
        return
    position = summary.get("position")
    for score, suffix in (("exact", ""), ("eq3", "_eq3")):
        relative = f"{folder}/pointer_r1{suffix}.json"
        document = load_json(root, relative, listed, report) if relative in listed else None
        grid = ((document or {}).get("grids") or {}).get(position)
        if grid is None:
            report.fail(f"{relative}: no grid at the reported position {position!r}")
            continue
        names = ranking_names(range(n_layers * n_heads), n_heads)
        wrong = [n for i, n in enumerate(names) if not close_enough(grid.get(n), grids[score].ravel()[i])]
        if wrong:
            report.fail(f"{relative}: R@1 of {len(wrong)} heads (first {wrong[0]}) differ from the head records")
    transferred = manifest["protocol"]["settings"].get("heads_ranking")
    discovery = task in ICIR_MCQ_TASKS or task == ICIR_MCQ_GROUP or task in POOLED_GROUPS
    own = head_ranking(grids[primary])
    ranking_file = f"{folder}/pointer_ranking.json"
    ranking_doc = load_json(root, ranking_file, listed, report) if ranking_file in listed else None
    if ranking_doc is not None:
        file_flat = _ranking_indices(ranking_doc, ranking_file, n_layers, n_heads, report)
        if file_flat is not None and not np.allclose(grids[primary].ravel()[file_flat], grids[primary].ravel()[own]):
            report.fail(f"{ranking_file}: not the {primary} R@1 order of the head records")
        own = own if file_flat is None else file_flat  # ties as the ranking file has them
    vote_ranking = own
    if transferred:
        relative = (manifest.get("heads_ranking") or {}).get("file", "heads_ranking.json")
        document = load_json(root, relative, listed, report) if relative in listed else None
        if document is None:
            return
        vote_ranking = _ranking_indices(document, relative, n_layers, n_heads, report)
        if vote_ranking is None:
            return
    for score, suffix in (("exact", ""), ("eq3", "_eq3")):
        grid = grids[score]
        if transferred:
            top = int(vote_ranking[0])
            value = float(grid.ravel()[top])
        elif discovery:
            top = int(head_ranking(grid)[0])
            value = float(grid.max())
        else:
            top, value = None, None
        for source, key_r1, key_head, head in (
            ("results", f"pointer_r1{suffix},none", f"pointer_top_head{suffix},none", top),
            ("summary.json", f"pointer_r1{suffix}", f"pointer_top_head{suffix}",
             None if top is None else flat_head_name(top, n_heads)),
        ):
            values = row if source == "results" else summary
            report.compare(f"{task} {key_r1.split(',')[0]} ({source})", values.get(key_r1), value)
            if values.get(key_head) != head:
                report.fail(f"{task} {key_head.split(',')[0]} ({source}): reported {values.get(key_head)}, "
                            f"recomputed from the per-document records {head}")
        median = float(np.median(grid))
        report.compare(f"{task} pointer_r1_median{suffix} (results)", row.get(f"pointer_r1_median{suffix},none"),
                       median)
        report.compare(f"{task} pointer_r1_median{suffix} (summary.json)", summary.get(f"pointer_r1_median{suffix}"),
                       median)
    capped = {k: min(k, vote_ranking.size) for k in VOTE_KS}
    curve = vote_r1_curve(votes[primary], target, vote_ranking, ks=sorted(set(capped.values())))
    vote_file = load_json(root, f"{folder}/vote_r1.json", listed, report) or {}
    for k in VOTE_KS:
        value = curve[capped[k]]
        report.compare(f"{task} vote_r1@{k} (results)", row.get(f"vote_r1@{k},none"), value)
        report.compare(f"{task} vote_r1@{k} (summary.json)", (summary.get("vote_r1") or {}).get(str(k)), value)
        report.compare(f"{task} vote_r1@{k} (vote_r1.json)", (vote_file.get("pointer") or {}).get(str(k)), value)
