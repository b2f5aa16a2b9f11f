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

import contextlib
import time

import torch
from demo_bench import BATCH, bench_arguments, encoded_toy_pools, interleaved_medians, training_step

from harness.demo_model.architecture import DEMO_SIZES, build_model
from harness.demo_model.data import MCQ, VHS, collate
from harness.demo_model.packed_vision import packed_vision_attention

VARIANTS = ("transformers", "packed", "training")


def main() -> None:
    args = bench_arguments(__doc__.splitlines()[0])
    processor, pixels, encoded, _ = encoded_toy_pools({"ICIR-MCQ n5": (MCQ, 5, 200, 1), "VHs N=5": (VHS, 5, 200, 2)})
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

    print(f"{args.threads} thread(s), batch {BATCH}, {args.steps} steps per round, {args.rounds} rounds")
    for task, batch_list in batches.items():
        inputs = {variant: inputs_of(variant, batch_list) for variant in VARIANTS}

        def round_seconds(variant: str) -> float:
            context = contextlib.nullcontext() if variant == "transformers" else packed_vision_attention(model)
            started = time.perf_counter()
            with context:
                for step in range(args.steps):
                    training_step(model, optimizer, inputs[variant][step % len(batch_list)],
                                  processor.tokenizer.eos_token_id)
            return (time.perf_counter() - started) / args.steps

        medians = interleaved_medians(VARIANTS, round_seconds, args.rounds)
        print(f"{task}: " + ", ".join(f"{variant} {medians[variant] * 1000:.0f} ms/step" for variant in VARIANTS)
              + "; ratios " + ", ".join(f"transformers/{variant} {medians['transformers'] / medians[variant]:.2f}"
                                        for variant in VARIANTS[1:]))


if __name__ == "__main__":
    main()
