"""Tiny Qwen3-VL (`Qwen3VLForConditionalGeneration` + `Qwen3VLProcessor`), built offline.

Mirrors Qwen/Qwen3-VL-*-Instruct in everything but size: ChatML template without a default
system prompt, images written as ``<|vision_start|><|image_pad|><|vision_end|>``, 16-px patches
merged 2x2 (one visual token per 32x32 px), interleaved M-RoPE, DeepStack visual features
added to the first language-model layers. A 64x64 image gives 4 visual tokens.
"""

from __future__ import annotations

from collections.abc import Mapping

from transformers import (
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from .parts import TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<|image_pad|>"
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    IMAGE_TOKEN,
    "<|video_pad|>",
)
VISION_MARKUP = "<|vision_start|>" + IMAGE_TOKEN + "<|vision_end|>"
PATCH_SIZE = 16
MERGE_SIZE = 2

DESCRIPTION = {
    "model_class": "Qwen3VLForConditionalGeneration",
    "processor_class": "Qwen3VLProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithDeepstackFeatures; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (merger output, "
        "in input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / 4); .deepstack_features are "
        "added to the hidden states of the first len(deepstack_visual_indexes) decoder layers"
    ),
    "extra_tokens_per_image": "<|vision_start|> before and <|vision_end|> after each run of <|image_pad|>",
    "image_span": "one contiguous run of the image token per image",
}


def mrope_section(head_dim: int, spatial_share: int) -> list[int]:
    """Split the head_dim/2 rotary frequencies over (time, height, width) M-RoPE sections.

    Height and width each get `spatial_share`/64 of them, as the real checkpoints split their 64
    (Qwen3-VL 24:20:20, spatial_share=20; Qwen2.5-VL 16:24:24, spatial_share=24); time the rest.
    """
    half = head_dim // 2
    spatial = half * spatial_share // 64
    return [half - 2 * spatial, spatial, spatial]



def mrope_text_config(processor, sizes: TextSizes, rope_theta: float, spatial_share: int,
                      rotary_dim: int | None = None, **rope_extra) -> dict:
    """Text-config keyword arguments of a decoder with (non-interleaved) M-RoPE: `sizes`, the ids of
    `processor`'s tokenizer, RoPE base `rope_theta`, `mrope_section` of the `rotary_dim` rotated
    dimensions of a head (all of ``head_dim`` by default) with `spatial_share`, and `rope_extra`
    further RoPE parameters (Qwen2-VL and Qwen2.5-VL 1e6, 16:24:24; GLM-4.1V 1e4, 8:12:12 over
    half of each head)."""
    return sizes.text_config(
        processor.tokenizer,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": rope_theta,
            "mrope_section": mrope_section(rotary_dim or sizes.head_dim, spatial_share),
            **rope_extra,
        },
    )

def qwen_tokenizer(chat_template: str):
    """Qwen2/Qwen3-family tokenizer: Qwen's vision special tokens, eos <|im_end|>, pad <|endoftext|>."""
    return train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=chat_template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def qwen_image_processor(patch_size: int) -> Qwen2VLImageProcessor:
    """Qwen2-VL image processor resizing every image to between 1 and 4 visual tokens (2x2 merge)."""
    factor = patch_size * MERGE_SIZE
    return Qwen2VLImageProcessor(
        patch_size=patch_size,
        merge_size=MERGE_SIZE,
        temporal_patch_size=2,
        min_pixels=factor * factor,
        max_pixels=(2 * factor) ** 2,
    )


def qwen_token_ids(tokenizer) -> dict[str, int]:
    """Config keyword arguments naming the Qwen vision/text special-token ids of `tokenizer`."""
    return {
        "image_token_id": tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        "video_token_id": tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tokenizer.convert_tokens_to_ids("<|vision_end|>"),
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def qwen_processor(processor_class, video_processor_class, patch_size: int, chat_template: str):
    """`processor_class` (Qwen2.5-VL / Qwen3-VL) from a fresh Qwen tokenizer and image/video processors."""
    return processor_class(
        image_processor=qwen_image_processor(patch_size),
        tokenizer=qwen_tokenizer(chat_template),
        video_processor=video_processor_class(patch_size=patch_size, merge_size=MERGE_SIZE),
        chat_template=chat_template,
    )


def qwen_vision_config(patch_size: int, out_hidden_size: int, **extra) -> dict:
    """Tiny Qwen vision tower: 2 blocks of width 32, 2 heads, 2x2 merge into `out_hidden_size`."""
    return {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "patch_size": patch_size,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": 2,
        "out_hidden_size": out_hidden_size,
        **extra,
    }


def build_processor() -> Qwen3VLProcessor:
    """Qwen3-VL processor with a freshly trained tokenizer; images capped at 64x64 px (4 tokens)."""
    return qwen_processor(Qwen3VLProcessor, Qwen3VLVideoProcessor, PATCH_SIZE, chatml_template(VISION_MARKUP))


def qwen3_vl_config(config_class, processor, sizes: TextSizes, rope_theta: float = 5_000_000.0,
                    rope_scaling: Mapping[str, object] | None = None, **text_extra):
    """A `config_class` (Qwen3-VL or Qwen3-VL-MoE) with `sizes`, the processor's token ids, the
    tiny Qwen vision tower (DeepStack into decoder layer 0) and interleaved M-RoPE 24:20:20.

    Args:
        rope_theta: the text RoPE base (Qwen3-VL's 5e6 by default).
        rope_scaling: a transformers ``rope_type`` and its parameters, e.g. ``{"rope_type":
            "llama3", "factor": 8.0, ...}``; plain RoPE by default.
        **text_extra: further text-config keys (e.g. the MoE sizes).
    """
    tokenizer = processor.tokenizer
    return config_class(
        text_config=sizes.text_config(
            tokenizer,
            rope_parameters={
                "rope_type": "default",
                **(rope_scaling or {}),
                "rope_theta": rope_theta,
                "mrope_section": mrope_section(sizes.head_dim, spatial_share=20),
                "mrope_interleaved": True,
            },
            **text_extra,
        ),
        vision_config=qwen_vision_config(
            PATCH_SIZE, sizes.hidden_size, num_position_embeddings=16, deepstack_visual_indexes=[0]
        ),
        **qwen_token_ids(tokenizer),
    )


def build_model(processor: Qwen3VLProcessor, sizes: TextSizes, seed: int, attn_implementation: str,
                rope_theta: float = 5_000_000.0, rope_scaling: Mapping[str, object] | None = None):
    """Random `Qwen3VLForConditionalGeneration` with `sizes` and the processor's token ids
    (`rope_theta`, `rope_scaling`: as `qwen3_vl_config` takes them)."""
    config = qwen3_vl_config(Qwen3VLConfig, processor, sizes, rope_theta, rope_scaling)
    return instantiate(Qwen3VLForConditionalGeneration, config, seed, attn_implementation)
