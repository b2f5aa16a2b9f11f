"""The analysis stage: every head metric of a run, computed once from the activation store.

It runs after lm-eval's evaluation (``icir eval``, `harness.evaluate`, and ``icir analyze`` on
an existing run). lm-eval reports only per-document reductions (``acc``, ``compliance``); this
stage reads each evaluated document from the store once and computes (paper §4-5, App. C.4, H):

- per task and per pooled group (`harness.constants.POOLED_GROUPS`, the paper's ICIR-MCQ over
  both configs): pointer R@1 grids ``[P, L, H]`` (Eq. 2) of both scores of the same prefill, the
  exact one (Eq. 1) and the Eq. 3 proxy, at every readout position; the chance level mean(1/N);
  the rank agreement of the two scores (Spearman, top-10 overlap); and the top-K majority vote
  (App. H voting A) with the ``heads_ranking`` file or the unit's own ranking of the run's pointer
  mode, K in `harness.constants.VOTE_KS`;
- the paper's transfer protocol (§4.3, Tables 2 and 5): with a ``heads_ranking``, ``pointer_r1`` is
  the R@1 of that ranking's top head on these documents under the score that ranked it (the
  ranking file's ``score``), so it equals the K = 1 vote (App. H); the best head chosen on the
  documents themselves is ``pointer_r1_oracle`` ("selected on the evaluation data"); without a
  ranking, a unit that is no discovery set (VHs) reports only the oracle;
- ICIR-MCQ writer probes, fit once per (group, readout position) on the ``train`` documents and
  scored on the pool of ``eval`` target images (§5.1, App. D); a task that belongs to a pooled
  group of the same run is not fit again;
- VHs with ``writer_probes``: each head's in-context writer R@1 and the writer ranking's vote
  (App. H voting B);
- per-document records: the model's answer, whether it is correct, the target image, and the
  image the unit's top pointer head picked;
- text needle tasks (App. K): each head's mean attention mass on the needle at the last prefill
  position, both scores, and the text ranking it gives.

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
from harness.constants import NEEDLE_TENSORS, POINTER_SCORES, POOLED_GROUPS, TEXT_NEEDLE_TASKS, VOTE_KS
from harness.lm_eval_plugin.rankings_io import load_writer_probes, read_head_ranking
from harness.metrics.candidates import InContextCandidates
from harness.metrics.pointer import pointer_r1, pointer_votes
from harness.metrics.rankings import head_ranking, spearman, top_k_overlap
from harness.metrics.vote import vote_r1_curve
from harness.metrics.writer import WriterFit, WriterProbeConfig, fit_writer_probes
from harness.protocol import dataset_fingerprint, token_summary
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
        pointer_mode: the run's ``pointer_mode`` (``exact``, ``proxy``, ``proxy_causal``): which
            score's ranking votes.
    """

    store: Path
    tasks: dict[str, int]
    heads_ranking: str | None = None
    writer_probes: str | None = None
    writer_config: WriterProbeConfig = WriterProbeConfig()
    pointer_mode: str = "proxy"


@dataclass
class TaskDocs:
    """The stored documents of one task, rows in doc-id order (read from the store once).

    Attributes:
        task: task name; doc_ids: int64 ``[S]``.
        records: the store's JSON record per document.
        pointer, pointer_eq3: per document float32 ``[P, L, H, N]`` pointer scores, exact (Eq. 1)
            and Eq. 3 proxy.
        head_output: float32 ``[S, P, L, H, d_h]`` or None when no writer metric needs it.
        image_embeds: per document float32 ``[N, d_model]``, or None likewise.
        needle_mass: text needle tasks (App. K): ``{store tensor name: float32 [S, L, H]}`` of
            `NEEDLE_TENSORS`, each document's mass on its needle; None for other tasks.
    """

    task: str
    doc_ids: np.ndarray
    records: list[dict]
    pointer: list[torch.Tensor]
    pointer_eq3: list[torch.Tensor]
    head_output: torch.Tensor | None
    image_embeds: list[torch.Tensor] | None
    needle_mass: dict[str, torch.Tensor] | None = None

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
    """Read doc ids ``0 .. n_docs - 1`` of `task` from `store` in one pass (with the needle masses
    of a text needle task).

    Raises:
        UserInputError: a document missing from the store (named by `ActivationStore.load`), or a
            text needle document stored without a needle mass.
    """
    needles = task in TEXT_NEEDLE_TASKS
    fields = (["pointer", "pointer_eq3"] + (["head_output", "image_embeds"] if with_head_outputs else [])
              + (list(NEEDLE_TENSORS) if needles else []))
    docs = store.load(task, range(n_docs), fields)
    needle_mass = None
    if needles:
        lacking = [doc.doc_id for doc in docs if not set(NEEDLE_TENSORS) <= set(doc.tensors)]
        if lacking:
            raise UserInputError(f"{task}: documents {lacking[:5]} were stored without a needle mass; their records "
                                 "need a needle_char_span (build the folder with icir build-needle)")
        needle_mass = {name: torch.stack([doc.tensors[name] for doc in docs]) for name in NEEDLE_TENSORS}
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
        pointer_eq3=[doc.tensors["pointer_eq3"] for doc in docs],
        head_output=head_output,
        image_embeds=[doc.tensors["image_embeds"] for doc in docs] if with_head_outputs else None,
        needle_mass=needle_mass,
    )


@dataclass
class HeadAnalysis:
    """Everything the results table and the artifacts report about one unit (a task or a group).

    Attributes:
        name: task or group name; tasks: the task names pooled (one for a task).
        positions: readout position names; the table reports ``positions[0]``.
        grids: ``{"exact": [P, L, H], "eq3": [P, L, H]}`` float64 per-head pointer R@1 of each score.
        primary: the score the unit ranks by (``exact`` or ``eq3``): the run's pointer mode's,
            or on a transfer set the score of the ``heads_ranking`` file. It is the score of the
            unit's ``pointer_r1`` (protocol ``icir-heads/2``) and feeds the vote and the
            per-document picks.
        chance: mean over documents of 1/N.
        head_votes: ``{score: int64 [S, L, H]}`` the image each head points to at ``positions[0]``.
        targets: int64 ``[S]`` target image per row.
        discovery: whether the unit is a discovery set (ICIR-MCQ, whose own best head is its
            ``pointer_r1``, Table 1); else a transfer set (VHs).
        transferred: the ``heads_ranking`` file whose top head gives ``pointer_r1``, or None.
        vote_ranking: flat head indices, best first, whose top-K vote; vote_ranking_source says
            whose ranking it is.
        vote_r1: ``{K: R@1}`` of the pointer-ranking majority vote, K in `VOTE_KS`.
        writer_fits: ``{position: WriterFit}`` of the probes fit in this unit (ICIR-MCQ), or {}.
        writer_r1: float64 ``[L, H]`` writer R@1 at ``positions[0]`` (pool R@1 of the fit, or the
            in-context R@1 under given probes on VHs), or None.
        writer_vote_r1: ``{K: R@1}`` of the writer ranking's trained-probe vote (VHs with probes).
        writer_votes: int64 ``[S, L, H]`` the image each head's probe picks among the document's
            own images (VHs with probes), or None.
        writer_records: the fit's per-row pool picks at ``positions[0]`` (ICIR-MCQ), or None:
            ``writer_pick`` int32 ``[R, L, H]``, ``writer_target`` int64 ``[R]`` (pool indices),
            ``task_index`` int64 ``[R]`` (into `tasks`) and ``doc_id`` int64 ``[R]`` of each report row.
        notes: why a metric is missing or how it was computed, for the summary.
    """

    name: str
    tasks: list[str]
    positions: tuple[str, ...]
    grids: dict[str, np.ndarray]
    primary: str
    chance: float
    head_votes: dict[str, np.ndarray]
    targets: np.ndarray
    discovery: bool
    transferred: str | None
    vote_ranking: np.ndarray
    vote_ranking_source: str
    vote_r1: dict[int, float]
    writer_fits: dict[str, WriterFit] = field(default_factory=dict)
    writer_r1: np.ndarray | None = None
    writer_ranking_source: str | None = None
    writer_vote_r1: dict[int, float] | None = None
    writer_votes: np.ndarray | None = None
    writer_records: dict[str, np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def n_docs(self) -> int:
        """Documents with a target image in this unit."""
        return int(self.targets.size)

    @property
    def votes(self) -> np.ndarray:
        """int64 ``[S, L, H]`` picks of the primary score (what the vote and the records use)."""
        return self.head_votes[self.primary]

    @property
    def table_grid(self) -> np.ndarray:
        """Primary pointer R@1 ``[L, H]`` at the reported readout position."""
        return self.grids[self.primary][0]

    def best(self, score: str) -> float:
        """R@1 of the best head of `score` on these documents (Table 1 on ICIR-MCQ; the oracle on VHs)."""
        return float(self.grids[score][0].max())

    def top_head(self, score: str) -> int:
        """Flat index ``l*H + h`` of the best head of `score` (ties: smaller index)."""
        return int(head_ranking(self.grids[score][0])[0])

    def median(self, score: str) -> float:
        """Median pointer R@1 of `score` over all heads (§4.2: near chance)."""
        return float(np.median(self.grids[score][0]))

    def reported(self, score: str) -> float | None:
        """R@1 under `score` of the unit's reported head: the transferred ranking's top head, the
        best head (of `score`) of a discovery set, or None (a transfer set without a ranking: only
        the oracle exists). ``reported(primary)`` is the table's ``pointer_r1``."""
        if self.transferred is not None:
            return float(self.grids[score][0].ravel()[int(self.vote_ranking[0])])
        return self.best(score) if self.discovery else None

    @property
    def score_agreement(self) -> dict[str, float | None]:
        """Spearman correlation of the exact and Eq. 3 grids (None where a grid is constant, e.g.
        every head at R@1 = 1: the correlation is undefined), and their top-10 overlap (fraction)."""
        exact, eq3 = self.grids["exact"][0], self.grids["eq3"][0]
        k = min(10, exact.size)
        constant = exact.min() == exact.max() or eq3.min() == eq3.max()
        return {"spearman": None if constant else spearman(exact, eq3), "top10_overlap": top_k_overlap(exact, eq3, k)}

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


def _grids(pointers: Sequence[torch.Tensor], targets: np.ndarray, n_positions: int) -> tuple[np.ndarray, float]:
    grids = []
    for index in range(n_positions):
        grid, chance = pointer_r1(pointers, targets, position=index)
        grids.append(grid)
    return np.stack(grids), chance


def _pointer_analysis(name: str, parts: Sequence[TaskDocs], positions: tuple[str, ...],
                      ranking_file: str | None, primary: str) -> HeadAnalysis:
    """Both scores' grids, chance, votes and the vote curve of the rows of `parts` with a target."""
    scores = {
        score: [p for part in parts for p, t in zip(getattr(part, field), part.targets) if t >= 0]
        for score, field in zip(POINTER_SCORES, ("pointer", "pointer_eq3"))
    }
    targets = np.concatenate([part.targets[part.targets >= 0] for part in parts])
    if not scores["exact"]:
        raise UserInputError(f"{name}: no document with a single target image to score heads on")
    grids, chance = {}, 0.0
    for score, pointers in scores.items():
        grids[score], chance = _grids(pointers, targets, len(positions))
    n_layers, n_heads = grids["exact"].shape[1:]
    if ranking_file:
        ranking, score = read_head_ranking(ranking_file, n_layers, n_heads)
        primary, source = score or primary, ranking_file
    else:
        ranking, source = head_ranking(grids[primary][0]), f"this run's {primary} pointer ranking at {positions[0]}"
    head_votes = {score: pointer_votes(pointers, 0) for score, pointers in scores.items()}
    discovery = any(s for part in parts for s in part.splits)
    return HeadAnalysis(
        name=name, tasks=[part.task for part in parts], positions=positions, grids=grids, primary=primary,
        chance=chance, head_votes=head_votes, targets=targets, discovery=discovery, transferred=ranking_file,
        vote_ranking=ranking, vote_ranking_source=source, vote_r1=vote_curve(head_votes[primary], targets, ranking),
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
    task_index = np.concatenate([np.full(part.doc_ids.size, i, dtype=np.int64) for i, part in enumerate(parts)])
    doc_ids = np.concatenate([part.doc_ids for part in parts])
    analysis.writer_records = {"writer_pick": fit.report_picks, "writer_target": fit.report_target,
                               "task_index": task_index[fit.report_rows], "doc_id": doc_ids[fit.report_rows]}
    analysis.notes.append(fit.note)
    if fit.pool_size < MEANINGFUL_POOL:
        analysis.notes.append(
            f"the writer pool holds only {fit.pool_size} images (the paper's holds 1,200): "
            "writer R@1 on so small a pool is not comparable to published values"
        )


def _score_writer(analysis: HeadAnalysis, parts: Sequence[TaskDocs], probes_dir: str) -> None:
    """In-context writer R@1 and the writer-ranking vote under given probes (App. H voting B)."""
    n_layers, n_heads = analysis.table_grid.shape
    probes, ranking = load_writer_probes(probes_dir, n_layers, n_heads)
    keep = [part.targets >= 0 for part in parts]
    head_output = torch.cat([part.head_output[mask][:, 0] for part, mask in zip(parts, keep)])
    embeds = [e for part, mask in zip(parts, keep) for e, k in zip(part.image_embeds, mask) if k]
    candidates = InContextCandidates.from_list(embeds, analysis.targets)
    votes = probes.in_context_votes(head_output, candidates, device=_probe_device())
    analysis.writer_votes = votes
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
        answer, correct = record_answer(record)
        row = {"doc_id": doc_id, "answer": answer, "correct": correct, "target_image": target if target >= 0 else None}
        if head is not None and target >= 0:
            pick = next(picks)
            row.update({"pointer_head": head, "pointer_pick": pick, "pointer_hit": pick == target})
        rows.append(row)
    return rows


def record_answer(record: Mapping[str, Any]) -> tuple[str | None, bool]:
    """The model's answer (option letter, or VHs Yes/No) of a store record and whether it is the gold one."""
    fields = record["fields"]
    if "answers" in record:
        scored = {letter: record["answers"][letter][0] for letter in LETTERS if letter in record["answers"]}
        letter = max(scored, key=scored.get)
        return letter, LETTERS.index(letter) == int(fields["answer_index"])
    response = record["response"]
    return parse_yes_no(response), bool(is_correct(response, fields["answer"]))


@dataclass
class TextRetrieval:
    """App. K: each head's mean attention mass on the needle tokens at the last prefill position
    (where the answer is generated), over the documents of a text needle task.

    Attributes:
        task: the task name; n_docs: documents averaged over.
        grids: ``{"exact": [L, H], "eq3": [L, H]}`` float64 mean mass, from the model's attention
            rows and under the Eq. 3 proxy (one prefill).
        primary: the score the run ranks by (its pointer mode's), which `ranking` sorts.
    """

    task: str
    n_docs: int
    grids: dict[str, np.ndarray]
    primary: str


def text_retrieval(part: TaskDocs, primary: str) -> TextRetrieval:
    """The `TextRetrieval` of a text needle task's documents: the mean of each head's mass."""
    grids = {score: part.needle_mass[name].double().mean(dim=0).numpy()
             for score, name in zip(POINTER_SCORES, NEEDLE_TENSORS)}
    return TextRetrieval(part.task, len(part.records), grids, primary)


@dataclass
class RunAnalysis:
    """The analyses of one run: ``analyses`` by task or group name, ``documents`` by task,
    ``datasets``: per task its document count, fingerprint and visual tokens per image
    (`harness.protocol`), and ``text``: the text needle tasks' head masses (App. K) by task."""

    analyses: dict[str, HeadAnalysis]
    documents: dict[str, list[dict]]
    datasets: dict[str, dict]
    text: dict[str, TextRetrieval] = field(default_factory=dict)


def span_lengths(part: TaskDocs) -> list[int]:
    """Tokens of every image span of a task's documents, in document and image order."""
    return [end - start for record in part.records for start, end in record["image_spans"]]


def unequal_tokens_note(parts: Sequence[TaskDocs]) -> str | None:
    """The summary's note when the images of `parts` got different token counts, else None: the
    image input of some families (Qwen's pixel budget, LLaVA-NeXT's any-res, Pixtral's native
    aspect ratio) gives images of other sizes or aspect ratios other counts, so pointer scores
    sum attention over image spans of different lengths."""
    lengths = [n for part in parts for n in span_lengths(part)]
    if len(set(lengths)) < 2:
        return None
    return (f"images got different visual-token counts ({min(lengths)} to {max(lengths)} tokens per image span), "
            "so pointer scores sum over image spans of different lengths")


def dataset_summary(part: TaskDocs) -> dict:
    """A task's documents as the protocol record names them: count, fingerprint, visual tokens per image."""
    return {
        "documents": len(part.records),
        "fingerprint": dataset_fingerprint([record["fingerprint"] for record in part.records]),
        "visual_tokens_per_image": token_summary(span_lengths(part)),
    }


def run_units(tasks: Sequence[str]) -> tuple[dict[str, tuple[str, ...]], set[str]]:
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
        settings: the store's capture settings (the store is opened read-only: nothing is written).

    Raises:
        UserInputError: documents missing from the store, a ranking or probe folder that does not
            fit the model, no task with head captures.
    """
    store = ActivationStore(spec.store, settings, read_only=True)
    units, fitting = run_units(list(spec.tasks))
    needs_heads = {t for name in fitting for t in units[name]} | (set(spec.tasks) if spec.writer_probes else set())
    parts = {task: load_task_docs(store, task, n, task in needs_heads) for task, n in spec.tasks.items()}
    analyses, documents = {}, {}
    primary = "exact" if spec.pointer_mode == "exact" else "eq3"  # the protocol ranks by Eq. 3
    for name, members in units.items():
        unit_parts = [parts[t] for t in members]
        if not any((part.targets >= 0).any() for part in unit_parts):
            continue
        analysis = _pointer_analysis(name, unit_parts, positions, spec.heads_ranking, primary)
        if (note := unequal_tokens_note(unit_parts)) is not None:
            analysis.notes.append(note)
        if analysis.reported(analysis.primary) is None:
            analysis.notes.append(
                "only pointer_r1_oracle is available: its best head is selected on the evaluation data itself; "
                "pass heads_ranking=<an ICIR-MCQ run's pointer_ranking.json> for the paper's pointer_r1 (§4.3)"
            )
        if name in fitting and any(s for part in unit_parts for s in part.splits):
            _fit_writer(analysis, unit_parts, spec.writer_config)
        elif spec.writer_probes:
            _score_writer(analysis, unit_parts, spec.writer_probes)
        elif name not in fitting:
            group = next(g for g, m in POOLED_GROUPS.items() if name in m)
            analysis.notes.append(f"writer probes are fit once, on the pooled group {group}")
        analyses[name] = analysis
    for task, part in parts.items():
        if part.needle_mass is None:  # a needle answer is no option letter or Yes/No: lm-eval's acc scores it
            documents[task] = document_records(part, analyses.get(task))
    text = {task: text_retrieval(part, primary) for task, part in parts.items() if part.needle_mass is not None}
    return RunAnalysis(analyses, documents, {task: dataset_summary(part) for task, part in parts.items()}, text)
