"""Seconds and peak GPU memory per document at the paper's model shape (a machine with a GPU).

A randomly initialised Qwen3-VL with Qwen3-VL-8B's language-model shape (36 layers x 32 heads,
head dimension 128, 8 KV heads, hidden size 4096, MLP 12288) and vision tower (27 blocks of width
1152, 16 heads, 16-px patches merged 2x2 into 4096, DeepStack at blocks 8, 16, 24), bf16, on
``sdpa`` and on ``flash_attention_2`` where the ``flash_attn`` package is installed. Images are
448 px (App. A: 196 visual tokens each). Per attention kernel, side by side in one process:

- ICIR-MCQ document (5 images): `capture_encoded` (every head, all readout positions) against a
  plain prefill of the same inputs;
- VHs N=10 document: capture plus greedy decoding from the capture's cache (`continue_greedy`);
- the N=10 ablation grid (37 cells, `bench/ablation_grid.py`): prefix-shared cells against one
  full forward per cell, with identical outcomes required.

Each figure is the median of ``--repeats`` runs after a warm-up; peak memory is
``torch.cuda.max_memory_allocated`` over each measurement. The tokenizer is the tiny models' (a
small vocabulary), so embedding and output layers are smaller than the real checkpoint's.

``--small`` shrinks both towers (4 layers x 8 heads of 32, a 2-block vision tower) so the script
runs on a CPU; CI runs it that way (``tests/test_bench_scripts.py``). Figures at the real shape
go in the closing note of the ablation issue when a GPU machine was lent.

Usage: ``python bench/gpu_shapes.py [--small] [--repeats 3] [--device cuda]``
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ablation_grid import grid_cells  # noqa: E402

from harness.ablation.cells import full_forward_cells, prefix_shared_cells  # noqa: E402
from harness.capture import READOUT_POSITIONS, CaptureRequest  # noqa: E402
from harness.capture.adapters import image_token_id, resolve_adapter  # noqa: E402
from harness.capture.engine import capture_encoded  # noqa: E402
from harness.capture.image_inputs import resolve_image_inputs  # noqa: E402
from harness.capture.inputs import encode_requests  # noqa: E402
from harness.lm_eval_plugin.generation import GreedySettings, continue_greedy  # noqa: E402
from harness.tiny_models import random_images  # noqa: E402
from harness.tiny_models.qwen3_vl import build_processor, mrope_section, qwen_token_ids  # noqa: E402

SIDE = 448
PAPER = {"text": {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                  "hidden_size": 4096, "intermediate_size": 12288},
         "vision": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                    "deepstack_visual_indexes": [8, 16, 24], "num_position_embeddings": 2304}}
SMALL = {"text": {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                  "hidden_size": 256, "intermediate_size": 512},
         "vision": {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
                    "deepstack_visual_indexes": [0], "num_position_embeddings": 256}}
SETTINGS = GreedySettings({}, (), 3, ("yes", "no"))


def build(shape: dict, device: str, dtype: torch.dtype, kernel: str):
    """A random Qwen3-VL of `shape` on `device` in `dtype` with attention `kernel`, and its processor."""
    processor = build_processor()
    tokenizer = processor.tokenizer
    text = shape["text"]
    config = Qwen3VLConfig(
        text_config={**text, "vocab_size": len(tokenizer), "max_position_embeddings": 32768,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0,
                                         "mrope_section": mrope_section(text["head_dim"], 20),
                                         "mrope_interleaved": True}},
        vision_config={**shape["vision"], "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                       "out_hidden_size": text["hidden_size"]},
        **qwen_token_ids(tokenizer),
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(config).to(dtype)
    model.set_attn_implementation(kernel)
    return model.eval(), processor


def encode(model, processor, n_images: int, question: str):
    """One document of `n_images` 448-px images then `question`, encoded as the model class does."""
    prompt = "<image>" * n_images + "\n" + question
    start = prompt.index("a cat")
    request = CaptureRequest(prompt, random_images(n_images, seed=n_images, size=(SIDE, SIDE)), (start, start + 5))
    inputs, layouts = encode_requests(processor, [request], image_token_id(model, resolve_adapter(model)),
                                      resolve_image_inputs(processor, resolve_adapter(model), SIDE))
    return inputs.to(next(model.parameters()).device), layouts


def timed(function, repeats: int, device: str) -> tuple[float, float, object]:
    """``(median seconds, peak GiB, last result)`` of `repeats` calls after one warm-up."""
    function()
    seconds, peak, result = [], 0.0, None
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        began = time.perf_counter()
        result = function()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            peak = max(peak, torch.cuda.max_memory_allocated() / 2**30)
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), peak, result


def measure(model, processor, repeats: int, device: str) -> dict:
    """The three measurements of the module docstring for one model and kernel."""
    vocab = range(model.get_output_embeddings().out_features)
    figures = {}
    inputs, layouts = encode(model, processor, 5, "Which image shows a cat? Answer with the option's letter.")
    figures["icir_mcq plain"] = timed(lambda: model(**inputs), repeats, device)
    figures["icir_mcq capture"] = timed(lambda: capture_encoded(model, inputs, layouts, READOUT_POSITIONS, "proxy",
                                                                vocab), repeats, device)
    inputs, layouts = encode(model, processor, 10, "For the image with a cat, is there a dog? Answer Yes or No.")

    def vhs():
        cache = transformers.DynamicCache(config=model.config)
        (capture,) = capture_encoded(model, inputs, layouts, ("cattok",), "proxy", vocab, cache)
        return continue_greedy(model, processor.tokenizer, inputs["input_ids"], cache, capture.answer_logits, SETTINGS)

    figures["vhs N=10 capture+decode"] = timed(vhs, repeats, device)
    text = model.config.get_text_config()
    total = text.num_hidden_layers * text.num_attention_heads
    ks = (5, 10, 15, 20, 25, 30) if total >= 90 else (1, 2, 3, 4, 5, 6)
    cells = [c.heads for c in grid_cells(text.num_hidden_layers, text.num_attention_heads, ks, max(ks))]
    layout, start = layouts[0], layouts[0].cattok
    tokenizer = processor.tokenizer
    figures["ablation grid shared"] = timed(
        lambda: prefix_shared_cells(model, tokenizer, inputs, layout, start, cells, SETTINGS), repeats, device)
    figures["ablation grid full"] = timed(
        lambda: full_forward_cells(model, tokenizer, inputs, layout, start, cells, SETTINGS), repeats, device)
    figures["identical"] = figures["ablation grid shared"][2] == figures["ablation grid full"][2]
    return figures


def main(argv: list[str] | None = None) -> int:
    """Print the figures per kernel; exit 1 when the two ablation routes disagree."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="a small shape that runs on a CPU")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    kernels = ["sdpa"] + (["flash_attention_2"] if importlib.util.find_spec("flash_attn") and
                          args.device.startswith("cuda") else [])
    ok = True
    for kernel in kernels:
        with torch.no_grad():
            model, processor = build(SMALL if args.small else PAPER, args.device, dtype, kernel)
            figures = measure(model, processor, args.repeats, args.device)
        shape = "small" if args.small else "Qwen3-VL-8B shape"
        print(f"\n{shape}, {kernel}, {dtype}, {args.device}:")
        for name, value in figures.items():
            if name != "identical":
                print(f"  {name:26s} {value[0]:8.3f} s/doc   peak {value[1]:6.2f} GiB")
        plain, capture = figures["icir_mcq plain"][0], figures["icir_mcq capture"][0]
        shared, full = figures["ablation grid shared"][0], figures["ablation grid full"][0]
        print(f"  capture / plain x{capture / plain:.2f}; ablation grid full / shared x{full / shared:.1f}; "
              f"identical outcomes: {figures['identical']}")
        ok &= figures["identical"]
        del model
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
