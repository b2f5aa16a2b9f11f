"""What a VHs document costs with head capture, against a plain ``model.generate`` on the same inputs.

One VHs document of haystack size N = 10, encoded once (`harness.capture.inputs.encode_requests`),
then two variants side by side, interleaved in every round after one warm-up each:

- ``plain``: ``model.generate(**inputs)``, greedy, no capture (one prefill + decoding steps);
- ``capture``: what ``hf-multimodal-heads`` runs per VHs document: the capture prefill
  (`capture_encoded` in mode ``exact`` at the cattok, filling a ``DynamicCache``), then decoding
  continued from that cache (`harness.lm_eval_plugin.generation.continue_greedy`).

Both decode the same fixed number of tokens (no stop, so the work is equal), and the script
checks that their tokens are identical. Models:

- ``widened``: the tiny random Qwen3-VL widened as in ``bench/capture_overhead.py`` (8 layers x 8
  heads), with images resized so each gives about 256 visual tokens (the paper's 448 x 448 budget
  on Qwen3-VL), so the prompt is as long as a real N = 10 haystack;
- ``demo``: the shipped demo model on its 64 px toy images (4 visual tokens each).

Time: median wall-clock seconds per document over interleaved repetitions, with a fixed number
of intra-op threads (default 1, as in ``bench/capture_overhead.py``).

Usage: ``python bench/vhs_generation.py [--repeats 7] [--threads 1] [--new-tokens 8]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers
from capture_overhead import SIZES

from harness.capture import CaptureRequest
from harness.capture.adapters import image_token_id, resolve_adapter
from harness.capture.engine import capture_encoded
from harness.capture.image_inputs import resolve_image_inputs
from harness.capture.inputs import encode_requests
from harness.demo_model import default_model_path
from harness.lm_eval_plugin.generation import GreedySettings, continue_greedy
from harness.tiny_models import build_tiny, random_images

N_IMAGES = 10
TARGET_VISUAL_TOKENS = 256
QUESTION = "\nFor the image with a zebra, is there a clock? Answer with Yes or No."


def _request(side: int) -> CaptureRequest:
    prompt = "<image>" * N_IMAGES + QUESTION
    start = prompt.index("zebra")
    return CaptureRequest(prompt, random_images(N_IMAGES, seed=1, size=(side, side)), (start, start + 5))


def _encode(model, processor, side: int):
    """The N = 10 document encoded with the family's image inputs at `side` px (one image call)."""
    adapter = resolve_adapter(model)
    call = resolve_image_inputs(processor, adapter, side)
    return encode_requests(processor, [_request(side)], image_token_id(model, adapter), call)


def _visual_tokens(model, processor, side: int) -> float:
    return sum(end - start for start, end in _encode(model, processor, side)[1][0].image_spans) / N_IMAGES


def widened():
    """The widened tiny Qwen3-VL with a pixel budget that gives ~256 visual tokens per image."""
    torch.manual_seed(0)
    model, processor = build_tiny("qwen3_vl", seed=0, **SIZES)
    side = 32
    while _visual_tokens(model, processor, side) < TARGET_VISUAL_TOKENS:
        side += 32
    return model, processor, side


def demo():
    """The shipped demo model with its 64 px budget."""
    path = default_model_path()
    model = transformers.AutoModelForImageTextToText.from_pretrained(path).eval()
    processor = transformers.AutoProcessor.from_pretrained(path)
    return model, processor, 64


def variants(model, processor, side: int, new_tokens: int):
    """``{name: callable returning the generated token ids}`` on one encoded N = 10 document."""
    inputs, layouts = _encode(model, processor, side)
    length = inputs["input_ids"].shape[1]
    settings = GreedySettings({}, (), new_tokens, ())
    vocab = range(model.get_output_embeddings().out_features)
    # No early stop in either variant: both decode exactly `new_tokens` tokens.
    model.generation_config.eos_token_id = None

    def plain():
        out = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        return out[0, length:].tolist()

    def capture():
        cache = transformers.DynamicCache(config=model.config)
        (cap,) = capture_encoded(model, inputs, layouts, ("cattok",), "exact", vocab, cache)
        return continue_greedy(model, processor.tokenizer, inputs["input_ids"], cache, cap.answer_logits, settings)

    return {"plain": plain, "capture": capture}, length, sum(e - s for s, e in layouts[0].image_spans) / N_IMAGES


def measure(name: str, build, repeats: int, new_tokens: int) -> dict:
    """Median seconds per document of both variants on one model, and their ratio."""
    model, processor, side = build()
    runs, length, per_image = variants(model, processor, side, new_tokens)
    samples = {variant: [] for variant in runs}
    with torch.no_grad():
        outputs = {variant: run() for variant, run in runs.items()}  # warm-up
        assert outputs["plain"] == outputs["capture"], f"{name}: capture changed the generated tokens"
        for _ in range(repeats):
            for variant, run in runs.items():
                start = time.perf_counter()
                run()
                samples[variant].append(time.perf_counter() - start)
    medians = {variant: statistics.median(times) for variant, times in samples.items()}
    return {"model": name, "tokens": length, "visual_tokens_per_image": per_image, **medians,
            "ratio": medians["capture"] / medians["plain"]}


def main() -> None:
    """Print one line per model: prompt length, seconds per document of each variant, their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"VHs N={N_IMAGES}, {args.new_tokens} new tokens, {args.threads} thread(s), median of {args.repeats}")
    for name, build in (("widened", widened), ("demo", demo)):
        r = measure(name, build, args.repeats, args.new_tokens)
        print(f"{r['model']:<8} {r['tokens']:>6} tokens ({r['visual_tokens_per_image']:.0f} visual per image)  "
              f"plain {r['plain']:.3f} s  capture {r['capture']:.3f} s  capture/plain {r['ratio']:.3f}x  "
              f"(identical tokens)")


if __name__ == "__main__":
    main()
