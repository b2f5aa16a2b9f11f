"""The analysis stage: every head metric of a run, computed once from the activation store.

It runs after lm-eval's evaluation (``icir eval``, `harness.evaluate`, and ``icir analyze`` on
an existing run). lm-eval reports only per-document reductions (``acc``, ``compliance``); this
stage reads each evaluated document from the store once and computes (paper §4-5, App. C.4, H):

- per task and per pooled group (`harness.constants.POOLED_GROUPS`, the paper's ICIR-MCQ over
  both configs): pointer R@1 grids ``[P, L, H]`` (Eq. 2 on Eq. 1/3 scores) at every readout
  position, the chance level mean(1/N), and the top-K majority vote (App. H voting A) with the
  ``heads_ranking`` file or the unit's own ranking, K in `harness.constants.VOTE_KS`;
- ICIR-MCQ writer probes, fit once per (group, readout position) on the ``train`` documents and
  scored on the pool of ``eval`` target images (§5.1, App. D); a task that belongs to a pooled
  group of the same run is not fit again;
- VHs with ``writer_probes``: each head's in-context writer R@1 and the writer ranking's vote
  (App. H voting B);
- per-document records: the model's answer, whether it is correct, the target image, and the
  image the unit's top pointer head picked.

The documents of a run are lm-eval's: doc ids ``0 .. n-1`` of each task, n from the results'
``n-samples`` (``--limit`` included); documents a store holds from other runs are not read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.activation_store import ActivationStore
from harness.constants import POOLED_GROUPS, VOTE_KS
from harness.lm_eval_plugin.rankings_io import load_head_ranking, load_writer_probes
from harness.metrics.candidates import InContextCandidates
from harness.metrics.pointer import pointer_r1, pointer_votes
from harness.metrics.rankings import head_ranking
from harness.metrics.vote import vote_r1_curve
from harness.metrics.writer import WriterFit, WriterProbeConfig, fit_writer_probes
from icir_common import UserInputError, flat_head_name
from icir_mcq.prompt import LETTERS
from vhs_adapter.scoring import is_correct, parse_yes_no

# Below this many eval images, writer R@1 (chance 1/pool) says little; the paper's pool is 1,200.
MEANINGFUL_POOL = 100


@dataclass(frozen=True)
class RunSpec:
    """What the analysis of one run needs besides the store.

    Attributes:
        store: the activation store folder the run wrote.
        tasks: ``{task: n_docs}``; the run evaluated doc ids ``0 .. n_docs - 1`` of each task.
        heads_ranking: ranking file whose top-K heads vote (VHs, §4.3), or None.
        writer_probes: probe folder to score in context (VHs, App. H voting B), or None.
        writer_config: settings of the writer probes fit in this run (App. D).
    """

    store: Path
    tasks: dict[str, int]
    heads_ranking: str | None = None
    writer_probes: str | None = None
    writer_config: WriterProbeConfig = WriterProbeConfig()


@dataclass
class TaskDocs:
    """The stored documents of one task, rows in doc-id order (read from the store once).

    Attributes:
        task: task name; doc_ids: int64 ``[S]``.
        records: the store's JSON record per document.
        pointer: per document float32 ``[P, L, H, N]`` pointer scores.
        head_output: float32 ``[S, P, L, H, d_h]`` or None when no writer metric needs it.
        image_embeds: per document float32 ``[N, d_model]``, or None likewise.
    """

    task: str
    doc_ids: np.ndarray
    records: list[dict]
    pointer: list[torch.Tensor]
    head_output: torch.Tensor | None
    image_embeds: list[torch.Tensor] | None

    @property
    def targets(self) -> np.ndarray:
        """int64 ``[S]`` target image index (ICIR-MCQ target, VHs single needle), -1 when none."""
        return np.array([_target(r["fields"]) for r in self.records], dtype=np.int64)

    @property
    def splits(self) -> list[str | None]:
        """ICIR-MCQ ``probe_split`` per document (None for other tasks)."""
        return [r["fields"].get("probe_split") for r in self.records]

    @property
    def image_ids(self) -> list[Any]:
        """Target image id per document (ICIR-MCQ), else None."""
        return [r["fields"].get("target_image_id") for r in self.records]


def _target(fields: Mapping[str, Any]) -> int:
    if "target_position" in fields:
        return int(fields["target_position"])
    needles = fields.get("needle_positions") or []
    return int(needles[0]) if len(needles) == 1 else -1


def load_task_docs(store: ActivationStore, task: str, n_docs: int, with_head_outputs: bool) -> TaskDocs:
    """Read doc ids ``0 .. n_docs - 1`` of `task` from `store` in one pass.

    Raises:
        UserInputError: a document missing from the store (named by `ActivationStore.load`).
    """
    fields = ["pointer"] + (["head_output", "image_embeds"] if with_head_outputs else [])
    docs = store.load(task, range(n_docs), fields)
    head_output = None
    if with_head_outputs:
        head_output = torch.empty(len(docs), *docs[0].tensors["head_output"].shape)
        for row, doc in enumerate(docs):  # filled in place: no second copy of S x P x L x H x d_h floats
            head_output[row] = doc.tensors.pop("head_output")
    return TaskDocs(
        task=task,
        doc_ids=np.arange(n_docs, dtype=np.int64),
        records=[doc.record for doc in docs],
        pointer=[doc.tensors["pointer"] for doc in docs],
        head_output=head_output,
        image_embeds=[doc.tensors["image_embeds"] for doc in docs] if with_head_outputs else None,
    )


@dataclass
class HeadAnalysis:
    """Everything the results table and the artifacts report about one unit (a task or a group).

    Attributes:
        name: task or group name; tasks: the task names pooled (one for a task).
        parts: the `TaskDocs` of the unit (only the rows with a target image).
        positions: readout position names; the table reports ``positions[0]``.
        pointer_r1: float64 ``[P, L, H]`` per-head pointer R@1 at each position.
        chance: mean over documents of 1/N.
        votes: int64 ``[S, L, H]`` the image each head points to at ``positions[0]``.
        targets: int64 ``[S]`` target image per row.
        vote_ranking: flat head indices, best first, whose top-K vote; vote_ranking_source says
            whose ranking it is.
        vote_r1: ``{K: R@1}`` of the pointer-ranking majority vote, K in `VOTE_KS`.
        writer_fits: ``{position: WriterFit}`` of the probes fit in this unit (ICIR-MCQ), or {}.
        writer_r1: float64 ``[L, H]`` writer R@1 at ``positions[0]`` (pool R@1 of the fit, or the
            in-context R@1 under given probes on VHs), or None.
        writer_vote_r1: ``{K: R@1}`` of the writer ranking's trained-probe vote (VHs with probes).
        notes: why a metric is missing or how it was computed, for the summary.
    """

    name: str
    tasks: list[str]
    positions: tuple[str, ...]
    pointer_r1: np.ndarray
    chance: float
    votes: np.ndarray
    targets: np.ndarray
    vote_ranking: np.ndarray
    vote_ranking_source: str
    vote_r1: dict[int, float]
    writer_fits: dict[str, WriterFit] = field(default_factory=dict)
    writer_r1: np.ndarray | None = None
    writer_ranking_source: str | None = None
    writer_vote_r1: dict[int, float] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def n_docs(self) -> int:
        """Documents with a target image in this unit."""
        return int(self.targets.size)

    @property
    def table_grid(self) -> np.ndarray:
        """Pointer R@1 ``[L, H]`` at the reported readout position."""
        return self.pointer_r1[0]

    @property
    def pointer_best(self) -> float:
        """R@1 of the best pointer head (Table 1)."""
        return float(self.table_grid.max())

    @property
    def pointer_top_head(self) -> int:
        """Flat index ``l*H + h`` of the best pointer head (ties: smaller index)."""
        return int(head_ranking(self.table_grid)[0])

    @property
    def pointer_median(self) -> float:
        """Median pointer R@1 over all heads (§4.2: near chance)."""
        return float(np.median(self.table_grid))

    @property
    def writer_best(self) -> float:
        """R@1 of the best writer head, NaN when no writer metric could be computed."""
        return math.nan if self.writer_r1 is None else float(self.writer_r1.max())


def vote_curve(votes: np.ndarray, targets: np.ndarray, ranking: np.ndarray) -> dict[int, float]:
    """``{K: R@1}`` of the top-K majority vote for every K in `VOTE_KS`, K capped at the ranking's length."""
    capped = {k: min(k, ranking.size) for k in VOTE_KS}
    curve = vote_r1_curve(votes, targets, ranking, ks=sorted(set(capped.values())))
    return {k: curve[capped[k]] for k in VOTE_KS}


def _probe_device() -> str:
    """Where writer probes train and score: the GPU when there is one (all L x H heads at once)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _pointer_analysis(name: str, parts: Sequence[TaskDocs], positions: tuple[str, ...],
                      ranking_file: str | None) -> HeadAnalysis:
    """Pointer grids, chance, votes and the vote curve of the rows of `parts` with a target."""
    pointers = [p for part in parts for p, t in zip(part.pointer, part.targets) if t >= 0]
    targets = np.concatenate([part.targets[part.targets >= 0] for part in parts])
    if not pointers:
        raise UserInputError(f"{name}: no document with a single target image to score heads on")
    grids = []
    for index in range(len(positions)):
        grid, chance = pointer_r1(pointers, targets, position=index)
        grids.append(grid)
    grid = np.stack(grids)
    n_layers, n_heads = grid.shape[1:]
    if ranking_file:
        ranking, source = load_head_ranking(ranking_file, n_layers, n_heads), ranking_file
    else:
        ranking, source = head_ranking(grid[0]), f"this run's pointer ranking at {positions[0]}"
    votes = pointer_votes(pointers, 0)
    return HeadAnalysis(
        name=name, tasks=[part.task for part in parts], positions=positions, pointer_r1=grid, chance=chance,
        votes=votes, targets=targets, vote_ranking=ranking, vote_ranking_source=source,
        vote_r1=vote_curve(votes, targets, ranking),
    )


def _fit_writer(analysis: HeadAnalysis, parts: Sequence[TaskDocs], config: WriterProbeConfig) -> None:
    """Fit the writer probes once per readout position on the unit's train/eval documents (§5.1)."""
    splits = [s for part in parts for s in part.splits]
    if "train" not in splits or "eval" not in splits:
        analysis.notes.append(
            f"writer_r1 not computed: writer probes need 'train' and 'eval' documents, got "
            f"{splits.count('train')} and {splits.count('eval')} (raise --limit)"
        )
        return
    head_output = torch.cat([part.head_output for part in parts])
    candidates = InContextCandidates.from_list([e for part in parts for e in part.image_embeds], analysis.targets)
    target_embeds = candidates.embeds[torch.arange(analysis.n_docs), candidates.target_index]
    image_ids = [i for part in parts for i in part.image_ids]
    for index, position in enumerate(analysis.positions):
        analysis.writer_fits[position] = fit_writer_probes(
            head_output[:, index], target_embeds, splits, image_ids=image_ids, candidates=candidates,
            config=config, device=_probe_device(),
        )
    fit = analysis.writer_fits[analysis.positions[0]]
    analysis.writer_r1, analysis.writer_ranking_source = fit.r1, "writer probes fit in this run"
    analysis.notes.append(fit.note)
    if fit.pool_size < MEANINGFUL_POOL:
        analysis.notes.append(
            f"the writer pool holds only {fit.pool_size} images (the paper's holds 1,200): "
            "writer R@1 on so small a pool is not comparable to published values"
        )


def _score_writer(analysis: HeadAnalysis, parts: Sequence[TaskDocs], probes_dir: str) -> None:
    """In-context writer R@1 and the writer-ranking vote under given probes (App. H voting B)."""
    n_layers, n_heads = analysis.pointer_r1.shape[1:]
    probes, ranking = load_writer_probes(probes_dir, n_layers, n_heads)
    keep = [part.targets >= 0 for part in parts]
    head_output = torch.cat([part.head_output[mask][:, 0] for part, mask in zip(parts, keep)])
    embeds = [e for part, mask in zip(parts, keep) for e, k in zip(part.image_embeds, mask) if k]
    candidates = InContextCandidates.from_list(embeds, analysis.targets)
    votes = probes.in_context_votes(head_output, candidates, device=_probe_device())
    analysis.writer_r1 = (votes == analysis.targets[:, None, None]).mean(axis=0, dtype=np.float64)
    analysis.writer_ranking_source = probes_dir
    analysis.writer_vote_r1 = vote_curve(votes, analysis.targets, ranking)
    analysis.notes.append(f"writer R@1 here is in-context (each document's own N images) under probes {probes_dir}")


def document_records(part: TaskDocs, analysis: HeadAnalysis | None) -> list[dict]:
    """Per document of `part`: answer, correctness, target image and the top pointer head's pick.

    The top head is the first of the unit's vote ranking (the ``heads_ranking`` file's top head,
    else this run's best pointer head), so the mean of ``pointer_hit`` is ``vote_r1@1``.
    """
    rows, head, picks = [], None, iter(())
    if analysis is not None:
        top, n_heads = int(analysis.vote_ranking[0]), analysis.votes.shape[2]
        head, picks = flat_head_name(top, n_heads), iter(analysis.votes[:, top // n_heads, top % n_heads].tolist())
    for doc_id, record, target in zip(part.doc_ids.tolist(), part.records, part.targets.tolist()):
        answer, correct = _answer(record)
        row = {"doc_id": doc_id, "answer": answer, "correct": correct, "target_image": target if target >= 0 else None}
        if head is not None and target >= 0:
            pick = next(picks)
            row.update({"pointer_head": head, "pointer_pick": pick, "pointer_hit": pick == target})
        rows.append(row)
    return rows


def _answer(record: Mapping[str, Any]) -> tuple[str | None, bool]:
    """The model's answer (option letter, or VHs Yes/No) and whether it is the gold one."""
    fields = record["fields"]
    if "answers" in record:
        scored = {letter: record["answers"][letter][0] for letter in LETTERS if letter in record["answers"]}
        letter = max(scored, key=scored.get)
        return letter, LETTERS.index(letter) == int(fields["answer_index"])
    response = record["response"]
    return parse_yes_no(response), bool(is_correct(response, fields["answer"]))


@dataclass
class RunAnalysis:
    """The analyses of one run: ``analyses`` by task or group name, ``documents`` by task."""

    analyses: dict[str, HeadAnalysis]
    documents: dict[str, list[dict]]


def _units(tasks: Sequence[str]) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """``({unit name: its tasks}, names of the units that fit writer probes)`` for a run's tasks."""
    units = {task: (task,) for task in tasks}
    fitting = set(tasks)
    for group, members in POOLED_GROUPS.items():
        if all(task in tasks for task in members):
            units[group] = members
            fitting = (fitting - set(members)) | {group}
    return units, fitting


def analyse_run(spec: RunSpec, positions: tuple[str, ...], settings: Mapping[str, Any]) -> RunAnalysis:
    """Analyse every task of `spec` (and its pooled groups), reading each document once.

    Args:
        spec: the run's store, tasks and document counts, rankings and probes.
        positions: the readout positions the store was captured at.
        settings: the store's capture settings (opens the store read-only-compatible).

    Raises:
        UserInputError: documents missing from the store, a ranking or probe folder that does not
            fit the model, no task with head captures.
    """
    store = ActivationStore(spec.store, settings)
    units, fitting = _units(list(spec.tasks))
    needs_heads = {t for name in fitting for t in units[name]} | (set(spec.tasks) if spec.writer_probes else set())
    parts = {task: load_task_docs(store, task, n, task in needs_heads) for task, n in spec.tasks.items()}
    analyses, documents = {}, {}
    for name, members in units.items():
        unit_parts = [parts[t] for t in members]
        if not any((part.targets >= 0).any() for part in unit_parts):
            continue
        analysis = _pointer_analysis(name, unit_parts, positions, spec.heads_ranking)
        if name in fitting and any(s for part in unit_parts for s in part.splits):
            _fit_writer(analysis, unit_parts, spec.writer_config)
        elif spec.writer_probes:
            _score_writer(analysis, unit_parts, spec.writer_probes)
        elif name not in fitting:
            group = next(g for g, m in POOLED_GROUPS.items() if name in m)
            analysis.notes.append(f"writer probes are fit once, on the pooled group {group}")
        analyses[name] = analysis
    for task, part in parts.items():
        documents[task] = document_records(part, analyses.get(task))
    return RunAnalysis(analyses, documents)
