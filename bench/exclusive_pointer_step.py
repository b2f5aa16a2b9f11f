"""What the exclusive-pointer mask costs per demo-model training step.

Model: the demo model's architecture (`harness.demo_model.architecture`, 4 layers x 6 heads,
seed 0) on a small toy world. Batches: 32 background-retrieval samples over five images, with
passages and without (the two pools `icir demo-model train` masks), collated as training collates
them. Each step is the training step (packed vision attention, forward with two layer-0 heads
zeroed, answer-token loss, backward, clipping, AdamW) in two variants:

- ``unmasked``: transformers' SDPA kernel with its causal and padding mask;
- ``exclusive``: under `harness.demo_model.exclusive_pointer` (per-head mask in the pointer
  head's layer, a shared one in the others), as half of these batches train.

Time: median wall-clock seconds per step of interleaved rounds (the variants alternate, so drift
of a shared machine hits both), after one warm-up round each, on a fixed number of intra-op
threads (default 2, as the training runs). The printed ratio is exclusive / unmasked.

Usage: ``python bench/exclusive_pointer_step.py [--rounds 5] [--steps 6] [--threads 2]``
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
from harness.demo_model.data import BACKGROUND_WORDS, BARE_RETRIEVAL, RETRIEVAL, PixelCache, collate, encode_records
from harness.demo_model.exclusive_pointer import exclusive_pointer
from harness.demo_model.packed_vision import packed_vision_attention
from harness.demo_model.train import answer_loss, draw_records, open_world, token_id

VARIANTS = ("unmasked", "exclusive")
BATCH = 32
POINTER_HEAD = (0, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per variant")
    parser.add_argument("--steps", type=int, default=6, help="training steps per round and pool")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as work:
        world = open_world(Path(work) / "toy", 400, seed=5)
        records = {"background retrieval N=5": draw_records(world, BARE_RETRIEVAL, 5, 200, seed=1),
                   "with passages": draw_records(world, RETRIEVAL, 5, 200, seed=2)}
        everything = [r for group in records.values() for r in group]
        categories = sorted(world.index.categories.values())
        processor = build_processor([r.prompt.replace("<image>", "") for r in everything], VOCAB_SIZE,
                                    answer_words=[*categories, *BACKGROUND_WORDS])
        pixels = PixelCache(processor, world, [f for r in everything for f in r.image_files])
        encoded = {pool: encode_records(processor, group, pixels) for pool, group in records.items()}

    model = build_model(processor, DEMO_SIZES, 0)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pad_id, image_token_id = processor.tokenizer.pad_token_id, model.config.image_token_id
    category_ids = torch.tensor([token_id(processor, " " + name) for name in categories])
    batches = {pool: [collate(samples[i * BATCH:(i + 1) * BATCH], pixels, pad_id, image_token_id)
                      for i in range(len(samples) // BATCH)] for pool, samples in encoded.items()}

    def round_seconds(variant: str, batch_list: list[dict]) -> float:
        started = time.perf_counter()
        with packed_vision_attention(model):
            for step in range(args.steps):
                batch = batch_list[step % len(batch_list)]
                mask = (exclusive_pointer(model, batch["input_ids"], category_ids, POINTER_HEAD)
                        if variant == "exclusive" else contextlib.nullcontext())
                with ablate_heads(model, [(0, 1), (0, 3)]), mask:
                    loss, _ = answer_loss(model, batch, processor.tokenizer.eos_token_id)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        return (time.perf_counter() - started) / args.steps

    print(f"{args.threads} thread(s), batch {BATCH}, {args.steps} steps per round, {args.rounds} rounds")
    for pool, batch_list in batches.items():
        for variant in VARIANTS:
            round_seconds(variant, batch_list)
        times = {variant: [] for variant in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                times[variant].append(round_seconds(variant, batch_list))
        medians = {variant: statistics.median(values) for variant, values in times.items()}
        print(f"{pool}: " + ", ".join(f"{variant} {medians[variant] * 1000:.0f} ms/step" for variant in VARIANTS)
              + f"; ratio exclusive/unmasked {medians['exclusive'] / medians['unmasked']:.2f}")


if __name__ == "__main__":
    main()
