"""Tiny randomly initialised LVLMs of real transformers architectures, built fully offline.

Each architecture module (`qwen3_vl`, `qwen2_5_vl`, ...) builds the real model class from a small
config, the real processor class from its parts, and a byte-level BPE tokenizer trained on the
spot with the architecture's special tokens and chat template. Tests and benchmarks run the same
code paths a real checkpoint takes (chat template -> processor -> image placeholder expansion ->
vision tower -> language model) in well under a second on a CPU.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
from PIL import Image

from icir_common import UserInputError, atomic_output_dir

from .parts import TextSizes

# Each tiny family and the transformers model type it builds: first the families of the adapter
# table (the paper's image inputs), then families whose adapter is derived from transformers' common
# layout (`harness.capture.adapters.derive_adapter`). These model types are the conformance-tested
# ones: the capture refuses a derived adapter for any other unless a user opts in.
TABLE_FAMILIES: dict[str, str] = {
    "qwen3_vl": "qwen3_vl", "qwen2_5_vl": "qwen2_5_vl", "internvl": "internvl",
    "llava_onevision": "llava_onevision", "llava_pixtral": "llava", "gemma3": "gemma3",
}
DERIVED_FAMILIES: dict[str, str] = {
    "qwen2_vl": "qwen2_vl", "llava_clip": "llava", "llava_next": "llava_next", "mistral3": "mistral3",
    "qwen3_vl_moe": "qwen3_vl_moe", "glm4v": "glm4v", "idefics3": "idefics3", "smolvlm": "smolvlm",
    "gemma4": "gemma4", "deepseek_vl": "deepseek_vl",
    **{name: name for name in (
        "vipllava", "video_llava", "llava_next_video", "fast_vlm", "aria",
        "glm46v", "glm4v_moe", "glm_ocr", "glmga", "cohere2_vision",
        "granite_docling", "gemma4_unified",
        "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "paddleocr_vl", "video_llama_3", "ernie4_5_vl_moe",
        "janus", "deepseek_vl_hybrid", "lighton_ocr", "ovis2",
        "molmo2", "lfm2_vl", "hyperclovax_vision_v2", "qianfan_ocr",
        "exaone4_5", "cosmos3_omni", "muse_glimmer", "muse_spark",
        "qwen3_5", "qwen3_5_moe", "lfm3_vl", "kimi_k25",
    )},
}
TABLE_ARCHS: tuple[str, ...] = tuple(TABLE_FAMILIES)
DERIVED_ARCHS: tuple[str, ...] = tuple(DERIVED_FAMILIES)
ARCHS = TABLE_ARCHS + DERIVED_ARCHS
TESTED_MODEL_TYPES: frozenset[str] = frozenset({**TABLE_FAMILIES, **DERIVED_FAMILIES}.values())


def _arch_module(arch: str):
    if arch not in ARCHS:
        raise UserInputError(f"unknown tiny-model architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    return importlib.import_module(f"{__name__}.{arch}")


def build_tiny(arch: str, seed: int = 0, attn_implementation: str = "sdpa", **size_overrides: int):
    """Build a tiny random model of `arch` and its processor.

    Args:
        arch: one of `ARCHS`.
        seed: ``torch.manual_seed`` before initialisation; same seed -> identical state dict. The
            tokenizer does not depend on the seed (same vocabulary and ids for every seed).
        attn_implementation: "sdpa" (default), "eager", or a name registered with
            transformers' AttentionInterface.
        **size_overrides: language-model sizes (`num_hidden_layers`, `num_attention_heads`,
            `num_key_value_heads`, `head_dim`, `hidden_size`; defaults 4, 4, 2, 16 and
            hidden_size = num_attention_heads * head_dim, i.e. 64).

    Returns:
        ``(model, processor)``: the model's ``...ForConditionalGeneration`` in eval mode, float32;
        the processor's chat template renders ``{"type": "image"}`` content items in place.

    Raises:
        UserInputError: unknown `arch` or bad sizes (see `TextSizes.from_overrides`).
    """
    module = _arch_module(arch)
    sizes = TextSizes.from_overrides(**size_overrides)
    processor = module.build_processor()
    model = module.build_model(processor, sizes, seed, attn_implementation)
    return model, processor


def save_tiny(
    arch: str, out_dir: str | Path, seed: int = 0, overwrite: bool = False, **size_overrides: int
) -> Path:
    """`save_pretrained` a tiny model of `arch` and its processor into `out_dir`.

    The folder loads offline (``HF_HUB_OFFLINE=1``) with ``AutoModelForImageTextToText``/
    ``AutoProcessor.from_pretrained(out_dir)`` and gives the same logits as `build_tiny` with the
    same arguments. Written to a temporary folder beside `out_dir` and renamed into place, so a
    failure leaves nothing half-written.

    Returns:
        `out_dir` as a `Path`.

    Raises:
        UserInputError: `out_dir` exists and is not empty, and `overwrite` is False.
    """
    out_dir = Path(out_dir)
    overwrite = overwrite or (out_dir.is_dir() and not any(out_dir.iterdir()))
    model, processor = build_tiny(arch, seed=seed, **size_overrides)
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
    return out_dir


def describe(arch: str) -> dict[str, str | int]:
    """How `arch` lays out images and heads, for code that captures them (e.g. harness.capture).

    Keys: ``model_class``, ``processor_class``; ``image_token`` (placeholder string in the
    processed text) and ``image_token_id`` (its id in ``input_ids`` of the tiny tokenizer; real
    checkpoints have other ids: read ``model.config.image_token_id``/``image_token_index``);
    ``decoder_layers`` (attribute path from the ``...ForConditionalGeneration`` to the
    language-model decoder layers); ``o_proj`` (path inside one layer); ``image_features`` (the
    method yielding projected visual tokens and what it returns in transformers 5.x);
    ``extra_tokens_per_image`` (markers the processor adds around or inside each image);
    ``image_span`` (how one image's visual tokens are found in ``input_ids``).
    """
    module = _arch_module(arch)
    tokenizer = module.build_processor().tokenizer
    return {
        **module.DESCRIPTION,
        "image_token_id": tokenizer.convert_tokens_to_ids(module.IMAGE_TOKEN),
    }


def random_images(n: int, seed: int = 0, size: tuple[int, int] = (64, 64)) -> list[Image.Image]:
    """`n` RGB PIL images of uniform random pixels, ``size`` = (width, height) in px, from `seed`."""
    rng = np.random.default_rng(seed)
    width, height = size
    return [Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)) for _ in range(n)]
