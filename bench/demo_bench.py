"""What the demo-model training benches share: arguments, a small toy world's encoded pools, the
training step, and interleaved timing (`bench/demo_training_step.py`, `bench/exclusive_pointer_step.py`)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from harness.capture import ablate_heads
from harness.demo_model.architecture import VOCAB_SIZE, build_processor
from harness.demo_model.data import BACKGROUND_WORDS, PixelCache, encode_records
from harness.demo_model.train import answer_loss, draw_records, open_world

BATCH = 32


def bench_arguments(description: str) -> argparse.Namespace:
    """``--rounds``, ``--steps`` and ``--threads`` (torch's intra-op threads are set to the latter)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per variant")
    parser.add_argument("--steps", type=int, default=6, help="training steps per round and pool")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args


def encoded_toy_pools(pools: dict[str, tuple[str, int, int, int]]):
    """Encode pools ``name -> (task, n_images, count, draw seed)`` of a 400-image demo toy world.

    Returns:
        ``(processor, pixels, encoded, categories)``: the demo processor fitted to the pools' prompts,
        their `PixelCache`, ``name -> [EncodedSample]`` and the world's sorted category names.
    """
    with tempfile.TemporaryDirectory() as work:
        world = open_world(Path(work) / "toy", 400, seed=5)
        records = {name: draw_records(world, task, n, count, seed=seed)
                   for name, (task, n, count, seed) in pools.items()}
        everything = [r for group in records.values() for r in group]
        categories = sorted(world.index.categories.values())
        processor = build_processor([r.prompt.replace("<image>", "") for r in everything], VOCAB_SIZE,
                                    answer_words=[*categories, *BACKGROUND_WORDS])
        pixels = PixelCache(processor, world, [f for r in everything for f in r.image_files])
        encoded = {name: encode_records(processor, group, pixels) for name, group in records.items()}
    return processor, pixels, encoded, categories


def training_step(model, optimizer, batch: dict[str, torch.Tensor], end_of_turn_id: int) -> None:
    """One step as `icir demo-model train` takes it: two layer-0 heads zeroed (DropHead), answer-token
    loss, backward, gradient clipping at 1, optimiser step."""
    with ablate_heads(model, [(0, 1), (0, 3)]):
        loss, _ = answer_loss(model, batch, end_of_turn_id)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def interleaved_medians(variants: Sequence[str], round_seconds: Callable[[str], float],
                        rounds: int) -> dict[str, float]:
    """Median seconds per step of each variant over `rounds` rounds in which the variants alternate
    (so drift of a shared machine hits all), after one warm-up round each."""
    for variant in variants:
        round_seconds(variant)
    times = {variant: [] for variant in variants}
    for _ in range(rounds):
        for variant in variants:
            times[variant].append(round_seconds(variant))
    return {variant: statistics.median(values) for variant, values in times.items()}
