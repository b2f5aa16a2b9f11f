"""Every reported aggregate of a submission, recomputed from its per-document records.

Per task, ``documents.jsonl`` and ``head_records.safetensors`` give accuracy, pointer R@1 of
every head (exact and Eq. 3), the reported head and value under each name of protocol
``icir-heads/2`` (``pointer_r1`` under the ranking score, ``pointer_r1_exact``, ``pointer_r1_eq3``:
the best head of a discovery set, the transferred ranking's top head on a transfer set), the
median head, the ranking and vote R@1@K (App. H); the ranking score itself is derived, not read
(the run's pointer mode on a discovery set, the transferred ranking's ``score`` on a transfer set);
with writer probes on VHs, ``writer_image`` gives in-context writer R@1 and the writer
ranking's vote. A pooled group (``icir_mcq``) is recomputed over its tasks' records pooled. The
unit that fit the writer probes carries ``writer_records.safetensors``: writer R@1 of every head
on the pool (Eq. 5), the best writer head and the pointer-writer top-K overlap (App. J.1).
Each value must equal what the results JSON, ``summary.json``, the grid files and
``vote_r1.json`` report (`harness.leaderboard.schema.TOLERANCE`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.constants import ICIR_MCQ_TASKS, POINTER_SCORES, POOLED_GROUPS, TOP_K_SETS, VOTE_KS
from harness.leaderboard.checks import Report, close_enough, load_json, load_tensors
from icir_common import UserInputError, flat_head_name

_RECORD_TENSORS = {"pointer_image_exact": np.int16, "pointer_image_eq3": np.int16, "target_image": np.int16,
                   "doc_id": np.int64}
_WRITER_TENSORS = {"writer_pick": np.int32, "writer_target": np.int64, "task_index": np.int64, "doc_id": np.int64}


@dataclass(frozen=True)
class TaskRecords:
    """The per-document records of one task (rows: documents with a target image, in doc-id order)."""

    documents: list[dict]
    pointer: np.ndarray  # int64 [S, L, H]
    pointer_eq3: np.ndarray  # int64 [S, L, H]
    targets: np.ndarray  # int64 [S]
    writer: np.ndarray | None  # int64 [S, L, H] in-context writer picks (VHs with probes)


def _concat(parts: list[TaskRecords]) -> TaskRecords:
    writer = [p.writer for p in parts]
    return TaskRecords(
        [d for p in parts for d in p.documents], np.concatenate([p.pointer for p in parts]),
        np.concatenate([p.pointer_eq3 for p in parts]), np.concatenate([p.targets for p in parts]),
        None if any(w is None for w in writer) else np.concatenate(writer),
    )


def _ranking(document: Any, relative: str, n_layers: int, n_heads: int, report: Report) -> np.ndarray | None:
    """Flat head indices of a ranking file (``{"ranking": [...]}``), or None after a failure line."""
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


def _vote(votes: np.ndarray, targets: np.ndarray, ranking: np.ndarray) -> dict[int, float]:
    from harness.metrics.vote import vote_r1_curve

    capped = {k: min(k, ranking.size) for k in VOTE_KS}
    curve = vote_r1_curve(votes, targets, ranking, ks=sorted(set(capped.values())))
    return {k: curve[capped[k]] for k in VOTE_KS}


class Recomputation:
    """Recomputes the units of one submission, failing `report` on every disagreement.

    Args:
        root: the submission folder; manifest: its (schema-valid) manifest; listed: the
            manifest's files that exist; report: where failures go.
    """

    def __init__(self, root: Path, manifest: Mapping[str, Any], listed: set[str], report: Report) -> None:
        self.root, self.manifest, self.listed, self.report = root, manifest, listed, report
        self.n_layers, self.n_heads = manifest["model"]["n_layers"], manifest["model"]["n_heads"]
        self._records: dict[str, TaskRecords | None] = {}

    def json(self, relative: str) -> Any:
        """A listed JSON file (None, with a failure line, when it is missing or broken)."""
        return load_json(self.root, relative, self.listed, self.report)

    def _row(self, unit: str, tasks: list[str]) -> dict:
        """lm-eval's results row of `unit` (a group's row sits in its tasks' results file)."""
        relative = self.manifest["results"].get(tasks[0])
        results = self.json(relative) if relative else None
        row = ((results or {}).get("results") or {}).get(unit)
        if row is None:
            self.report.fail(f"{unit}: not in its results file")
        return row or {}

    def task_records(self, task: str) -> TaskRecords | None:
        """The checked records of `task` (read once; None after failure lines)."""
        if task not in self._records:
            self._records[task] = self._read_records(task)
        return self._records[task]

    def _read_records(self, task: str) -> TaskRecords | None:
        folder = f"artifacts/{task}"
        docs_file, heads_file = f"{folder}/documents.jsonl", f"{folder}/head_records.safetensors"
        for relative in (docs_file, heads_file):
            if relative not in self.listed:
                self.report.fail(f"{relative}: missing (per-document records are required)")
                return None
        try:
            documents = [json.loads(line) for line in (self.root / docs_file).read_text().splitlines() if line.strip()]
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            self.report.fail(f"{docs_file}: not JSON lines ({err})")
            return None
        expected = self.manifest["protocol"]["datasets"].get(task, {}).get("documents")
        if len(documents) != expected:
            self.report.fail(f"{docs_file}: {len(documents)} documents, the protocol record's dataset has {expected}")
        tensors = load_tensors(self.root, heads_file, self.report)
        if tensors is None:
            return None
        scored = [d for d in documents if d.get("target_image") is not None]
        n = len(scored)
        shape = (n, self.n_layers, self.n_heads)
        expected_tensors = {name: ((n,) if name in ("target_image", "doc_id") else shape, dtype)
                            for name, dtype in _RECORD_TENSORS.items()}
        if "writer_image" in tensors:
            expected_tensors["writer_image"] = (shape, np.int16)
        if not self._shapes(heads_file, tensors, expected_tensors, f"{n} documents"):
            return None
        if [d["doc_id"] for d in scored] != tensors["doc_id"].tolist():
            self.report.fail(f"{heads_file}: doc_id differs from documents.jsonl's")
        if [d["target_image"] for d in scored] != tensors["target_image"].tolist():
            self.report.fail(f"{heads_file}: target_image differs from documents.jsonl's")
        if n == 0:
            self.report.fail(f"{task}: no document with a target image")
            return None
        writer = tensors.get("writer_image")
        return TaskRecords(documents, tensors["pointer_image_exact"].astype(np.int64),
                           tensors["pointer_image_eq3"].astype(np.int64), tensors["target_image"].astype(np.int64),
                           None if writer is None else writer.astype(np.int64))

    def _shapes(self, relative: str, tensors: dict, expected: dict, rows: str) -> bool:
        ok = True
        for name, (shape, dtype) in expected.items():
            array = tensors.get(name)
            if array is None:
                self.report.fail(f"{relative}: no tensor {name!r}")
                ok = False
                continue
            if array.dtype != dtype:
                self.report.fail(f"{relative}: {name} is {array.dtype}, expected {np.dtype(dtype).name}")
                ok = False
            if tuple(array.shape) != tuple(shape):
                self.report.fail(f"{relative}: {name} has shape {list(array.shape)}, expected {list(shape)} "
                                 f"([docs, L, H] with {rows} and the manifest's {self.n_layers} x {self.n_heads})")
                ok = False
        extra = sorted(set(tensors) - set(expected))
        if extra:
            self.report.fail(f"{relative}: unexpected tensors {', '.join(extra)}")
        return ok

    def unit(self, unit: str, tasks: list[str]) -> None:
        """Recompute one unit (a task, or a pooled group over its `tasks`)."""
        folder = f"artifacts/{unit}"
        for relative in sorted(n for n in self.listed if n.startswith(folder + "/")):
            if relative.endswith(".safetensors"):
                load_tensors(self.root, relative, self.report)
            elif relative.endswith(".json"):
                self.json(relative)
        summary = self.json(f"{folder}/summary.json")
        if summary is None:
            return
        if unit not in tasks and list(POOLED_GROUPS.get(unit, ())) != list(tasks):
            self.report.fail(f"{unit}: not a task and not a pooled group of {', '.join(tasks)}")
            return
        if list(summary.get("tasks", [])) != list(tasks):
            self.report.fail(f"{folder}/summary.json: tasks {summary.get('tasks')} differ from the manifest's {tasks}")
        parts = [self.task_records(task) for task in tasks]
        if any(part is None for part in parts):
            return
        records = _concat(parts)
        row = self._row(unit, tasks)
        accuracy = float(np.mean([bool(d.get("correct")) for d in records.documents]))
        self.report.compare(f"{unit} acc", row.get("acc,none"), accuracy)
        pointer_grid = self._pointer(unit, folder, summary, row, records)
        if pointer_grid is not None:
            self._writer(unit, folder, summary, row, records, pointer_grid)

    def _pointer(self, unit: str, folder: str, summary: dict, row: dict, records: TaskRecords) -> np.ndarray | None:
        """Pointer grids, reported heads, medians, ranking and votes; returns the ranking score's
        ``[L, H]`` grid (None: broken)."""
        from harness.metrics.rankings import head_ranking, ranking_names

        target = records.targets
        votes = {"exact": records.pointer, "eq3": records.pointer_eq3}
        grids = {score: (picks == target[:, None, None]).mean(axis=0, dtype=np.float64) for score, picks in votes.items()}
        inputs = self.manifest["inputs"].get(unit, {})
        transferred = inputs.get("heads_ranking")
        transferred_doc = self.json(transferred["file"]) if transferred else None
        if transferred and transferred_doc is None:
            return None
        primary = self._ranking_score(transferred_doc)
        if summary.get("ranking_score") != primary:
            self.report.fail(f"{folder}/summary.json: ranking_score {summary.get('ranking_score')!r}, but the "
                             f"{'transferred ranking' if transferred else 'run'} ranks by {primary!r}")
        position = summary.get("position")
        names = ranking_names(range(self.n_layers * self.n_heads), self.n_heads)
        for score in POINTER_SCORES:
            relative = f"{folder}/pointer_r1_{score}.json"
            grid = ((self.json(relative) or {}).get("grids") or {}).get(position)
            if grid is None:
                self.report.fail(f"{relative}: no grid at the reported position {position!r}")
                continue
            self._grid_equal(relative, grid, grids[score], names)
        discovery = all(task in ICIR_MCQ_TASKS for task in summary.get("tasks", [unit]))
        own = head_ranking(grids[primary])
        ranking_file = f"{folder}/pointer_ranking.json"
        ranking_doc = self.json(ranking_file) if ranking_file in self.listed else None
        if ranking_doc is not None:
            file_flat = _ranking(ranking_doc, ranking_file, self.n_layers, self.n_heads, self.report)
            if file_flat is not None and not np.allclose(grids[primary].ravel()[file_flat], grids[primary].ravel()[own]):
                self.report.fail(f"{ranking_file}: not the {primary} R@1 order of the head records")
            own = own if file_flat is None else file_flat  # ties as the ranking file has them
        vote_ranking = own
        if transferred:
            relative = transferred["file"]
            vote_ranking = _ranking(transferred_doc, relative, self.n_layers, self.n_heads, self.report)
            if vote_ranking is None:
                return grids[primary]
            if "unit" in transferred:
                self._same_ranking(relative, vote_ranking, transferred["unit"])
        for score, suffix in ((primary, ""), *((score, f"_{score}") for score in POINTER_SCORES)):
            self._reported_head(unit, summary, row, grids[score], suffix, vote_ranking if transferred else None,
                                discovery)
        curve = _vote(votes[primary], target, vote_ranking)
        vote_file = self.json(f"{folder}/vote_r1.json") or {}
        for k in VOTE_KS:
            self.report.compare(f"{unit} vote_r1@{k} (results)", row.get(f"vote_r1@{k},none"), curve[k])
            self.report.compare(f"{unit} vote_r1@{k} (summary.json)", (summary.get("vote_r1") or {}).get(str(k)),
                                curve[k])
            self.report.compare(f"{unit} vote_r1@{k} (vote_r1.json)", (vote_file.get("pointer") or {}).get(str(k)),
                                curve[k])
        return grids[primary]

    def _ranking_score(self, transferred: Any) -> str:
        """The pointer score a unit's ``pointer_r1`` and vote use: a transferred ranking's ``score``
        (§4.3: the head is scored as it was ranked), else the run's pointer mode's (Eq. 3 unless
        ``pointer_mode=exact``)."""
        score = transferred.get("score") if isinstance(transferred, dict) else None
        if score in POINTER_SCORES:
            return score
        return "exact" if self.manifest["protocol"]["settings"].get("pointer_mode") == "exact" else "eq3"

    def _same_ranking(self, relative: str, ranking: np.ndarray, unit: str) -> None:
        """A ranking made by another unit of this run must be that unit's (itself checked on its records)."""
        source = f"artifacts/{unit}/pointer_ranking.json"
        document = self.json(source)
        theirs = None if document is None else _ranking(document, source, self.n_layers, self.n_heads, self.report)
        if theirs is not None and not np.array_equal(theirs, ranking):
            self.report.fail(f"{relative}: not the ranking of {unit} ({source}) it names as its source")

    def _grid_equal(self, relative: str, reported: Any, grid: np.ndarray, names: list[str]) -> None:
        if not isinstance(reported, dict):
            self.report.fail(f"{relative}: not a {{LxxHyy: R@1}} grid")
            return
        wrong = [n for i, n in enumerate(names) if not close_enough(reported.get(n), grid.ravel()[i])]
        if wrong:
            self.report.fail(f"{relative}: R@1 of {len(wrong)} heads (first {wrong[0]}) differ from the "
                             "per-document records")

    def _reported_head(self, unit: str, summary: dict, row: dict, grid: np.ndarray, suffix: str,
                       transferred: np.ndarray | None, discovery: bool) -> None:
        from harness.metrics.rankings import head_ranking

        if transferred is not None:
            top, value = int(transferred[0]), float(grid.ravel()[int(transferred[0])])
        elif discovery:
            top, value = int(head_ranking(grid)[0]), float(grid.max())
        else:
            top, value = None, None
        for source, values, head in (("results", row, top),
                                     ("summary.json", summary, None if top is None else flat_head_name(top, self.n_heads))):
            key = "" if source == "summary.json" else ",none"
            self.report.compare(f"{unit} pointer_r1{suffix} ({source})", values.get(f"pointer_r1{suffix}{key}"), value)
            if values.get(f"pointer_top_head{suffix}{key}") != head:
                self.report.fail(f"{unit} pointer_top_head{suffix} ({source}): reported "
                                 f"{values.get(f'pointer_top_head{suffix}{key}')}, recomputed from the "
                                 f"per-document records {head}")
            self.report.compare(f"{unit} pointer_r1_median{suffix} ({source})",
                                values.get(f"pointer_r1_median{suffix}{key}"), float(np.median(grid)))

    def _writer(self, unit: str, folder: str, summary: dict, row: dict, records: TaskRecords,
                pointer_grid: np.ndarray) -> None:
        """Writer R@1 of every head, the best one, the writer vote and the top-K overlap."""
        fit_file = f"{folder}/writer_records.safetensors"
        if fit_file in self.listed:
            grid = self._pool_writer(unit, fit_file, summary)
        elif records.writer is not None:
            grid = (records.writer == records.targets[:, None, None]).mean(axis=0, dtype=np.float64)
            self._writer_vote(unit, folder, summary, row, records)
        else:
            for source, value in (("results", row.get("writer_r1,none")), ("summary.json", summary.get("writer_r1"))):
                if value is not None:
                    self.report.fail(f"{unit} writer_r1 ({source}): reported {value} without per-document writer "
                                     "records to recompute it from")
            return
        if grid is None:
            return
        from harness.metrics.rankings import chance_overlap, ranking_names, top_k_overlap

        position = summary.get("position")
        relative = f"{folder}/writer_r1.json"
        fit = ((self.json(relative) or {}).get(position) or {}).get("writer_r1")
        self._grid_equal(relative, fit, grid, ranking_names(range(grid.size), self.n_heads))
        self.report.compare(f"{unit} writer_r1 (results)", row.get("writer_r1,none"), float(grid.max()))
        self.report.compare(f"{unit} writer_r1 (summary.json)", summary.get("writer_r1"), float(grid.max()))
        best = flat_head_name(int(np.argmax(grid.ravel())), self.n_heads)
        if summary.get("writer_top_head") != best:
            self.report.fail(f"{unit} writer_top_head (summary.json): reported {summary.get('writer_top_head')}, "
                             f"recomputed from the per-document records {best}")
        k = min(TOP_K_SETS, grid.size)
        overlap = {"k": k, "count": round(top_k_overlap(pointer_grid, grid, k) * k),
                   "chance": chance_overlap(k, self.n_layers, self.n_heads)}
        reported = summary.get("pointer_writer_overlap") or {}
        for key, value in overlap.items():
            self.report.compare(f"{unit} pointer_writer_overlap.{key} (summary.json)", reported.get(key), value)

    def _pool_writer(self, unit: str, relative: str, summary: dict) -> np.ndarray | None:
        """Pool writer R@1 ``[L, H]`` from the fit's per-document picks (None after failure lines)."""
        tensors = load_tensors(self.root, relative, self.report)
        if tensors is None or "writer_pick" not in tensors:
            if tensors is not None:
                self.report.fail(f"{relative}: no tensor 'writer_pick'")
            return None
        rows = tensors["writer_pick"].shape[0]
        shapes = {name: ((rows, self.n_layers, self.n_heads) if name == "writer_pick" else (rows,), dtype)
                  for name, dtype in _WRITER_TENSORS.items()}
        if not self._shapes(relative, tensors, shapes, f"{rows} report documents"):
            return None
        tasks = summary.get("tasks", [unit])
        pairs = list(zip(tensors["task_index"].tolist(), tensors["doc_id"].tolist()))
        counts = [self.manifest["protocol"]["datasets"].get(t, {}).get("documents", 0) for t in tasks]
        if any(not (0 <= t < len(tasks)) or not (0 <= d < counts[t]) for t, d in pairs) or len(set(pairs)) != rows:
            self.report.fail(f"{relative}: task_index/doc_id name documents outside the unit or twice")
        picks, target = tensors["writer_pick"].astype(np.int64), tensors["writer_target"]
        if rows == 0:
            self.report.fail(f"{relative}: no report documents")
            return None
        return (picks == target[:, None, None]).mean(axis=0, dtype=np.float64)

    def _writer_vote(self, unit: str, folder: str, summary: dict, row: dict, records: TaskRecords) -> None:
        """The writer ranking's trained-probe vote (App. H voting B) under the submitted probes' ranking."""
        from harness.lm_eval_plugin.rankings_io import writer_ranking

        probes = self.manifest["inputs"].get(unit, {}).get("writer_probes") or {}
        relative = probes.get("file")
        document = self.json(relative) if relative else None
        if document is None:
            if relative is None:
                self.report.fail(f"{unit}: writer votes without the writer probes' settings file in the submission")
            return
        try:
            ranking = writer_ranking(document, self.n_layers, self.n_heads)
        except UserInputError as err:
            self.report.fail(f"{relative}: {err}")
            return
        if "unit" in probes:
            source = f"artifacts/{probes['unit']}/writer_r1.json"
            fits = self.json(source) or {}
            grid = (document.get("info") or {}).get("writer_r1") or {}
            position = (self.json(f"artifacts/{probes['unit']}/summary.json") or {}).get("position")
            theirs = (fits.get(position) or {}).get("writer_r1")
            if not isinstance(theirs, dict) or any(not close_enough(grid.get(h), v) for h, v in theirs.items()):
                self.report.fail(f"{relative}: its writer R@1 grid is not {source}'s, the unit it names as its source")
        curve = _vote(records.writer, records.targets, ranking)
        vote_file = self.json(f"{folder}/vote_r1.json") or {}
        for k in VOTE_KS:
            for source, value in (("results", row.get(f"writer_vote_r1@{k},none")),
                                  ("summary.json", (summary.get("writer_vote_r1") or {}).get(str(k))),
                                  ("vote_r1.json", (vote_file.get("writer") or {}).get(str(k)))):
                self.report.compare(f"{unit} writer_vote_r1@{k} ({source})", value, curve[k])

    def ablation(self) -> None:
        """The ablation grid (``icir ablate``): its cells from the unit's rankings, its statistics
        (accuracy, drops, random means, McNemar p) from the per-document outcomes."""
        from types import SimpleNamespace

        from harness.ablation.arms import build_grid, cell_records
        from harness.ablation.results import grid_stats, outcome_rows

        spec = self.manifest.get("ablation")
        if not spec:
            return
        documents = {name: self.json(spec[name]) for name in ("grid", "cells", "protocol")}
        if any(value is None for value in documents.values()):
            return
        try:
            settings = documents["protocol"]["ablation"]
            folder = f"artifacts/{spec['unit']}"
            pointer = self._ranking_names(f"{folder}/pointer_ranking.json")
            writer_file = f"{folder}/writer_ranking.json"  # optional: without it only the pointer arm runs
            writer = self._ranking_names(writer_file) if writer_file in self.listed else None
            if pointer is None:
                return
            grid = build_grid(pointer, writer, self.n_layers, self.n_heads, settings["ks"], settings["seeds"],
                              settings["top"])
        except (KeyError, TypeError, UserInputError) as err:
            self.report.fail(f"{spec['protocol']}: not an ablation protocol record ({err})")
            return
        if documents["grid"].get("cells") != cell_records(grid):
            self.report.fail(f"{spec['grid']}: its cells are not the set partition and random controls of "
                             f"{spec['unit']}'s rankings")
            return
        logs = {}
        for relative in spec["outcomes"]:
            lines = self._jsonl(relative)
            if lines is None:
                return
            names = [line.get("cells", {}).keys() for line in lines]
            if any(set(cells) != {c.name for c in grid.cells} for cells in names):
                self.report.fail(f"{relative}: a document without every cell of the grid")
                return
            logs[Path(relative).stem] = SimpleNamespace(done={int(line["doc_id"]): line for line in lines})
        stats = [s.row() for s in grid_stats(grid, outcome_rows(grid, logs))]
        reported = documents["cells"]
        if not isinstance(reported, list) or len(reported) != len(stats):
            self.report.fail(f"{spec['cells']}: {len(reported) if isinstance(reported, list) else 'no'} rows, "
                             f"the outcomes give {len(stats)}")
            return
        for row, theirs in zip(stats, reported):
            where = f"{spec['cells']} N={row['N']} {row['arm']} K={row['K']} seed={row['seed']}"
            for key, value in row.items():
                other = theirs.get(key) if isinstance(theirs, dict) else None
                if isinstance(value, list):
                    same = isinstance(other, list) and len(other) == len(value) and all(
                        close_enough(a, b) for a, b in zip(value, other))
                else:
                    same = value == other if isinstance(value, str) else close_enough(value, other)
                if not same:
                    self.report.fail(f"{where}: {key} reported {other}, recomputed from the per-document "
                                     f"outcomes {value}")

    def _ranking_names(self, relative: str) -> list[str] | None:
        """A listed ranking file's heads as ``LxxHyy`` names, best first (None after failure lines)."""
        from harness.metrics.rankings import ranking_names

        document = self.json(relative)
        flat = None if document is None else _ranking(document, relative, self.n_layers, self.n_heads, self.report)
        return None if flat is None else ranking_names(flat, self.n_heads)

    def _jsonl(self, relative: str) -> list[dict] | None:
        if relative not in self.listed:
            self.report.fail(f"{relative}: missing")
            return None
        try:
            return [json.loads(line) for line in (self.root / relative).read_text().splitlines() if line.strip()]
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            self.report.fail(f"{relative}: not JSON lines ({err})")
            return None
