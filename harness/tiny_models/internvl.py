"""Tiny InternVL, HF-native (`InternVLForConditionalGeneration` + `InternVLProcessor`), built offline.

Mirrors OpenGVLab/InternVL3-*-hf in everything but size: InternViT vision tower, pixel-shuffle
(downsample 0.5) + MLP projector, Qwen2 language model, ChatML template writing
``<IMG_CONTEXT>\\n`` per image, which the processor expands to
``<img>`` + ``<IMG_CONTEXT>`` x (image_seq_length x tiles) + ``</img>``. Tiles are 64x64 px with
16-px patches, so each tile gives 4 visual tokens; a 64x64 image is one tile (wider images are
cropped into up to 4 tiles plus a thumbnail, as the real processor does with up to 12).
"""

from __future__ import annotations

from transformers import (
    GotOcr2ImageProcessor,
    InternVLConfig,
    InternVLForConditionalGeneration,
    InternVLProcessor,
    InternVLVideoProcessor,
)

from .parts import TINY_VISION_TOWER, TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<IMG_CONTEXT>"
TILE_SIZE = 64
PATCH_SIZE = 16
DOWNSAMPLE_RATIO = 0.5
IMAGE_SEQ_LENGTH = int((TILE_SIZE // PATCH_SIZE * DOWNSAMPLE_RATIO) ** 2)
MARKERS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": IMAGE_TOKEN,
    "video_token": "<video>",
}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *MARKERS.values())

DESCRIPTION = {
    "model_class": "InternVLForConditionalGeneration",
    "processor_class": "InternVLProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE "
        "tensor [total_tiles, image_seq_length, hidden_size] (projector output, in input-embedding "
        "space); an image's tokens are the rows of its tiles, in order (pixel_values holds the tiles "
        "of all images, image after image)"
    ),
    "extra_tokens_per_image": (
        "<img> before and </img> after each run of <IMG_CONTEXT>; the template writes '\\n' after each "
        "image; tiled images stay one run (tiles x image_seq_length tokens)"
    ),
    "image_span": "one contiguous run of the image token per image (all its tiles)",
}


def build_processor() -> InternVLProcessor:
    """InternVL processor with a freshly trained tokenizer; 64x64 px tiles of 4 tokens each."""
    template = chatml_template(IMAGE_TOKEN + "\\n")
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=MARKERS,
    )
    tile = {"height": TILE_SIZE, "width": TILE_SIZE}
    return InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(size=tile, crop_to_patches=True, max_patches=4),
        tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(size=tile),
        image_seq_length=IMAGE_SEQ_LENGTH,
        chat_template=template,
    )


def internvl_vision_config() -> dict:
    """Tiny InternViT: 2 layers of width 32, 2 heads, on `TILE_SIZE`-px tiles of `PATCH_SIZE`-px patches."""
    return {**TINY_VISION_TOWER, "image_size": [TILE_SIZE, TILE_SIZE], "patch_size": [PATCH_SIZE, PATCH_SIZE]}


def build_model(processor: InternVLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `InternVLForConditionalGeneration` (Qwen2 text model) with `sizes`."""
    tokenizer = processor.tokenizer
    config = InternVLConfig(
        text_config={
            "model_type": "qwen2",
            **sizes.text_config(tokenizer, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}),
        },
        vision_config=internvl_vision_config(),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        image_seq_length=IMAGE_SEQ_LENGTH,
        downsample_ratio=DOWNSAMPLE_RATIO,
    )
    return instantiate(InternVLForConditionalGeneration, config, seed, attn_implementation)
