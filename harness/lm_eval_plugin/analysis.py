"""Head metrics of one run's documents, computed once from the activation store (§4-5, App. C.4, H).

lm-eval gives each metric's aggregation function the list of per-document items that the task's
``process_results`` returned (gathered from every data-parallel process). Every head metric of a
task receives the same items, so the whole analysis runs once per item set (`analyse`, memoised)
and each aggregation reads its number off it. An item is a small dict (the model's capture
reference plus the document's target), so gathering costs next to nothing; the arrays are read
back from the store:

- pointer R@1 grids ``[P, L, H]`` (Eq. 2 with Eq. 1/3 scores) at every readout position, and the
  chance level mean(1/N);
- top-K majority vote with the pointer ranking (App. H voting A) for K in
  `harness.metrics.vote.DEFAULT_KS` (K above L·H uses all heads);
- ICIR-MCQ: writer probes fit on the ``train`` documents and writer R@1 over the pool of ``eval``
  target images (§5.1, App. D), plus the in-context R@1 of App. E.2;
- VHs with ``writer_probes``: each head's in-context writer R@1 under the given probes and the
  writer ranking's trained-probe vote (App. H voting B).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.activation_store import SETTINGS_FILE, ActivationStore
from harness.lm_eval_plugin.rankings_io import load_head_ranking, load_writer_probes
from harness.metrics.candidates import InContextCandidates
from harness.metrics.pointer import pointer_r1, pointer_votes
from harness.metrics.rankings import head_ranking
from harness.metrics.vote import DEFAULT_KS, vote_r1_curve
from harness.metrics.writer import WriterFit, fit_writer_probes
from icir_mcq.errors import UserInputError

REF_KEYS = ("store", "task", "doc_id", "heads_ranking", "writer_probes")

# Below this many eval images, writer R@1 (chance 1/pool) says little; the paper's pool is 1,200.
MEANINGFUL_POOL = 100


@dataclass
class HeadAnalysis:
    """Everything the results table and the artifacts report about one set of documents.

    Attributes:
        tasks: task names of the documents (one task, or a group's tasks pooled).
        items: the per-document items, sorted by (task, doc_id) (the row order of all arrays).
        positions: readout position names; the table reports ``positions[0]``.
        pointer_r1: float64 ``[P, L, H]`` per-head pointer R@1 at each position.
        chance: mean over documents of 1/N.
        vote_ranking: flat head indices, best first, whose top-K vote (``heads_ranking`` file or
            this run's own pointer ranking at ``positions[0]``); vote_ranking_source says which.
        vote_r1: ``{K: R@1}`` of the pointer-ranking majority vote, K in `DEFAULT_KS`.
        writer_fit: ICIR-MCQ writer probes and per-head writer R@1 (None without train/eval docs).
        writer_r1: float64 ``[L, H]`` writer R@1 (pool R@1 of `writer_fit`, or the in-context R@1
            under given probes on VHs), or None.
        writer_vote_r1: ``{K: R@1}`` of the writer ranking's trained-probe vote (VHs with probes).
        notes: why a metric is missing or how it was computed, for the summary.
    """

    tasks: list[str]
    items: list[dict]
    positions: tuple[str, ...]
    pointer_r1: np.ndarray
    chance: float
    vote_ranking: np.ndarray
    vote_ranking_source: str
    vote_r1: dict[int, float]
    writer_fit: WriterFit | None = None
    writer_r1: np.ndarray | None = None
    writer_ranking_source: str | None = None
    writer_vote_r1: dict[int, float] | None = None
    notes: list[str] = field(default_factory=list)

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


def _vote_curve(votes: np.ndarray, targets: np.ndarray, ranking: np.ndarray) -> dict[int, float]:
    """``{K: R@1}`` for every K in `DEFAULT_KS`, K capped at the number of ranked heads."""
    capped = {k: min(k, ranking.size) for k in DEFAULT_KS}
    curve = vote_r1_curve(votes, targets, ranking, ks=sorted(set(capped.values())))
    return {k: curve[capped[k]] for k in DEFAULT_KS}


def _settings(store: str) -> dict[str, Any]:
    path = Path(store) / SETTINGS_FILE
    if not path.is_file():
        raise UserInputError(f"activation store {store} has no {SETTINGS_FILE}; was it deleted during the run?")
    return json.loads(path.read_text())


def _single(items: Sequence[dict], key: str):
    values = {json.dumps(item[key]) for item in items}
    if len(values) != 1:
        raise UserInputError(f"documents of one analysis disagree on {key}: {sorted(values)}")
    return items[0][key]


def _load(items: Sequence[dict], fields: Sequence[str]) -> list:
    """Stored docs of `items` (already sorted), each store opened once."""
    by_store: dict[str, list[dict]] = defaultdict(list)
    for item in items:
        by_store[item["store"]].append(item)
    loaded = {}
    for root, part in by_store.items():
        store = ActivationStore(root, _settings(root))
        by_task: dict[str, list[int]] = defaultdict(list)
        for item in part:
            by_task[item["task"]].append(item["doc_id"])
        for task, ids in by_task.items():
            for doc in store.load(task, ids, fields):
                loaded[(doc.task, doc.doc_id)] = doc
    return [loaded[(item["task"], item["doc_id"])] for item in items]


def analyse(items: Sequence[dict]) -> HeadAnalysis:
    """The `HeadAnalysis` of per-document head items (see `harness.tasks` ``process_results``).

    Args:
        items: dicts with the model's capture reference (``store``, ``task``, ``doc_id``,
            ``heads_ranking``, ``writer_probes``) plus ``target`` (target image index), ``n``
            (haystack size), ``split`` ("train"/"eval" for ICIR-MCQ's writer probes, else None)
            and ``image_id`` (target image id, or None). Any order (data-parallel gathering).

    Raises:
        UserInputError: captures missing from the store, or items mixing readout settings.
    """
    items = sorted(items, key=lambda item: (item["task"], item["doc_id"]))
    if not items:
        raise UserInputError("no documents to analyse")
    settings = [_settings(store) for store in {item["store"] for item in items}]
    positions = tuple(settings[0]["readout"])
    if any(tuple(s["readout"]) != positions for s in settings):
        raise UserInputError("documents of one analysis were captured at different readout positions")
    targets = np.array([item["target"] for item in items], dtype=np.int64)
    docs = _load(items, ["pointer"])
    pointers = [doc.tensors["pointer"] for doc in docs]
    grids, chance = [], 0.0
    for index in range(len(positions)):
        grid, chance = pointer_r1(pointers, targets, position=index)
        grids.append(grid)
    grid = np.stack(grids)
    n_layers, n_heads = grid.shape[1:]
    ranking_file = _single(items, "heads_ranking")
    if ranking_file:
        ranking, source = load_head_ranking(ranking_file, n_layers, n_heads), ranking_file
    else:
        ranking, source = head_ranking(grid[0]), f"this run's pointer ranking at {positions[0]}"
    analysis = HeadAnalysis(
        tasks=sorted({item["task"] for item in items}),
        items=items,
        positions=positions,
        pointer_r1=grid,
        chance=chance,
        vote_ranking=ranking,
        vote_ranking_source=source,
        vote_r1=_vote_curve(pointer_votes(pointers, 0), targets, ranking),
    )
    if any(item["split"] for item in items):
        _fit_writer(analysis, items, targets)
    elif _single(items, "writer_probes"):
        _score_writer(analysis, items, targets, _single(items, "writer_probes"))
    return analysis


def _head_outputs(items: Sequence[dict], targets: np.ndarray):
    """``(head_output [S, L, H, d_h] at positions[0], in-context candidates)`` of the items."""
    docs = _load(items, ["head_output", "image_embeds"])
    head_output = torch.empty(len(docs), *docs[0].tensors["head_output"].shape[1:])
    for row, doc in enumerate(docs):  # filled in place: no second copy of S x L x H x d_h floats
        head_output[row] = doc.tensors["head_output"][0]
        del doc.tensors["head_output"]
    candidates = InContextCandidates.from_list([doc.tensors["image_embeds"] for doc in docs], targets)
    return head_output, candidates


def _probe_device() -> str:
    """Where writer probes train and score: the GPU when there is one (all L x H heads at once)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def _fit_writer(analysis: HeadAnalysis, items: Sequence[dict], targets: np.ndarray) -> None:
    splits = [item["split"] for item in items]
    if "train" not in splits or "eval" not in splits:
        analysis.notes.append(
            f"writer_r1 not computed: writer probes need 'train' and 'eval' documents, got "
            f"{splits.count('train')} and {splits.count('eval')} (raise --limit)"
        )
        return
    head_output, candidates = _head_outputs(items, targets)
    target_embeds = candidates.embeds[torch.arange(len(items)), candidates.target_index]
    image_ids = [item["image_id"] for item in items]
    analysis.writer_fit = fit_writer_probes(
        head_output, target_embeds, splits, image_ids=image_ids, candidates=candidates, device=_probe_device()
    )
    analysis.writer_r1 = analysis.writer_fit.r1
    analysis.writer_ranking_source = "writer probes fit in this run"
    analysis.notes.append(analysis.writer_fit.note)
    if analysis.writer_fit.pool_size < MEANINGFUL_POOL:
        analysis.notes.append(
            f"the writer pool holds only {analysis.writer_fit.pool_size} images (the paper's holds 1,200): "
            "writer R@1 on so small a pool is not comparable to published values"
        )


def _score_writer(analysis: HeadAnalysis, items: Sequence[dict], targets: np.ndarray, probes_dir: str) -> None:
    n_layers, n_heads = analysis.pointer_r1.shape[1:]
    probes, ranking = load_writer_probes(probes_dir, n_layers, n_heads)
    head_output, candidates = _head_outputs(items, targets)
    votes = probes.in_context_votes(head_output, candidates, device=_probe_device())
    analysis.writer_r1 = (votes == targets[:, None, None]).mean(axis=0, dtype=np.float64)
    analysis.writer_ranking_source = probes_dir
    analysis.writer_vote_r1 = _vote_curve(votes, targets, ranking)
    analysis.notes.append(f"writer R@1 here is in-context (each document's own N images) under probes {probes_dir}")


_MEMO: dict[tuple, HeadAnalysis] = {}


def _memo_key(items: Sequence[dict]) -> tuple:
    return tuple(sorted(json.dumps(item, sort_keys=True) for item in items))


def analysis_for(items: Sequence[dict]) -> HeadAnalysis:
    """`analyse(items)`, computed once per distinct item set in this process."""
    key = _memo_key(items)
    if key not in _MEMO:
        _MEMO[key] = analyse(items)
    return _MEMO[key]


def computed_analyses() -> list[HeadAnalysis]:
    """Analyses computed in this process since the last `clear_analyses` (for the artifacts)."""
    return list(_MEMO.values())


def clear_analyses() -> None:
    """Forget memoised analyses (before a new run in the same process)."""
    _MEMO.clear()
