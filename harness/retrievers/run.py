"""External retrievers on exactly the Visual Haystacks documents of finished LVLM runs (Table 2).

The documents come from the runs, never chosen anew: each run's ``icir_artifacts/<task>/``
names the evaluated doc ids (``documents.jsonl``) and the dataset fingerprint of its protocol
record. The haystacks are rebuilt through the same lm-eval task definitions as ``icir eval``
(`harness.evaluation.task_requests`), and their fingerprint must equal the runs' before any
retriever loads, so every retriever sees the very images, in the very order, the LVLM saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.constants import vhs_single_size
from harness.report import Run, Table
from harness.retrievers.encoders import Retriever, RetrieverSpec
from harness.retrievers.score import haystack_pick, recall_at_1
from icir_common import UserInputError

RESULTS_FILE = "retrievers.json"
TABLE_FILE = "table_2.md"
LEADERBOARD_FOLDER = "retrievers"  # DIR/retrievers/<kind>__<model>.json, one per retriever


@dataclass(frozen=True)
class HaystackDoc:
    """One VHs single-needle document as a retriever sees it.

    Attributes:
        doc_id: lm-eval document index of the task.
        anchor: the anchor object phrase, no article (the record's ``anchor``).
        images: the haystack's N PIL images, context order.
        target: index in `images` of the needle image (``needle_positions[0]``).
    """

    doc_id: int
    anchor: str
    images: list
    target: int


@dataclass
class TaskDocuments:
    """The documents of one task that every run evaluated: doc ids, fingerprint, and the haystacks."""

    task: str
    doc_ids: list[int]
    fingerprint: str
    docs: list[HaystackDoc] = field(default_factory=list)


def run_documents(runs: Sequence[Run], tasks: Sequence[str]) -> dict[str, TaskDocuments]:
    """``{task: TaskDocuments}`` (no haystacks yet): the doc ids and fingerprint the runs share.

    Raises:
        UserInputError: a task that is not ``vhs_single_n{N}``, a task missing from a run, runs
            whose documents of a task differ (another fingerprint or doc ids), or an unreadable
            artifact.
    """
    found = {}
    for task in tasks:
        if vhs_single_size(task) is None:
            raise UserInputError(f"--tasks {task}: retrievers are scored on single-needle VHs tasks vhs_single_n{{N}}")
        seen: dict[tuple, str] = {}
        for run in runs:
            if not run.has(task):
                raise UserInputError(f"{run.folder} has no icir_artifacts/{task}; run {run.transfer_command(task)} "
                                     f"first (its VHs folder needs N={vhs_single_size(task)}), or leave {task} out")
            protocol = run.read(task, "protocol.json", f"rerun icir analyze {run.folder}")
            record = protocol.get("datasets", {}).get(task)
            if not record:
                raise UserInputError(f"{run.artifacts / task}/protocol.json records no dataset of {task}; "
                                     f"rerun icir analyze {run.folder}")
            ids = _doc_ids(run.artifacts / task / "documents.jsonl")
            seen.setdefault((record["fingerprint"], tuple(ids)), run.name)
        if len(seen) > 1:
            names = ", ".join(seen.values())
            raise UserInputError(f"{task}: the runs {names} evaluated different documents (dataset fingerprints or "
                                 "doc ids differ); score retrievers on runs of the same VHs folder and --limit")
        (fingerprint, ids), = seen
        found[task] = TaskDocuments(task, list(ids), fingerprint)
    return found


def _doc_ids(path: Path) -> list[int]:
    import json

    try:
        return [int(json.loads(line)["doc_id"]) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError, KeyError) as err:
        raise UserInputError(f"cannot read the doc ids of {path} ({err}); rerun icir analyze") from None


def load_haystacks(documents: Mapping[str, TaskDocuments], metadata: Mapping[str, Any]) -> None:
    """Fill each `TaskDocuments.docs` from the VHs folder of `metadata`, checking the fingerprint.

    Raises:
        UserInputError: a missing VHs folder or config (`harness.evaluation.task_requests`), a
            document the folder lacks, a multi-needle record, or haystacks whose fingerprint is
            not the runs' (another VHs folder, seed or build).
    """
    from harness.evaluation import task_requests
    from harness.lm_eval_plugin.documents import doc_input
    from harness.protocol import dataset_fingerprint

    for task, part in documents.items():
        instances = {i.doc_id: i for i in task_requests([task], metadata, limit=max(part.doc_ids) + 1)[task]}
        prints = []
        for doc_id in part.doc_ids:
            if doc_id not in instances:
                raise UserInputError(f"{task}: the VHs folder has no document {doc_id}, which the runs evaluated; "
                                     "pass the folder they were run on (--metadata '{\"vhs_data\": DIR}')")
            # The model class's own reading of a request: the same images and fingerprint it recorded.
            seen = doc_input(instances[doc_id])
            prints.append(seen.fingerprint)
            needles = seen.fields["needle_positions"]
            if len(needles) != 1:
                raise UserInputError(f"{task} doc {doc_id}: {len(needles)} needle images; retrievers take single-needle haystacks")
            part.docs.append(HaystackDoc(doc_id, str(instances[doc_id].doc["anchor"]), list(seen.images), int(needles[0])))
        if dataset_fingerprint(prints) != part.fingerprint:
            raise UserInputError(f"{task}: the haystacks of this VHs folder are not the ones the runs evaluated "
                                 "(dataset fingerprint differs); pass the VHs folder, seed and build of the runs")


def retriever_picks(retriever: Retriever, docs: Sequence[HaystackDoc], desc: str) -> list[int]:
    """The retriever's pick (image index) in every haystack, with a progress bar."""
    from tqdm.auto import tqdm

    picks = []
    for doc in tqdm(docs, desc=desc, unit="doc"):
        picks.append(haystack_pick(retriever.query(doc.anchor), retriever.images(doc.images)))
    return picks


def run_figures(run: Run, task: str) -> dict[str, Any]:
    """The run's own R@1 on `task` (`harness.artifacts` summary): the transferred single pointer
    head's ``pointer_r1`` under the score that ranked it (``score``; Eq. 3 on protocol), its exact
    R@1 (Eq. 1), and the top-K vote curves; ``needs`` names the transfer command where the run had
    no ranking (``r1`` None)."""
    summary = run.summary(task)
    figures = {"head": summary.get("pointer_top_head"), "r1": summary.get("pointer_r1"),
               "score": summary.get("ranking_score"), "r1_exact": summary.get("pointer_r1_exact"),
               "vote_r1": summary.get("vote_r1"), "writer_vote_r1": summary.get("writer_vote_r1"),
               "chance_r1": summary.get("chance_r1")}
    return figures if figures["r1"] is not None else {**figures, "needs": run.transfer_command(task)}


def results_record(runs: Sequence[Run], documents: Mapping[str, TaskDocuments],
                   scored: Sequence[tuple[RetrieverSpec, dict, dict, dict[str, list[int]]]]) -> dict[str, Any]:
    """The JSON record of one ``icir retrievers`` call (``retrievers.json``).

    Args:
        scored: per retriever ``(spec, identity, settings, {task: picks})``.
    """
    from harness.protocol import PROTOCOL, versions

    tasks = {task: {"documents": len(part.doc_ids), "fingerprint": part.fingerprint, "doc_ids": part.doc_ids,
                    "targets": [doc.target for doc in part.docs]} for task, part in documents.items()}
    retrievers = []
    for spec, identity, settings, picks in scored:
        retrievers.append({
            "label": retriever_label(spec), "kind": spec.kind, "model": identity, "settings": settings,
            "tasks": {task: {"picks": task_picks, "r1": recall_at_1(task_picks, tasks[task]["targets"])}
                      for task, task_picks in picks.items()},
        })
    return {"protocol": PROTOCOL, "versions": versions(), "tasks": tasks, "retrievers": retrievers,
            "runs": [{"name": run.name, "folder": str(run.folder.resolve()),
                      "tasks": {task: run_figures(run, task) for task in documents}} for run in runs]}


def retriever_label(spec: RetrieverSpec) -> str:
    """``kind (model name)``, the retriever's column heading."""
    from harness.model_names import model_name

    return f"{spec.kind} ({model_name(spec.path)})"


def table_2(record: Mapping[str, Any]) -> Table:
    """Table 2 (§4.3): per task, each run's single pointer head beside each retriever's R@1."""
    columns = ["Task", "Documents", *(f"{run['name']} head" for run in record["runs"]),
               *(r["label"] for r in record["retrievers"]), "Chance"]
    rows, notes = [], []
    for task, part in record["tasks"].items():
        row: dict[str, Any] = {"Task": task, "Documents": part["documents"], "Chance": 1 / vhs_single_size(task)}
        for run in record["runs"]:
            figures = run["tasks"][task]
            row[f"{run['name']} head"] = [figures["head"], figures["r1"]] if figures["r1"] is not None else None
            if figures.get("needs"):
                notes.append(f"{run['name']} ran {task} without an ICIR-MCQ ranking; run {figures['needs']}")
            elif figures.get("vote_r1"):
                curve = ", ".join(f"K={k}: {v:.3f}" for k, v in figures["vote_r1"].items())
                notes.append(f"{run['name']} {task} top-K pointer vote R@1: {curve}")
        for retriever in record["retrievers"]:
            row[retriever["label"]] = retriever["tasks"][task]["r1"]
        rows.append(row)
    notes.append("single head: the top ICIR-MCQ pointer head, its pointer_r1 (the Eq. 3 score on protocol, as the "
                 "paper's tables; = vote_r1@1); retrievers: "
                 "cosine of the anchor query with each image, argmax, on the same documents")
    return Table(2, "Image retrieval R@1 on Visual Haystacks: single pointer head vs external retrievers",
                 columns, rows, notes)


def leaderboard_records(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{file name: record}``: one leaderboard record per retriever, with the documents it was
    scored on (doc ids, targets, fingerprint) so the leaderboard recomputes its R@1."""
    from harness.model_names import model_name

    files = {}
    for retriever in record["retrievers"]:
        name = f"{retriever['kind']}__{model_name(retriever['model']['pretrained']).replace('/', '__')}.json"
        files[name] = {
            "protocol": record["protocol"], "versions": record["versions"],
            **{key: retriever[key] for key in ("label", "kind", "model", "settings")},
            "tasks": {task: {**{k: record["tasks"][task][k] for k in ("documents", "fingerprint", "doc_ids", "targets")},
                             **scored} for task, scored in retriever["tasks"].items()},
        }
    return files
