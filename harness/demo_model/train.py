"""Train the demo model: answer-token cross-entropy on ICIR-MCQ and VHs samples of a toy world.

The recipe (`TrainingRecipe`) is a curriculum of `Stage`s; each stage draws its batches from a
weighted mixture of encoded sample pools (`Pool`: task x haystack size, `harness.demo_model.data`),
one pool per batch. The default has five stages, 4,400 steps at batch 32:

1. single-image naming (400 steps), which aligns the vision tower with the category and
   background words;
2. background retrieval over the images alone at N=1 and 2, beside naming (600 steps);
3. the same at N=2 and 5 (1,200 steps), which makes the model find the image a category names;
4. option finding over one-word options (400 steps), which binds each answer letter to its
   option line, beside background retrieval at N=5;
5. ICIR-MCQ n2/n5 and VHs N=5, with background retrieval amid passages (N=5) and option finding
   over captions beside them (1,800 steps).

Throughout, DropHead inside layer 0 zeroes each layer-0 head but the designated pointer head
L00H00 with probability 0.5 at every step (`TrainingRecipe.head_dropout`), and half of the
background-retrieval batches train under the exclusive-pointer mask
(`harness.demo_model.exclusive_pointer`; `TrainingRecipe.exclusive_pointer_p`), in which L00H00 at
a category's mention is the text's only way to the images. The language model's RoPE has Llama-3
frequency scaling (`harness.demo_model.architecture.DEMO_ROPE_SCALING`).

The loop (`train_demo_model`): AdamW (learning rate 1e-3, weight decay 0.01, gradient norm
clipped at 1), linear warm-up then cosine decay to a tenth of the peak. Only the answer is scored
(`answer_loss`): the logits at the last prompt position (where the first answer token is decoded)
against the correct answer tokens, and the logits at the answer token against the end-of-turn
token, so that generation stops after the one-token answer. Every `validate_every` steps and at
the end, accuracy on held-out pools of the training world is logged. It returns a
`TrainingResult`: the model in eval mode, its processor, the validation history and the seconds
spent preparing and training.

Reproducible: the toy world, the sample draws, the tokenizer, the initial weights and the batch
order all follow from the seed; torch runs deterministic algorithms on a fixed number of threads.

Every training run measured while the recipe was found, and what each change did, is recorded in
``docs/demo_model_training.md``; the shipped checkpoint's own run is in ``shipped/TRAINING.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from harness.capture import ablate_heads, answer_token_ids
from harness.demo_model.architecture import DEMO_SIZES, VOCAB_SIZE, build_model, build_processor
from harness.demo_model.data import (
    BACKGROUND_WORDS,
    BARE_RETRIEVAL,
    MCQ,
    NAMING,
    OPTION_WORDS,
    OPTIONS,
    RETRIEVAL,
    VHS,
    EncodedSample,
    PixelCache,
    TaskRecord,
    ToyWorld,
    collate,
    encode_records,
    mcq_records,
    naming_records,
    open_world,
    option_records,
    option_word_records,
    retrieval_records,
    vhs_records,
)
from harness.demo_model.exclusive_pointer import exclusive_pointer
from harness.demo_model.packed_vision import packed_vision_attention
from harness.tiny_models.parts import TextSizes
from icir_common import IMAGE_PLACEHOLDER

POOL_SEEDS = 100  # draw seeds per training seed, shared by training and validation pools


def pool_name(task: str, n_images: int) -> str:
    """Name of the pool of `task` at haystack size `n_images`, e.g. ``"icir_mcq-n5"``."""
    return f"{task}-n{n_images}"


@dataclasses.dataclass(frozen=True)
class Pool:
    """One source of training samples: `count` records of `task` at haystack size `n_images`."""

    task: str
    n_images: int
    count: int


@dataclasses.dataclass(frozen=True)
class Stage:
    """`steps` optimiser steps, each on a batch from one pool drawn with probabilities `weights`
    (pool name ``"<task>-n<N>"`` -> weight)."""

    steps: int
    weights: dict[str, float]


@dataclasses.dataclass(frozen=True)
class TrainingRecipe:
    """Everything that defines a training run besides the seed."""

    world_images: int = 4000
    pools: tuple[Pool, ...] = (
        Pool(NAMING, 1, 3600), Pool(BARE_RETRIEVAL, 1, 4000), Pool(BARE_RETRIEVAL, 2, 8000),
        Pool(BARE_RETRIEVAL, 5, 8000), Pool(RETRIEVAL, 5, 8000), Pool(OPTION_WORDS, 0, 12000),
        Pool(OPTIONS, 0, 12000), Pool(MCQ, 2, 8000), Pool(MCQ, 5, 12000), Pool(VHS, 5, 8000),
    )  # large enough that few records are seen twice: with 3,000-record pools option finding was memorised
    # Finding the image first, on its own, then letters, then ICIR-MCQ with VHs (module docstring;
    # docs/demo_model_training.md for the runs that led here).
    stages: tuple[Stage, ...] = (
        Stage(400, {pool_name(NAMING, 1): 1.0}),
        Stage(600, {pool_name(BARE_RETRIEVAL, 1): 0.3, pool_name(BARE_RETRIEVAL, 2): 0.5, pool_name(NAMING, 1): 0.2}),
        Stage(1200, {pool_name(BARE_RETRIEVAL, 2): 0.4, pool_name(BARE_RETRIEVAL, 5): 0.4, pool_name(NAMING, 1): 0.2}),
        Stage(400, {pool_name(OPTION_WORDS, 0): 0.8, pool_name(BARE_RETRIEVAL, 5): 0.2}),
        Stage(1800, {pool_name(MCQ, 2): 0.1, pool_name(MCQ, 5): 0.3, pool_name(RETRIEVAL, 5): 0.1,
                     pool_name(OPTIONS, 0): 0.05, pool_name(VHS, 5): 0.45}),
    )
    # DropHead (Zhou et al., 2020, "Scheduled DropHead") inside one layer: at every step each head of
    # `pointer_head`'s layer other than it is zeroed with probability `head_dropout`, so that the
    # finding concentrates in that head instead of being spread over the layer's heads.
    pointer_head: tuple[int, int] = (0, 0)
    head_dropout: float = 0.5
    # Each batch of these tasks trains under `exclusive_pointer` (the pointer head at a category's
    # mention the only way to the images) with probability `exclusive_pointer_p`.
    exclusive_pointer_tasks: tuple[str, ...] = (BARE_RETRIEVAL, RETRIEVAL)
    exclusive_pointer_p: float = 0.5
    validation: tuple[Pool, ...] = (Pool(MCQ, 5, 200), Pool(VHS, 5, 200), Pool(RETRIEVAL, 5, 100))
    validate_every: int = 1000
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    sizes: TextSizes = DEMO_SIZES
    vocab_size: int = VOCAB_SIZE
    threads: int = 2

    def __post_init__(self):
        # Pool k draws with seed POOL_SEEDS * seed + k and validation pool k with POOL_SEEDS * seed +
        # POOL_SEEDS - 1 - k: more pools would give a validation pool the draw seed of a training pool.
        if len(self.pools) + len(self.validation) > POOL_SEEDS:
            raise ValueError(f"{len(self.pools)} training and {len(self.validation)} validation pools: "
                             f"at most {POOL_SEEDS} in all, or validation draws would repeat training draws")

    @property
    def total_steps(self) -> int:
        return sum(stage.steps for stage in self.stages)


def pool_task(name: str) -> str:
    """The task of the pool called `name` (`pool_name`'s inverse for the task)."""
    return name.rsplit("-n", 1)[0]


def draw_records(world: ToyWorld, task: str, n_images: int, count: int, seed: int) -> list[TaskRecord]:
    """`count` records of `task` (``MCQ`` and the retrievals round `count` down to a balanced multiple
    of lcm(N, 4); ``NAMING`` is single-image, `n_images` must be 1; option finding is text-only, 0)."""
    if task == NAMING:
        if n_images != 1:
            raise ValueError(f"naming shows one image, got a pool of haystack size {n_images}")
        return naming_records(world, count, seed)
    if task in (OPTIONS, OPTION_WORDS):
        if n_images != 0:
            raise ValueError(f"option finding is text-only, got a pool of haystack size {n_images}")
        return (option_records if task == OPTIONS else option_word_records)(world, count, seed)
    if task in (MCQ, RETRIEVAL, BARE_RETRIEVAL):
        step = math.lcm(max(n_images, 2), 4)
        samples = max(step, count // step * step)
        if task == MCQ:
            return mcq_records(world, n_images, samples, seed)
        return retrieval_records(world, n_images, samples, seed, passages=task == RETRIEVAL)
    return vhs_records(world, n_images, count - count % 2, seed)


def answer_loss(model, batch: dict[str, torch.Tensor], end_of_turn_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scalar loss, [B] bool correct) of a `collate` batch: the answer at ``batch["last"]``
    (``answers`` [B, A] correct answer ids, -1 padded) and the end of the turn after it.

    Only two positions per sample are projected by the LM head: the last prompt position (where the
    first answer token is decoded) and the appended answer token, whose target is `end_of_turn_id`
    (``<|im_end|>``), so that generation stops after the one-token answer as a chat model's does
    (lm-eval's VHs scoring reads the generated text). A sample's answer loss is the mean negative
    log-probability of its correct answers (cross-entropy against the uniform distribution over
    them; plain cross-entropy for one answer); the loss is its mean plus the mean end-of-turn
    cross-entropy. A sample is correct when the full-vocabulary argmax at ``last`` is one of its answers.
    """
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw",
                                    "position_ids") if k in batch}
    hidden = model.model(**inputs, use_cache=False).last_hidden_state
    rows = torch.arange(hidden.shape[0])
    logits, end_logits = model.lm_head(torch.stack([hidden[rows, batch["last"]], hidden[rows, batch["last"] + 1]]))
    answers = batch["answers"]
    valid = answers >= 0
    log_p = logits.log_softmax(-1).gather(1, answers.clamp(min=0))
    answer_nll = -((log_p * valid).sum(1) / valid.sum(1)).mean()
    end_nll = torch.nn.functional.cross_entropy(end_logits, torch.full_like(rows, end_of_turn_id))
    correct = ((logits.argmax(-1, keepdim=True) == answers) & valid).any(1)
    return answer_nll + end_nll, correct


@torch.no_grad()
def accuracy(model, samples: Sequence[EncodedSample], pixels: PixelCache, pad_id: int, image_token_id: int,
             end_of_turn_id: int, batch_size: int = 64) -> float:
    """Fraction of `samples` whose answer token is the argmax of the full-vocabulary next-token logits."""
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, len(samples), batch_size):
        batch = collate(samples[start:start + batch_size], pixels, pad_id, image_token_id)
        correct += int(answer_loss(model, batch, end_of_turn_id)[1].sum())
    model.train(was_training)
    return correct / len(samples)


def _learning_rate(step: int, recipe: TrainingRecipe) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak (fraction of ``learning_rate``)."""
    if step < recipe.warmup_steps:
        return (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, recipe.total_steps - recipe.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


@dataclasses.dataclass
class TrainingResult:
    """A trained model, its processor, and the log of the run (validation accuracies by step, seconds)."""

    model: object
    processor: object
    history: list[dict]
    seconds: dict[str, float]


def train_demo_model(seed: int, work_dir: Path, recipe: TrainingRecipe = TrainingRecipe()) -> TrainingResult:
    """Train a demo model from scratch with `seed`; the toy world is written under `work_dir`.

    The training world uses toy-corpus seed ``1_000_000 + seed`` (evaluations use other seeds, so
    no image is shared); each pool draws its records with its own seed derived from `seed`.

    Returns:
        `TrainingResult` with the model in eval mode.
    """
    with _reproducible(recipe.threads):
        return _train(seed, work_dir, recipe)


@contextlib.contextmanager
def _reproducible(threads: int) -> Iterator[None]:
    """Deterministic torch algorithms on `threads` intra-op threads; the previous settings are restored."""
    previous = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])


def _train(seed: int, work_dir: Path, recipe: TrainingRecipe) -> TrainingResult:
    started = time.perf_counter()
    world = open_world(work_dir / "toy", recipe.world_images, seed=1_000_000 + seed)
    records: dict[str, list[TaskRecord]] = {}
    for k, pool in enumerate(tqdm(recipe.pools, desc="drawing samples", unit="pool")):
        records[pool_name(pool.task, pool.n_images)] = draw_records(world, pool.task, pool.n_images, pool.count,
                                                                    seed=POOL_SEEDS * seed + k)
    validation = {
        "val-" + pool_name(pool.task, pool.n_images): draw_records(world, pool.task, pool.n_images, pool.count,
                                                                   seed=POOL_SEEDS * seed + POOL_SEEDS - 1 - k)
        for k, pool in enumerate(recipe.validation)
    }
    all_records = [r for group in (*records.values(), *validation.values()) for r in group]
    processor = build_processor([r.prompt.replace(IMAGE_PLACEHOLDER, "") for r in all_records], recipe.vocab_size,
                                answer_words=[*sorted(world.index.categories.values()), *BACKGROUND_WORDS])
    pixels = PixelCache(processor, world, [f for r in all_records for f in r.image_files])
    encoded = {name: encode_records(processor, group, pixels) for name, group in records.items()}
    encoded_validation = {name: encode_records(processor, group, pixels) for name, group in validation.items()}
    prepared = time.perf_counter()

    model = build_model(processor, recipe.sizes, seed)
    model.train()
    pad_id, image_token_id = processor.tokenizer.pad_token_id, model.config.image_token_id
    end_of_turn_id = processor.tokenizer.eos_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _learning_rate(step, recipe))
    rng = np.random.default_rng([seed, 7])
    drop_rng = np.random.default_rng([seed, 8])  # its own stream: the batches do not depend on `head_dropout`
    exclusive_rng = np.random.default_rng([seed, 9])  # likewise for `exclusive_pointer_p`
    category_ids = None
    if recipe.exclusive_pointer_p > 0 and {pool.task for pool in recipe.pools} & set(recipe.exclusive_pointer_tasks):
        categories = sorted(world.index.categories.values())
        category_ids = torch.tensor(answer_token_ids(processor, [" " + name for name in categories]))
    layer, pointer = recipe.pointer_head
    droppable = [(layer, head) for head in range(recipe.sizes.num_attention_heads) if head != pointer]
    history: list[dict] = []
    step = 0
    progress = tqdm(total=recipe.total_steps, desc="training", unit="step")
    with packed_vision_attention(model):
        for stage in recipe.stages:
            names = list(stage.weights)
            probabilities = np.array([stage.weights[n] for n in names]) / sum(stage.weights.values())
            for _ in range(stage.steps):
                # One pool per batch: its prompts have similar lengths, so little padding is computed.
                name = names[rng.choice(len(names), p=probabilities)]
                pool = encoded[name]
                batch_samples = [pool[i] for i in rng.integers(len(pool), size=recipe.batch_size)]
                batch = collate(batch_samples, pixels, pad_id, image_token_id)
                dropped = [head for head in droppable if drop_rng.random() < recipe.head_dropout]
                exclusive = (pool_task(name) in recipe.exclusive_pointer_tasks
                             and exclusive_rng.random() < recipe.exclusive_pointer_p)
                mask = (exclusive_pointer(model, batch["input_ids"], category_ids, recipe.pointer_head)
                        if exclusive else contextlib.nullcontext())
                with ablate_heads(model, dropped), mask:
                    loss, _ = answer_loss(model, batch, end_of_turn_id)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                progress.update()
                progress.set_postfix(loss=f"{loss.item():.3f}")
                if step % recipe.validate_every == 0 or step == recipe.total_steps:
                    row = {"step": step, "loss": round(loss.item(), 4),
                           "seconds": round(time.perf_counter() - started, 1)}
                    row |= {name: accuracy(model, samples, pixels, pad_id, image_token_id, end_of_turn_id)
                            for name, samples in encoded_validation.items()}
                    history.append(row)
                    progress.write(" ".join(f"{k}={v}" for k, v in row.items()))
    progress.close()
    model.eval()
    finished = time.perf_counter()
    return TrainingResult(model, processor, history,
                          {"preparation": round(prepared - started, 1), "training": round(finished - prepared, 1),
                           "total": round(finished - started, 1)})
