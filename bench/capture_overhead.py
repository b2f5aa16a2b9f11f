"""What head capture costs over a plain forward pass, and what the naive eager route costs.

Model: tiny random Qwen3-VL (harness.tiny_models) widened to 8 layers x 8 heads (4 KV heads,
d_h = 16). Prompts of about 1k, 4k and 8k tokens: seeded filler text with 4 interleaved images and a
multiple-choice question. Three variants run on the same processed inputs:

- ``plain``: ``model(**inputs)`` on the sdpa kernel, as `capture_encoded` calls it;
- ``capture``: `harness.capture.engine.capture_encoded` at all 7 readout positions with answer
  logits: the forward plus everything the capture records, both pointer scores (the exact
  attention rows and the Eq. 3 proxy), head outputs and image embeddings;
- ``eager``: an eager-attention copy with ``output_attentions=True`` (every T x T attention map).

Time: median wall-clock and median process CPU time of interleaved repetitions in this process
(variants alternate in every round, after one warm-up each), with a fixed number of intra-op
threads (default 1: on a shared, oversubscribed machine, multi-threaded small ops stall on
descheduled threads and wall-clock ratios stop meaning anything). Memory: each (variant, length) runs in a fresh subprocess, which
runs the variant once, resets the kernel's peak-RSS mark (``/proc/self/clear_refs``), runs it again
and reads ``VmHWM`` from ``/proc/self/status``: the peak resident memory of the process during the
measured forward, and the increment over the resident memory just before it (the forward's working
memory; weights, inputs and the Python runtime are in the baseline). The subprocesses run with a
fixed glibc mmap threshold so that freed tensors leave the resident set. Linux only.

Measured (2-core CPU, 1 thread, 7 rounds, 2026-12-01): capture / plain at 4,103 tokens wall x1.048,
working memory x1.002; at 8,198 tokens wall x1.010, working memory x1.011 (target: at most 1.05).

Usage: ``python bench/capture_overhead.py [--lengths 1024 4096 8192] [--repeats 7] [--threads 1]
[--eager-max-gib 6]``
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
from tqdm import tqdm

from harness.capture import READOUT_POSITIONS, CaptureRequest, answer_token_ids
from harness.capture.engine import capture_encoded
from harness.capture.inputs import encode_requests
from harness.tiny_models import build_tiny, random_images

VARIANTS = ("plain", "capture", "eager")
SIZES = {"num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 16}
N_IMAGES = 4
# Fixed glibc mmap threshold: freed tensors go back to the OS instead of staying resident in the
# heap, so the peak RSS of the measured run shows its own working memory, not the warm-up's leftovers.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
WORDS = "the a cat dog sat on mat with bird runs park over under green small large house tree river".split()


def build():
    """The widened tiny Qwen3-VL (seed 0) and its processor."""
    return build_tiny("qwen3_vl", seed=0, **SIZES)


def make_request(processor, image_token_id: int, target_tokens: int) -> CaptureRequest:
    """A prompt of about `target_tokens` tokens: filler passages around 4 images, then the question."""

    def prompt_with(n_words: int) -> str:
        words = np.random.default_rng(n_words).choice(WORDS, size=n_words).tolist()
        step = n_words // (N_IMAGES + 1)
        passages = [" ".join(words[i * step : (i + 1) * step]) for i in range(N_IMAGES + 1)]
        return " <image> ".join(passages) + " Question: which image shows the zebra? A. one B. two C. three D. four"

    def request_with(n_words: int) -> CaptureRequest:
        prompt = prompt_with(n_words)
        start = prompt.index("zebra")
        return CaptureRequest(prompt, random_images(N_IMAGES, seed=1), (start, start + 5))

    def length(request: CaptureRequest) -> int:
        return encode_requests(processor, [request], image_token_id)[0]["input_ids"].shape[1]

    probe = 200
    per_word = length(request_with(2 * probe)) - length(request_with(probe))
    return request_with(max(probe, int(probe * (target_tokens - length(request_with(probe))) / per_word) + probe))


def prepare(model, processor, target_tokens: int):
    """(inputs, layouts, answer ids) for the prompt of about `target_tokens` tokens."""
    image_token_id = int(model.config.image_token_id)
    request = make_request(processor, image_token_id, target_tokens)
    inputs, layouts = encode_requests(processor, [request], image_token_id)
    return inputs, layouts, answer_token_ids(processor, ["A", "B", "C", "D"])


def runner(variant: str, model, processor, target_tokens: int):
    """A no-argument callable running `variant` once on the prompt of about `target_tokens` tokens."""
    inputs, layouts, answers = prepare(model, processor, target_tokens)
    last = torch.tensor([[layouts[0].last]])
    if variant == "plain":
        return lambda: model(**inputs, use_cache=False, logits_to_keep=last)
    if variant == "capture":
        return lambda: capture_encoded(model, inputs, layouts, READOUT_POSITIONS, "exact", answers)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    return lambda: eager(**inputs, use_cache=False, logits_to_keep=last, output_attentions=True)


def eager_gib(target_tokens: int) -> float:
    """Memory of the attention maps that ``output_attentions=True`` keeps: L x H x T^2 float32, GiB."""
    return SIZES["num_hidden_layers"] * SIZES["num_attention_heads"] * target_tokens**2 * 4 / 2**30


def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", open("/proc/self/status").read()).group(1))


def measure_memory(variant: str, target_tokens: int) -> dict[str, float]:
    """Peak RSS (MiB) of one run of `variant`, and its increment over the RSS just before it."""
    torch.manual_seed(0)
    model, processor = build()
    run = runner(variant, model, processor, target_tokens)
    with torch.no_grad():
        run()
        gc.collect()
        before = _status_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # reset VmHWM to the current RSS
        run()
        peak = _status_kib("VmHWM")
    return {"peak_mib": peak / 1024, "increment_mib": (peak - before) / 1024}


def time_variants(lengths, repeats: int, eager_max_gib: float) -> dict[tuple[str, int], tuple[float, float]]:
    """Median (wall, CPU) seconds per (variant, length), variants interleaved within every round."""
    model, processor = build()
    timings: dict[tuple[str, int], tuple[float, float]] = {}
    for target in lengths:
        variants = [v for v in VARIANTS if v != "eager" or eager_gib(target) <= eager_max_gib]
        runs = {v: runner(v, model, processor, target) for v in variants}
        samples: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
        with torch.no_grad():
            for run in runs.values():
                run()  # warm-up
            for round_index in tqdm(range(repeats), desc=f"timing ~{target} tokens", leave=False):
                order = variants[round_index % len(variants) :] + variants[: round_index % len(variants)]
                for variant in order:
                    wall, cpu = time.perf_counter(), time.process_time()
                    runs[variant]()
                    samples[variant].append((time.perf_counter() - wall, time.process_time() - cpu))
        for variant, values in samples.items():
            timings[variant, target] = tuple(statistics.median(column) for column in zip(*values))
        del runs
        gc.collect()
    return timings


def main(argv: list[str] | None = None) -> int:
    """Time every variant in this process, measure memory in subprocesses, print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192], help="prompt tokens (about)")
    parser.add_argument("--repeats", type=int, default=7, help="timed rounds per length")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--eager-max-gib", type=float, default=6.0, help="skip eager when its maps exceed this")
    parser.add_argument("--memory", nargs=2, metavar=("VARIANT", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory:
        print(json.dumps(measure_memory(args.memory[0], int(args.memory[1]))))
        return 0

    model, processor = build()
    actual = {t: prepare(model, processor, t)[0]["input_ids"].shape[1] for t in args.lengths}
    del model
    print(f"tiny Qwen3-VL, {SIZES}; torch threads: {torch.get_num_threads()}; {N_IMAGES} images per prompt")
    timings = time_variants(args.lengths, args.repeats, args.eager_max_gib)
    memory = {}
    for target in args.lengths:
        for variant in VARIANTS:
            if (variant, target) in timings:
                command = [sys.executable, __file__, "--threads", str(args.threads), "--memory", variant, str(target)]
                output = subprocess.check_output(command, text=True, env={**os.environ, **MALLOC_ENV})
                memory[variant, target] = json.loads(output.strip().splitlines()[-1])

    print(f"\n{'tokens':>7} {'variant':>8} {'wall s':>8} {'CPU s':>8} {'peak RSS MiB':>13} {'fwd MiB':>8}")
    for target in args.lengths:
        for variant in VARIANTS:
            if (variant, target) not in timings:
                print(f"{actual[target]:>7} {variant:>8}   skipped: attention maps {eager_gib(target):.1f} GiB")
                continue
            mem = memory[variant, target]
            print(
                f"{actual[target]:>7} {variant:>8} {timings[variant, target][0]:>8.4f} {timings[variant, target][1]:>8.4f} "
                f"{mem['peak_mib']:>13.1f} {mem['increment_mib']:>8.1f}"
            )
    print("\nratios against plain (wall time, CPU time; peak RSS; forward working memory):")
    for target in args.lengths:
        plain_time, plain_mem = timings["plain", target], memory["plain", target]
        for variant in ("capture", "eager"):
            if (variant, target) in timings:
                mem = memory[variant, target]
                print(
                    f"{actual[target]:>7} {variant:>8}: wall x{timings[variant, target][0] / plain_time[0]:.3f}, "
                    f"CPU x{timings[variant, target][1] / plain_time[1]:.3f}; "
                    f"peak x{mem['peak_mib'] / plain_mem['peak_mib']:.3f}; "
                    f"working memory x{mem['increment_mib'] / plain_mem['increment_mib']:.3f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
