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

import contextlib
import time

import torch
from demo_bench import BATCH, bench_arguments, encoded_toy_pools, interleaved_medians, training_step

from harness.capture import answer_token_ids
from harness.demo_model.architecture import DEMO_SIZES, build_model
from harness.demo_model.data import BARE_RETRIEVAL, RETRIEVAL, collate
from harness.demo_model.exclusive_pointer import exclusive_pointer
from harness.demo_model.packed_vision import packed_vision_attention

VARIANTS = ("unmasked", "exclusive")
POINTER_HEAD = (0, 0)


def main() -> None:
    args = bench_arguments(__doc__.splitlines()[0])
    processor, pixels, encoded, categories = encoded_toy_pools({
        "background retrieval N=5": (BARE_RETRIEVAL, 5, 200, 1), "with passages": (RETRIEVAL, 5, 200, 2)})
    model = build_model(processor, DEMO_SIZES, 0)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pad_id, image_token_id = processor.tokenizer.pad_token_id, model.config.image_token_id
    category_ids = torch.tensor(answer_token_ids(processor, [" " + name for name in categories]))
    batches = {pool: [collate(samples[i * BATCH:(i + 1) * BATCH], pixels, pad_id, image_token_id)
                      for i in range(len(samples) // BATCH)] for pool, samples in encoded.items()}

    print(f"{args.threads} thread(s), batch {BATCH}, {args.steps} steps per round, {args.rounds} rounds")
    for pool, batch_list in batches.items():
        def round_seconds(variant: str) -> float:
            started = time.perf_counter()
            with packed_vision_attention(model):
                for step in range(args.steps):
                    batch = batch_list[step % len(batch_list)]
                    mask = (exclusive_pointer(model, batch["input_ids"], category_ids, POINTER_HEAD)
                            if variant == "exclusive" else contextlib.nullcontext())
                    with mask:
                        training_step(model, optimizer, batch, processor.tokenizer.eos_token_id)
            return (time.perf_counter() - started) / args.steps

        medians = interleaved_medians(VARIANTS, round_seconds, args.rounds)
        print(f"{pool}: " + ", ".join(f"{variant} {medians[variant] * 1000:.0f} ms/step" for variant in VARIANTS)
              + f"; ratio exclusive/unmasked {medians['exclusive'] / medians['unmasked']:.2f}")


if __name__ == "__main__":
    main()
