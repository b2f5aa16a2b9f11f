"""Tiny LLaVA-NeXT (`LlavaNextForConditionalGeneration` + `LlavaNextProcessor`), built offline.

Mirrors llava-hf/llava-v1.6-vicuna-7b-hf in everything but size: the LLaVA-1.5 parts of
`llava_clip` (CLIP vision tower without its CLS token, second-to-last layer features, Llama
language model, ``USER: ... ASSISTANT:`` template with images in place) plus any-res: every image
is a 32x32 px base tile and the tiles of the best-fitting grid pinpoint (the real five, scaled
336 -> 32 px: 1x2, 2x1, 2x2, 3x1, 1x3 tiles), whose features lose the padding rows or columns and
gain one learned ``image_newline`` per row. The token count depends on the image's size and aspect
ratio, and LLaVA-NeXT has no switch to turn any-res off: a 64x64 image (or 64x48, on the same 2x2
grid) gives 4 base + 4x4 grid + 4 newlines = 24 visual tokens, a 160x48 one 4 + 2x6 + 2 = 18, a
32x32 one 4 + 2x2 + 2 = 10.
"""

from __future__ import annotations

from transformers import (
    LlavaNextConfig,
    LlavaNextForConditionalGeneration,
    LlavaNextImageProcessor,
    LlavaNextProcessor,
)

from .llava_clip import IMAGE_SIZE, IMAGE_TOKEN, clip_llava_config, clip_processor
from .parts import TextSizes, instantiate

GRID_PINPOINTS = [[IMAGE_SIZE * rows, IMAGE_SIZE * cols] for rows, cols in ((1, 2), (2, 1), (2, 2), (3, 1), (1, 3))]

DESCRIPTION = {
    "model_class": "LlavaNextForConditionalGeneration",
    "processor_class": "LlavaNextProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_sizes) -> BaseModelOutputWithPooling; .pooler_output "
        "is a tuple with one [n_tokens_i, hidden_size] tensor per image (base tile, then the unpadded any-res "
        "grid with an image_newline row end, in input-embedding space)"
    ),
    "extra_tokens_per_image": (
        "none as separate ids: the image_newline embeddings sit at <image> positions inside the run (64x64 "
        "px: 4 base + 4x4 grid + 4 newlines = 24); the template writes a newline after each run"
    ),
    "image_span": "one contiguous run of the image token per image (newline rows included)",
}


def build_processor() -> LlavaNextProcessor:
    """LLaVA-NeXT processor with the `llava_clip` tokenizer; 32x32 px tiles of 4 tokens, any-res grids."""
    image_processor = LlavaNextImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_grid_pinpoints=GRID_PINPOINTS,
    )
    return clip_processor(LlavaNextProcessor, image_processor)


def build_model(processor: LlavaNextProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `LlavaNextForConditionalGeneration` (CLIP vision + Llama text) with `sizes`."""
    config = clip_llava_config(LlavaNextConfig, processor.tokenizer, sizes, image_grid_pinpoints=GRID_PINPOINTS)
    return instantiate(LlavaNextForConditionalGeneration, config, seed, attn_implementation)
