"""Tiny GLM-4.6V (`Glm46VForConditionalGeneration` + `Glm46VProcessor`), built offline.

Mirrors zai-org/GLM-4.6V-Flash in everything but size. GLM-4.6V is GLM-4.1V's architecture under
its own classes (`Glm46VModel` builds the same GLM-4.1V vision tower and text decoder from
``glm4v_vision`` / ``glm4v_text`` sub-configs; only the video processor's frame sampling and
timestamps differ), so this module reuses `glm4v`'s tokenizer, template and sizes: 14-px patches
merged 2x2 (one visual token per 28x28 px), M-RoPE 8:12:12 over half of each head. A 64x64 image
gives 4 visual tokens: the pixel budget of 2 x 56 x 56 px (both temporal copies counted) resizes it
to 56x56, a 4x4 patch grid merged to 2x2. No adapter-table row: the capture derives its adapter
from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Glm46VConfig,
    Glm46VForConditionalGeneration,
    Glm46VImageProcessor,
    Glm46VProcessor,
    Glm46VVideoProcessor,
)

from . import glm4v
from .parts import TextSizes, instantiate
from .qwen3_vl import mrope_text_config
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = glm4v.IMAGE_TOKEN

DESCRIPTION = {
    **glm4v.DESCRIPTION,
    "model_class": "Glm46VForConditionalGeneration",
    "processor_class": "Glm46VProcessor",
}


def glm_processor(image_processor_class, video_processor_class) -> Glm46VProcessor:
    """`Glm46VProcessor` over the given GLM image/video processor classes with GLM-4.1V's tiny
    shapes (images capped at 56x56 px, 4 tokens) and `glm4v`'s tokenizer and template."""
    tokenizer = train_bpe_tokenizer(
        glm4v.SPECIAL_TOKENS, chat_template=glm4v.CHAT_TEMPLATE, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    shapes = {"patch_size": glm4v.PATCH_SIZE, "merge_size": glm4v.MERGE_SIZE,
              "temporal_patch_size": glm4v.TEMPORAL_PATCH_SIZE}
    budget = {"shortest_edge": glm4v.MAX_PIXELS // 4, "longest_edge": glm4v.MAX_PIXELS}
    return Glm46VProcessor(
        image_processor=image_processor_class(size=budget, **shapes),
        tokenizer=tokenizer,
        video_processor=video_processor_class(**shapes),
        chat_template=glm4v.CHAT_TEMPLATE,
    )


def build_processor() -> Glm46VProcessor:
    """GLM-4.6V processor (`Glm46VImageProcessor`, `Glm46VVideoProcessor`) as `glm_processor` builds it."""
    return glm_processor(Glm46VImageProcessor, Glm46VVideoProcessor)


def glm_config(config_class, processor, sizes: TextSizes, arch: str, **text_extra):
    """A GLM-V `config_class` with `sizes` and the processor's token ids: GLM-4.1V's text decoder
    (M-RoPE 8:12:12 over half of each head, plus `text_extra`) and a vision tower of 2 blocks of
    width 32 (2 heads) with a 4x4 grid of learned positions, merged into ``hidden_size``.

    Raises:
        UserInputError: ``hidden_size != num_attention_heads * head_dim`` (GLM's text attention
            derives head_dim from them); `arch` names the family in the message.
    """
    sizes.require_hidden_size_from_heads(arch)
    rotary_dim = int(sizes.head_dim * glm4v.PARTIAL_ROTARY_FACTOR)
    return config_class(
        text_config={
            **mrope_text_config(
                processor, sizes, 10_000.0, spatial_share=24, rotary_dim=rotary_dim,
                partial_rotary_factor=glm4v.PARTIAL_ROTARY_FACTOR,
            ),
            **text_extra,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "image_size": 2 * glm4v.PATCH_SIZE * glm4v.MERGE_SIZE,
            "patch_size": glm4v.PATCH_SIZE,
            "spatial_merge_size": glm4v.MERGE_SIZE,
            "temporal_patch_size": glm4v.TEMPORAL_PATCH_SIZE,
            "out_hidden_size": sizes.hidden_size,
        },
        **{name: processor.tokenizer.convert_tokens_to_ids(token) for name, token in glm4v.MARKERS.items()},
    )


def build_model(processor: Glm46VProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Glm46VForConditionalGeneration` from `glm_config` (`UserInputError` as it raises)."""
    config = glm_config(Glm46VConfig, processor, sizes, "glm46v")
    return instantiate(Glm46VForConditionalGeneration, config, seed, attn_implementation)
