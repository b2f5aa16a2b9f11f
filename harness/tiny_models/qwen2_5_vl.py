"""Tiny Qwen2.5-VL (`Qwen2_5_VLForConditionalGeneration` + `Qwen2_5_VLProcessor`), built offline.

Mirrors Qwen/Qwen2.5-VL-*-Instruct in everything but size: ChatML template with the default system
prompt "You are a helpful assistant.", images written as
``<|vision_start|><|image_pad|><|vision_end|>``, 14-px patches merged 2x2 (one visual token per
28x28 px), windowed vision attention with full-attention blocks, (non-interleaved) M-RoPE. A
64x64 image gives 4 visual tokens (resized to 56x56).
"""

from __future__ import annotations

from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLVideoProcessor,
)

from .parts import TextSizes, chatml_template, instantiate
from .qwen3_vl import (
    IMAGE_TOKEN,
    MERGE_SIZE,
    VISION_MARKUP,
    mrope_text_config,
    qwen_processor,
    qwen_token_ids,
    qwen_vision_config,
)

PATCH_SIZE = 14
CHAT_TEMPLATE = chatml_template(VISION_MARKUP, default_system="You are a helpful assistant.")

DESCRIPTION = {
    "model_class": "Qwen2_5_VLForConditionalGeneration",
    "processor_class": "Qwen2_5_VLProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (merger output, "
        "in input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / 4)"
    ),
    "extra_tokens_per_image": "<|vision_start|> before and <|vision_end|> after each run of <|image_pad|>",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> Qwen2_5_VLProcessor:
    """Qwen2.5-VL processor with a freshly trained tokenizer; images capped at 56x56 px (4 tokens)."""
    return qwen_processor(Qwen2_5_VLProcessor, Qwen2VLVideoProcessor, PATCH_SIZE, CHAT_TEMPLATE)


def qwen2_text_config(arch: str, processor, sizes: TextSizes) -> dict:
    """Text-config keyword arguments of Qwen2-VL / Qwen2.5-VL (`arch`): M-RoPE 16:24:24 of base 1e6.

    Raises:
        UserInputError: ``hidden_size != num_attention_heads * head_dim`` (their text attention
            derives head_dim from them).
    """
    sizes.require_hidden_size_from_heads(arch)
    return mrope_text_config(processor, sizes, 1_000_000.0, spatial_share=24)


def build_model(processor: Qwen2_5_VLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Qwen2_5_VLForConditionalGeneration` with `sizes` and the processor's token ids
    (`UserInputError` as `qwen2_text_config` raises it)."""
    config = Qwen2_5_VLConfig(
        text_config=qwen2_text_config("qwen2_5_vl", processor, sizes),
        vision_config=qwen_vision_config(
            PATCH_SIZE, sizes.hidden_size, window_size=2 * PATCH_SIZE * MERGE_SIZE, fullatt_block_indexes=[1]
        ),
        **qwen_token_ids(processor.tokenizer),
    )
    return instantiate(Qwen2_5_VLForConditionalGeneration, config, seed, attn_implementation)
