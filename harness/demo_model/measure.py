"""Known-answer checks of a demo model on a fresh toy draw: accuracy, pointer heads, head ablation.

What is measured (paper §3.2, §4, §6.1, App. C.4), with the targets a shipped checkpoint must
reach (`harness.demo_model.checkpoint.TARGETS`, tabled in ``shipped/TRAINING.md``):

- ICIR-MCQ n5 accuracy: restricted argmax over the A-D letter logits at the first answer position
  (target >= 0.90; chance 0.25);
- VHs single-needle N=5 accuracy: restricted argmax over the Yes/No logits there (target >= 0.80;
  chance 0.5);
- pointer R@1 of every head at the ICIR-MCQ cattok (Eq. 1-2, mode ``exact``): best and median head
  (targets: best >= 0.90, median < 0.40; chance 0.2);
- ablation: zeroing the K best pointer heads (K = one eighth of all heads, at least 2) over the
  question span (from the first token of the question sentence to the last prefill token) against
  zeroing K heads drawn uniformly at random (three seeds), as ICIR-MCQ accuracy drops; the
  separation (mean accuracy with random heads zeroed minus accuracy with the top heads zeroed)
  must reach 0.15.

Everything runs through the harness: `capture_heads_batch` for logits and pointer scores,
`ablate_heads` for the ablation, `pointer_r1` for R@1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from harness.capture import CaptureRequest, ablate_heads, answer_token_ids, capture_heads_batch
from harness.capture.adapters import image_token_id, resolve_adapter
from harness.capture.inputs import encode_requests
from harness.demo_model.data import MCQ, VHS_ANSWERS, TaskRecord, ToyWorld, mcq_records, open_world, vhs_records
from harness.metrics.pointer import pointer_r1
from icir_common import head_name
from icir_mcq.prompt import LETTERS

VHS_CHOICES = tuple(VHS_ANSWERS.values())
RANDOM_SEEDS = (0, 1, 2)
EVAL_WORLD_SEED = 20_260  # the training world uses 1_000_000 + seed, so no image is shared


@dataclasses.dataclass(frozen=True)
class EvaluationDraw:
    """A fresh toy world and the ICIR-MCQ and VHs records drawn from it."""

    world: ToyWorld
    mcq: list[TaskRecord]
    vhs: list[TaskRecord]


def evaluation_draw(root: Path, mcq_samples: int = 200, vhs_questions: int = 200, n_images: int = 5,
                    world_images: int = 800, seed: int = EVAL_WORLD_SEED) -> EvaluationDraw:
    """Write a fresh toy world under `root` and draw ICIR-MCQ ``n<n_images>`` and VHs single-needle
    records of haystack size `n_images` from it (`mcq_samples` a multiple of lcm(N, 4), `vhs_questions` even)."""
    world = open_world(root, world_images, seed=seed)
    return EvaluationDraw(world, mcq_records(world, n_images, mcq_samples, seed),
                          vhs_records(world, n_images, vhs_questions, seed))


def _requests(world: ToyWorld, records: Sequence[TaskRecord], span_of) -> list[CaptureRequest]:
    return [CaptureRequest(r.prompt, [world.image(f) for f in r.image_files], span_of(r)) for r in records]


def _batches(items: Sequence, size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


@dataclasses.dataclass
class TaskRun:
    """Restricted-argmax predictions of one task: ``correct`` [S] bool, ``pointer`` [S, L, H, N] at the cattok."""

    correct: np.ndarray
    pointer: np.ndarray

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean())


def run_task(model, processor, world: ToyWorld, records: Sequence[TaskRecord], batch_size: int = 16) -> TaskRun:
    """Answer `records` (one task) with `model`: restricted argmax over the task's answer tokens at
    the last prefill position, and pointer scores of every head at the cattok (mode ``exact``)."""
    choices = LETTERS if records[0].task == MCQ else VHS_CHOICES
    answer_ids = answer_token_ids(processor, choices)
    correct, pointer = [], []
    for batch in tqdm(list(_batches(records, batch_size)), desc=f"{records[0].task} capture", unit="batch", leave=False):
        captures = capture_heads_batch(model, processor, _requests(world, batch, lambda r: r.cattok_char_span),
                                       positions=("cattok",), answer_tokens=answer_ids)
        for record, capture in zip(batch, captures):
            correct.append(choices[int(capture.answer_logits.argmax())] in record.answers)
            pointer.append(capture.pointer[0].numpy())
    return TaskRun(np.array(correct), np.stack(pointer))


def ablated_accuracies(model, processor, world: ToyWorld, records: Sequence[TaskRecord],
                       head_sets: Sequence[Sequence[tuple[int, int]]], batch_size: int = 16) -> list[float]:
    """ICIR-MCQ accuracy (restricted argmax over A-D) with each head set of `head_sets` zeroed from
    each record's ``ablation_start_char`` token to the last prefill token (`ablate_heads`, §6.1).

    Each batch is encoded once and run once per head set. Returns one accuracy per head set.
    """
    answer_ids = torch.tensor(answer_token_ids(processor, LETTERS))
    token_id = image_token_id(model, resolve_adapter(model))
    correct = [0] * len(head_sets)
    for batch in tqdm(list(_batches(records, batch_size)), desc="ablations", unit="batch", leave=False):
        # The "cattok" of a one-character span at the ablation start is the span's first token.
        inputs, layouts = encode_requests(
            processor, _requests(world, batch, lambda r: (r.ablation_start_char, r.ablation_start_char + 1)), token_id)
        spans = [(layout.cattok, None) for layout in layouts]
        for k, heads in enumerate(head_sets):
            with torch.no_grad(), ablate_heads(model, heads, token_span=spans):
                logits = model(**inputs, use_cache=False).logits
            for row, (record, layout) in enumerate(zip(batch, layouts)):
                correct[k] += LETTERS[int(logits[row, layout.last, answer_ids].argmax())] in record.answers
    return [count / len(records) for count in correct]


@dataclasses.dataclass
class DemoEvaluation:
    """The known-answer figures of one demo model on one evaluation draw (see the module docstring).

    ``pointer_r1`` is the [L, H] grid of ICIR-MCQ pointer R@1 at the cattok; ``top_heads`` the K
    ablated heads (``LxxHyy``, best first); ``random_accuracy`` the accuracy under each random draw.
    """

    mcq_accuracy: float
    vhs_accuracy: float
    pointer_r1: np.ndarray
    chance_r1: float
    top_heads: list[str]
    top_accuracy: float
    random_heads: list[list[str]]
    random_accuracy: list[float]
    n_mcq: int
    n_vhs: int

    @property
    def best_r1(self) -> float:
        return float(self.pointer_r1.max())

    @property
    def median_r1(self) -> float:
        return float(np.median(self.pointer_r1))

    @property
    def ablation_separation(self) -> float:
        """Accuracy drop of the top-K ablation minus the mean drop of the random ablations."""
        return float(np.mean(self.random_accuracy) - self.top_accuracy)

    def summary(self) -> dict:
        """JSON-ready figures (rounded to 4 decimals)."""
        top = np.argsort(-self.pointer_r1, axis=None, kind="stable")[:5]
        layers, heads = np.unravel_index(top, self.pointer_r1.shape)
        return {
            "icir_mcq_n5_accuracy": round(self.mcq_accuracy, 4),
            "vhs_single_n5_accuracy": round(self.vhs_accuracy, 4),
            "pointer_r1_best": round(self.best_r1, 4),
            "pointer_r1_median": round(self.median_r1, 4),
            "pointer_r1_chance": round(self.chance_r1, 4),
            "top_pointer_heads": {head_name(int(l), int(h)): round(float(self.pointer_r1[l, h]), 4)
                                  for l, h in zip(layers, heads)},
            "ablation_k": len(self.top_heads),
            "ablated_top_heads": self.top_heads,
            "accuracy_top_heads_zeroed": round(self.top_accuracy, 4),
            "accuracy_random_heads_zeroed": [round(a, 4) for a in self.random_accuracy],
            "ablation_separation": round(self.ablation_separation, 4),
            "samples": {"icir_mcq": self.n_mcq, "vhs": self.n_vhs},
        }


def ablation_budget(n_layers: int, n_heads: int) -> int:
    """K = one eighth of all heads, at least 2 (3 for the demo model's 4 x 6 heads)."""
    return max(2, n_layers * n_heads // 8)


def evaluate_demo(model, processor, draw: EvaluationDraw) -> DemoEvaluation:
    """All known-answer figures of `model` on `draw` (see the module docstring)."""
    mcq = run_task(model, processor, draw.world, draw.mcq)
    vhs = run_task(model, processor, draw.world, draw.vhs)
    r1, chance = pointer_r1(list(mcq.pointer), [r.target for r in draw.mcq])
    n_layers, n_heads = r1.shape
    k = ablation_budget(n_layers, n_heads)
    order = np.argsort(-r1, axis=None, kind="stable")[:k]
    top = [tuple(int(i) for i in np.unravel_index(flat, r1.shape)) for flat in order]
    randoms = [
        [tuple(int(i) for i in np.unravel_index(flat, r1.shape))
         for flat in np.random.default_rng(seed).choice(n_layers * n_heads, size=k, replace=False)]
        for seed in RANDOM_SEEDS
    ]
    top_accuracy, *random_accuracy = ablated_accuracies(model, processor, draw.world, draw.mcq, [top, *randoms])
    return DemoEvaluation(
        mcq_accuracy=mcq.accuracy,
        vhs_accuracy=vhs.accuracy,
        pointer_r1=r1,
        chance_r1=chance,
        top_heads=[head_name(*head) for head in top],
        top_accuracy=top_accuracy,
        random_heads=[[head_name(*head) for head in heads] for heads in randoms],
        random_accuracy=random_accuracy,
        n_mcq=len(draw.mcq),
        n_vhs=len(draw.vhs),
    )
