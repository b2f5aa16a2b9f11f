"""Tiny LLaVA-OneVision (`LlavaOnevisionForConditionalGeneration` + processor), built offline.

Mirrors llava-hf/llava-onevision-qwen2-*-ov-hf in everything but size: SigLIP vision tower (no
CLS token, feature strategy "full"), 2-layer MLP projector, Qwen2 language model, a learned
``image_newline`` embedding, any-res tiling for a prompt's only image and one base tile per image
when a prompt holds several. Vision tiles are 32x32 px with 16-px patches (4 tokens); any-res
grid pinpoints go up to 64x64 px.

One deliberate difference: the real checkpoint's chat template writes ALL images of a message
before its text; this one keeps images in place (interleaved ChatML), which the benchmarks need.
"""

from __future__ import annotations

from transformers import (
    LlavaOnevisionConfig,
    LlavaOnevisionForConditionalGeneration,
    LlavaOnevisionImageProcessor,
    LlavaOnevisionProcessor,
    LlavaOnevisionVideoProcessor,
)

from .parts import TextSizes, chatml_template, instantiate, siglip_vision_config
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", IMAGE_TOKEN, "<video>")
TILE_SIZE = 32
PATCH_SIZE = 16
TOKENS_PER_TILE = (TILE_SIZE // PATCH_SIZE) ** 2
GRID_PINPOINTS = [[TILE_SIZE * rows, TILE_SIZE * cols] for rows in (1, 2) for cols in (1, 2)]

DESCRIPTION = {
    "model_class": "LlavaOnevisionForConditionalGeneration",
    "processor_class": "LlavaOnevisionProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_sizes, batch_num_images=...) -> "
        "BaseModelOutputWithPooling; .pooler_output is a LIST with one [n_tokens_i, hidden_size] tensor "
        "per image (projector output with image_newline rows, in input-embedding space). Pass "
        "batch_num_images from the processor, else every image is treated as a lone any-res image"
    ),
    "extra_tokens_per_image": (
        "none as separate ids: the image_newline embeddings sit at <image> positions inside the run "
        "(several images per prompt: 4 base tokens + 1 newline = 5 per image; a prompt's only image "
        "64x64: 4 base + 4x4 any-res grid + 4 row newlines = 24)"
    ),
    "image_span": "one contiguous run of the image token per image (newline rows included)",
}


def build_processor() -> LlavaOnevisionProcessor:
    """LLaVA-OneVision processor with a freshly trained tokenizer; 32x32 px tiles of 4 tokens."""
    template = chatml_template(IMAGE_TOKEN)
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tile = {"height": TILE_SIZE, "width": TILE_SIZE}
    return LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=tile, image_grid_pinpoints=GRID_PINPOINTS),
        tokenizer=tokenizer,
        video_processor=LlavaOnevisionVideoProcessor(size=tile),
        num_image_tokens=TOKENS_PER_TILE,
        vision_feature_select_strategy="full",
        chat_template=template,
    )


def build_model(processor: LlavaOnevisionProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `LlavaOnevisionForConditionalGeneration` (SigLIP + Qwen2) with `sizes`."""
    tokenizer = processor.tokenizer
    config = LlavaOnevisionConfig(
        text_config=sizes.typed_text_config("qwen2", tokenizer, rope_theta=1_000_000.0),
        vision_config=siglip_vision_config(TILE_SIZE, PATCH_SIZE),
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_grid_pinpoints=GRID_PINPOINTS,
    )
    return instantiate(LlavaOnevisionForConditionalGeneration, config, seed, attn_implementation)
