"""The ablation grid per document: prefix-shared cells against one full forward per cell.

The full grid at N = 10 (App. I): 3 arms and 3 random seeds at K in {5, ..., 30}, plus the
unablated baseline, 37 cells. Each document's cells run twice, side by side in this process
(alternating, after a warm-up): `harness.ablation.cells.prefix_shared_cells` (the prefix before the
anchor phrase prefilled once, the suffix batched over cells) and `full_forward_cells` (the whole
prompt once per cell). The generated tokens of every cell must be identical; the script prints
the median seconds per document of each and their ratio.

Models:

- ``widened``: the tiny random Qwen3-VL of `harness.tiny_models` widened to 12 layers x 8 heads
  (4 KV heads, d_h = 16), so three disjoint arms of 30 heads fit, with images of the paper's size
  in tokens (512 px: 16 x 16 = 256 visual tokens each), so the prefix is as long as a real
  N = 10 haystack (about 2,600 tokens);
- ``demo``: the shipped demo model (4 x 6 heads; arms capped at its 24 heads, K in {1, 2, 3}) on
  its 64 px images of 4 tokens each: a short prefix, so a smaller ratio.

Measured (2-core CPU, 1 thread, median of 3 documents after a warm-up, 2026-12-01), three runs:
widened model x27.1 (1.03 s per document prefix-shared against 27.95 s with a full forward per
cell), x22.6 (1.24 s against 28.10 s) and x25.2 (1.10 s against 27.64 s); demo model x8.5 and
x8.1 (0.03-0.04 s against 0.29-0.32 s). Every cell's outcome identical in both routes, every run.
The prefix prefill alone costs about one full forward (0.75-0.8 s), most of the shared route; the
37 cells' suffixes and decoding run as one batch through the shared-prefix kernel (CPU: aten's
flash kernel over the prefix, merged with the rows' own keys by log-sum-exp) in the rest.

Usage: ``python bench/ablation_grid.py [--docs 3] [--threads 1] [--models widened demo]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from harness.ablation.arms import BASELINE, Cell, random_heads
from harness.ablation.cells import can_share_prefix, full_forward_cells, prefix_shared_cells
from harness.capture.adapters import image_token_id, resolve_adapter
from harness.capture.image_inputs import resolve_image_inputs
from harness.capture.inputs import CaptureRequest, encode_requests
from harness.lm_eval_plugin.generation import GreedySettings
from harness.metrics.rankings import ranking_names
from harness.tiny_models import build_tiny, random_images

N = 10
WIDENED = {"num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 16}
SETTINGS = GreedySettings({}, (), 3, ("yes", "no"))


def grid_cells(n_layers: int, n_heads: int, ks: tuple[int, ...], arm_size: int) -> list[Cell]:
    """Baseline, three disjoint arms of `arm_size` heads (drawn from a seeded permutation) and 3 random seeds."""
    order = ranking_names(np.random.default_rng(0).permutation(n_layers * n_heads), n_heads)
    arms = {name: order[i * arm_size:(i + 1) * arm_size] for i, name in enumerate(("overlap", "pointer_only",
                                                                                  "writer_only"))}
    cells = [Cell(BASELINE, 0, -1, ())]
    cells += [Cell(arm, k, -1, tuple(heads[:k])) for arm, heads in arms.items() for k in ks]
    cells += [Cell("random", k, seed, random_heads(n_layers, n_heads, k, seed)) for seed in (0, 1, 2) for k in ks]
    return cells


def documents(model, processor, side: int | None, n_docs: int):
    """`n_docs` VHs-shaped documents: N images, then the anchor question (the ablation start)."""
    call = resolve_image_inputs(processor, resolve_adapter(model), side)
    image_token = image_token_id(model, resolve_adapter(model))
    prompt = "<image>" * N + "\nFor the image with a cat, is there a dog? Answer Yes or No."
    start_char = prompt.index("a cat")
    docs = []
    for seed in range(n_docs):
        request = CaptureRequest(prompt, random_images(N, seed=seed, size=(side or 64, side or 64)),
                                 (start_char, start_char + 1))
        inputs, (layout,) = encode_requests(processor, [request], image_token, call)
        docs.append((inputs, layout, layout.cattok))
    return docs


def measure(name: str, model, processor, side: int | None, ks: tuple[int, ...], arm_size: int, n_docs: int) -> dict:
    """Seconds per document of both routes (median), their ratio, and whether every cell agrees."""
    text = model.config.get_text_config()
    cells = [c.heads for c in grid_cells(text.num_hidden_layers, text.num_attention_heads, ks, arm_size)]
    tokenizer = processor.tokenizer
    times = {"shared": [], "full": []}
    identical = True
    for index, (inputs, layout, start) in enumerate(documents(model, processor, side, n_docs + 1)):
        assert can_share_prefix(layout, start) is None
        results = {}
        for route in ("shared", "full"):
            began = time.perf_counter()
            if route == "shared":
                results[route] = prefix_shared_cells(model, tokenizer, inputs, layout, start, cells, SETTINGS)
            else:
                results[route] = full_forward_cells(model, tokenizer, inputs, layout, start, cells, SETTINGS)
            if index:  # the first document warms both routes up
                times[route].append(time.perf_counter() - began)
        identical &= results["shared"] == results["full"]
    shared, full = statistics.median(times["shared"]), statistics.median(times["full"])
    print(f"{name}: {len(cells)} cells, prompt {layout.last + 1} tokens (ablation from token {start}); "
          f"per document: prefix-shared {shared:.2f} s, full forward per cell {full:.2f} s, "
          f"ratio x{full / shared:.1f}; identical outcomes: {identical}")
    return {"shared": shared, "full": full, "ratio": full / shared, "identical": identical}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 when any cell's outcome differs between the two routes."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=3, help="measured documents per model (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--models", nargs="+", default=["widened", "demo"], choices=["widened", "demo"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = {}
    with torch.no_grad():
        if "widened" in args.models:
            model, processor = build_tiny("qwen3_vl", seed=0, **WIDENED)
            results["widened"] = measure("widened tiny Qwen3-VL (12 x 8 heads, 256 tokens per image)", model,
                                         processor, 512, (5, 10, 15, 20, 25, 30), 30, args.docs)
        if "demo" in args.models:
            from harness.demo_model import default_model_path
            from harness.demo_model.checkpoint import load_demo_model

            model, processor = load_demo_model(default_model_path())
            results["demo"] = measure("demo model (4 x 6 heads, 4 tokens per image)", model, processor, 64,
                                      (1, 2, 3), 8, args.docs)
    return 0 if all(r["identical"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
