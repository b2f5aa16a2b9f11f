"""Tiny Muse Glimmer (`MuseGlimmerForConditionalGeneration` + `MuseGlimmerProcessor`), built offline.

Mirrors meta-models/Muse-Glimmer-30B in everything but size. Images are resized to the grid of
whole 28-px blocks closest to their aspect ratio under a token cap (`max_image_tokens`, here 4;
4,096 in the checkpoint), cut into 14-px patches (two temporal copies) and written as
``<|image_start|>`` + one ``<|patch|>`` per 2x2 block + ``<|image_end|>``. The vision tower adds
learned positions (a 4x4 grid, interpolated) and 2-D RoPE, attends within windows of that grid
except in its last layer, and pixel-shuffles 2x2 patches into an MLP adapter, a projection and a
weight-less RMS norm. The decoder embeds tokens through a weight-less RMS norm, scales queries after
a weight-less q/k norm by ``qk_scale_factor``, gates each head's output by a sigmoid of the layer
input before o_proj, alternates 3 sliding-window layers with RoPE (window 32 tokens here) and one
full-attention layer without positional encoding (counted from the last layer), and soft-caps the
logits. The chat template is Llama-4-style (``<|header_start|>role<|header_end|>\\n\\n...<|eot|>``),
an assumption: transformers ships no template for it. A 64x64 image gives 4 visual tokens
(64/28 = 2.3 blocks a side, capped at 4 tokens: the 2x2 grid). No adapter-table row: the capture
derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    MuseGlimmerConfig,
    MuseGlimmerForConditionalGeneration,
    MuseGlimmerImageProcessor,
    MuseGlimmerProcessor,
    MuseGlimmerVideoProcessor,
)

from .parts import TextSizes, instantiate
from .qwen2_5_vl import DESCRIPTION as QWEN2_5_VL_DESCRIPTION
from .tokenizer import train_bpe_tokenizer

__all__ = [
    "DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor", "muse_config_kwargs", "muse_tokenizer",
    "muse_vision_parts",
]

IMAGE_TOKEN = "<|patch|>"
SPECIAL_TOKENS = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad|>", "<|header_start|>", "<|header_end|>",
    "<|eot|>", "<|image_start|>", "<|image_end|>", IMAGE_TOKEN, "<|video|>", "<|vid_start|>", "<|vid_end|>",
    "<|vid_frame_separator|>",
)
PATCH_SIZE = 14
MERGE_SIZE = 2
MAX_IMAGE_TOKENS = 4
POSITION_GRID = 4
SLIDING_WINDOW = 32
VISION_WIDTH = 32

CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '" + IMAGE_TOKEN + "' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|eot|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|header_start|>assistant<|header_end|>\\n\\n' }}{%- endif %}"
)

DESCRIPTION = {
    **QWEN2_5_VL_DESCRIPTION,
    "model_class": "MuseGlimmerForConditionalGeneration",
    "processor_class": "MuseGlimmerProcessor",
    "image_token": IMAGE_TOKEN,
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (adapter, projection "
        "and norm output, in input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / 4)"
    ),
    "extra_tokens_per_image": "<|image_start|> before and <|image_end|> after each run of <|patch|>",
}


def muse_tokenizer(special_tokens=SPECIAL_TOKENS, chat_template: str = CHAT_TEMPLATE):
    """Muse tokenizer: `special_tokens`, bos ``<|begin_of_text|>``, eos ``<|eot|>``, pad
    ``<|finetune_right_pad|>``, and `chat_template`."""
    return train_bpe_tokenizer(
        special_tokens, chat_template=chat_template, bos_token="<|begin_of_text|>", eos_token="<|eot|>",
        pad_token="<|finetune_right_pad|>",
    )


def muse_vision_parts() -> tuple[MuseGlimmerImageProcessor, MuseGlimmerVideoProcessor]:
    """Muse image processor (at most `MAX_IMAGE_TOKENS` tokens per image) and video processor."""
    shapes = {"patch_size": PATCH_SIZE, "merge_size": MERGE_SIZE, "temporal_patch_size": 2}
    return MuseGlimmerImageProcessor(max_image_tokens=MAX_IMAGE_TOKENS, **shapes), MuseGlimmerVideoProcessor(**shapes)


def build_processor() -> MuseGlimmerProcessor:
    """Muse Glimmer processor with a freshly trained tokenizer; at most 4 visual tokens per image."""
    image_processor, video_processor = muse_vision_parts()
    return MuseGlimmerProcessor(
        image_processor=image_processor, video_processor=video_processor, tokenizer=muse_tokenizer(),
        chat_template=CHAT_TEMPLATE,
    )


def muse_config_kwargs(processor, sizes: TextSizes) -> dict:
    """Keyword arguments shared by Muse Glimmer and Muse Spark configs: `sizes` with sliding windows
    of 32 tokens, a vision tower of 2 layers of width 32 (2 heads, 4x4 learned positions), adapter
    width 64, and the processor's image/video token ids."""
    tokenizer = processor.tokenizer
    return {
        "text_config": {
            **sizes.text_config(tokenizer, rope_parameters={"rope_type": "default", "rope_theta": 500_000.0}),
            "sliding_window": SLIDING_WINDOW,
        },
        "vision_config": {
            "hidden_size": VISION_WIDTH,
            "intermediate_size": 2 * VISION_WIDTH,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "patch_size": PATCH_SIZE,
            "pos_emb_height": POSITION_GRID,
            "pos_emb_width": POSITION_GRID,
            "max_position_embeddings": POSITION_GRID**2,
            "merge_size": MERGE_SIZE,
        },
        "out_hidden_size": VISION_WIDTH * MERGE_SIZE**2,
        "projector_hidden_size": 64,
        "image_token_id": tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        "video_token_id": tokenizer.convert_tokens_to_ids("<|video|>"),
    }


def build_model(processor: MuseGlimmerProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `MuseGlimmerForConditionalGeneration` with `sizes` and the processor's token ids
    (`muse_config_kwargs`)."""
    config = MuseGlimmerConfig(**muse_config_kwargs(processor, sizes))
    return instantiate(MuseGlimmerForConditionalGeneration, config, seed, attn_implementation)
