"""What packed vision attention and precomputed RoPE positions save per demo-model training step.

Model: the demo model's architecture (`harness.demo_model.architecture`, 4 layers x 6 heads,
seed 0) on a small toy world. Batches: 32 encoded ICIR-MCQ n5 samples (160 images of 16 patches
each) and 32 VHs N=5 questions, collated as `icir demo-model train` collates them. Each step is the
training step (forward with two layer-0 heads zeroed, answer-token loss, backward, clipping, AdamW)
in three variants:

- ``transformers``: the model as loaded: the vision tower's SDPA path makes one kernel call per
  image and vision layer, and the model computes the multimodal RoPE positions
  (``get_rope_index``, a Python loop over samples and images);
- ``packed``: `harness.demo_model.packed_vision`, one call per vision layer;
- ``training``: packed, with the positions `harness.demo_model.data.collate` computes
  (`mrope_position_ids`), as `icir demo-model train` runs.

Time: median wall-clock seconds per step of interleaved rounds (the variants alternate, so drift
of a shared machine hits all), after one warm-up round each, on a fixed number of intra-op
threads (default 2, as the training runs). The printed ratios are transformers / variant.

Usage: ``python bench/demo_training_step.py [--rounds 5] [--steps 6] [--threads 2]``
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch

from harness.capture import ablate_heads
from harness.demo_model.architecture import DEMO_SIZES, VOCAB_SIZE, build_model, build_processor
from harness.demo_model.data import BACKGROUND_WORDS, MCQ, VHS, PixelCache, collate, encode_records
from harness.demo_model.packed_vision import packed_vision_attention
from harness.demo_model.train import answer_loss, draw_records, open_world

VARIANTS = ("transformers", "packed", "training")
BATCH = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per variant")
    parser.add_argument("--steps", type=int, default=6, help="training steps per round and task")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as work:
        world = open_world(Path(work) / "toy", 400, seed=5)
        records = {"ICIR-MCQ n5": draw_records(world, MCQ, 5, 200, seed=1),
                   "VHs N=5": draw_records(world, VHS, 5, 200, seed=2)}
        everything = [r for group in records.values() for r in group]
        processor = build_processor([r.prompt.replace("<image>", "") for r in everything], VOCAB_SIZE,
                                    answer_words=[*sorted(world.index.categories.values()), *BACKGROUND_WORDS])
        pixels = PixelCache(processor, world, [f for r in everything for f in r.image_files])
        encoded = {task: encode_records(processor, group, pixels) for task, group in records.items()}

    model = build_model(processor, DEMO_SIZES, 0)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pad_id, image_token_id = processor.tokenizer.pad_token_id, model.config.image_token_id
    batches = {task: [collate(samples[i * BATCH:(i + 1) * BATCH], pixels, pad_id, image_token_id)
                      for i in range(len(samples) // BATCH)] for task, samples in encoded.items()}

    def inputs_of(variant: str, batch_list: list[dict]) -> list[dict]:
        """The batches as `variant` feeds them: without `collate`'s positions, the model computes its own."""
        if variant == "training":
            return batch_list
        return [{k: v for k, v in batch.items() if k != "position_ids"} for batch in batch_list]

    def round_seconds(variant: str, batch_list: list[dict]) -> float:
        context = contextlib.nullcontext() if variant == "transformers" else packed_vision_attention(model)
        started = time.perf_counter()
        with context:
            for step in range(args.steps):
                with ablate_heads(model, [(0, 1), (0, 3)]):
                    loss, _ = answer_loss(model, batch_list[step % len(batch_list)], processor.tokenizer.eos_token_id)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        return (time.perf_counter() - started) / args.steps

    print(f"{args.threads} thread(s), batch {BATCH}, {args.steps} steps per round, {args.rounds} rounds")
    for task, batch_list in batches.items():
        inputs = {variant: inputs_of(variant, batch_list) for variant in VARIANTS}
        for variant in VARIANTS:
            round_seconds(variant, inputs[variant])
        times = {variant: [] for variant in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                times[variant].append(round_seconds(variant, inputs[variant]))
        medians = {variant: statistics.median(values) for variant, values in times.items()}
        print(f"{task}: " + ", ".join(f"{variant} {medians[variant] * 1000:.0f} ms/step" for variant in VARIANTS)
              + "; ratios " + ", ".join(f"transformers/{variant} {medians['transformers'] / medians[variant]:.2f}"
                                        for variant in VARIANTS[1:]))


if __name__ == "__main__":
    main()
