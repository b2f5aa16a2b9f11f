"""Tiny Qwen2-VL (`Qwen2VLForConditionalGeneration` + `Qwen2VLProcessor`), built offline.

Mirrors Qwen/Qwen2-VL-*-Instruct in everything but size: ChatML template with the default system
prompt "You are a helpful assistant.", images written as
``<|vision_start|><|image_pad|><|vision_end|>``, 14-px patches merged 2x2 (one visual token per
28x28 px), a vision tower of full attention only (no windows, unlike Qwen2.5-VL) whose width
(``embed_dim``) differs from the merger's output, (non-interleaved) M-RoPE 16:24:24, q/k/v biases.
A 64x64 image gives 4 visual tokens (resized to 56x56). No adapter-table row: the capture derives
its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor, Qwen2VLVideoProcessor

from .parts import TextSizes, instantiate
from .qwen2_5_vl import CHAT_TEMPLATE, PATCH_SIZE, qwen2_text_config
from .qwen2_5_vl import DESCRIPTION as QWEN2_5_VL_DESCRIPTION
from .qwen3_vl import IMAGE_TOKEN, MERGE_SIZE, qwen_processor, qwen_token_ids

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

DESCRIPTION = {
    **QWEN2_5_VL_DESCRIPTION,
    "model_class": "Qwen2VLForConditionalGeneration",
    "processor_class": "Qwen2VLProcessor",
}


def build_processor() -> Qwen2VLProcessor:
    """Qwen2-VL processor with a freshly trained tokenizer; images capped at 56x56 px (4 tokens)."""
    return qwen_processor(Qwen2VLProcessor, Qwen2VLVideoProcessor, PATCH_SIZE, CHAT_TEMPLATE)


def build_model(processor: Qwen2VLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Qwen2VLForConditionalGeneration` with `sizes` and the processor's token ids; vision
    tower of 2 blocks of width 32 (2 heads, MLP ratio 2) merging 2x2 patches into ``hidden_size``
    (`UserInputError` as `qwen2_5_vl.qwen2_text_config` raises it)."""
    config = Qwen2VLConfig(
        text_config=qwen2_text_config("qwen2_vl", processor, sizes),
        vision_config={
            "depth": 2,
            "embed_dim": 32,
            "hidden_size": sizes.hidden_size,
            "mlp_ratio": 2,
            "num_heads": 2,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
        },
        **qwen_token_ids(processor.tokenizer),
    )
    return instantiate(Qwen2VLForConditionalGeneration, config, seed, attn_implementation)
