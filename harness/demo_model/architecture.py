"""The demo model's architecture: a small Qwen3-VL with a tokenizer fitted to the toy world.

Everything but the sizes and the vocabulary comes from `harness.tiny_models.qwen3_vl`, so the demo
model is the same real `Qwen3VLForConditionalGeneration` + `Qwen3VLProcessor` the tiny test models
are (ChatML template, ``<|vision_start|><|image_pad|><|vision_end|>`` per image, 16-px patches
merged 2x2: a 64x64 toy image is 4 visual tokens, one per 32x32 quadrant). The tokenizer is the
tiny models' byte-level BPE retrained (``PreTrainedTokenizerFast.train_new_from_iterator``) on
the training prompts, so every toy word is one or two tokens and a prompt stays short.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from transformers import Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor

from harness.tiny_models import qwen3_vl
from harness.tiny_models.parts import TextSizes, chatml_template
from harness.tiny_models.qwen3_vl import MERGE_SIZE, PATCH_SIZE, VISION_MARKUP, qwen_image_processor, qwen_tokenizer

ANSWER_WORDS = ("A", "B", "C", "D", "Yes", "No")


# 4 layers x 6 heads of dimension 16 (24 heads: ablation budget K = 24 / 8 = 3), residual width 96;
# about 0.6 M parameters (626 k with a 900-token vocabulary). 8 heads of width 128 learn option
# finding in fewer steps, but each step costs 1.5-2x as long on one CPU thread.
DEMO_SIZES = TextSizes.from_overrides(num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=6, head_dim=16)
VOCAB_SIZE = 900
# The toy images' side in pixels: the demo model sees each as 4 visual tokens (declared in its
# processor_config.json, `checkpoint.declare_image_side`).
DEMO_IMAGE_SIDE = 64
# Qwen3-VL's RoPE base of 5e6 suits head dimension 128; with 16 dimensions (8 frequencies) only
# three rotate noticeably over a 200-token prompt, and text-only option finding leaves chance ~300
# steps later than with base 1e4 (measured side by side on 24,000 fresh records: 0.78 vs 0.45 at step 1,000).
DEMO_ROPE_THETA = 10_000.0
# Llama-3's frequency-dependent RoPE scaling (transformers' ``rope_type="llama3"``) on top: the
# frequencies whose wavelength exceeds 128 tokens (the slowest 5 of 8; base-1e4 wavelengths 199 to
# 19,869 tokens) turn 32x slower, so they stay position-free over a prompt (under 0.15 rad across
# 150 tokens), while the three fastest (wavelengths 6, 20 and 63 tokens) keep the positions that
# bind letters to options. With plain base 1e4 the pointer head matched star images through the
# wavelength-199 frequency, which turns 1.3 rad over the ~40 tokens from the question's mention to
# option D's (the cattok): star found 1.00 of the time at the one, 0.62 at the other; with the
# scaling 1.00 at both (`harness/demo_model/train.py`).
DEMO_ROPE_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0,
                     "original_max_position_embeddings": 128}


def build_processor(texts: Iterable[str], vocab_size: int, answer_words: Iterable[str] = ()) -> Qwen3VLProcessor:
    """A Qwen3-VL processor whose byte-level BPE tokenizer is trained on `texts`.

    Args:
        texts: the rendered training prompts (any order fixed by the caller: BPE training is
            deterministic for a given sequence).
        vocab_size: learned vocabulary size (bytes + merges), before the special tokens.
        answer_words: words that must each be one token, besides A-D, Yes and No (the category
            names shape naming answers with).

    Returns:
        `Qwen3VLProcessor` with the tiny models' image processor (images resized to at most 64x64 px,
        4 visual tokens), video processor and ChatML chat template.
    """
    template = chatml_template(VISION_MARKUP)
    corpus = [*texts, *(word for word in (*ANSWER_WORDS, *answer_words) for _ in range(100))]
    tokenizer = qwen_tokenizer(template).train_new_from_iterator([corpus], vocab_size=vocab_size)
    return Qwen3VLProcessor(
        image_processor=qwen_image_processor(PATCH_SIZE),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(patch_size=PATCH_SIZE, merge_size=MERGE_SIZE),
        chat_template=template,
    )


def build_model(processor: Qwen3VLProcessor, sizes: TextSizes, seed: int) -> Qwen3VLForConditionalGeneration:
    """A randomly initialised demo `Qwen3VLForConditionalGeneration` (seeded, float32, sdpa attention).

    The tiny models' Qwen3-VL (`harness.tiny_models.qwen3_vl.build_model`) with `sizes`, re-drawn
    by `fan_in_init`.

    Args:
        processor: from `build_processor`; its tokenizer sets the vocabulary and special-token ids.
        sizes: language-model sizes (`DEMO_SIZES` for `icir demo-model train`).
        seed: ``torch.manual_seed`` of the initialisation (same seed -> same weights).
    """
    model = qwen3_vl.build_model(processor, sizes, seed, "sdpa", rope_theta=DEMO_ROPE_THETA,
                                 rope_scaling=DEMO_ROPE_SCALING)
    fan_in_init(model, seed)
    return model


def fan_in_init(model: nn.Module, seed: int) -> None:
    """Re-draw every weight at the scale of its fan-in: N(0, 1/fan_in) for linear and convolution
    weights, N(0, 1) for embedding tables, zero biases (norm weights keep transformers' ones).

    transformers draws every weight with one std (``initializer_range`` = 0.02, sized for residual
    widths of thousands); at the demo model's width of ~100 each layer then writes ~2% of the
    residual stream, the answer position barely depends on the input, and training stalls for
    thousands of steps. Seeded with ``torch.manual_seed(seed)`` inside `torch.random.fork_rng`.
    """
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv3d)):
                module.weight.normal_(0.0, module.weight[0].numel() ** -0.5)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, 1.0)
