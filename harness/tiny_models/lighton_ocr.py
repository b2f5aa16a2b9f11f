"""Tiny LightOnOCR (`LightOnOcrForConditionalGeneration` + `LightOnOcrProcessor`), built offline.

Mirrors lightonai/LightOnOCR-1B-1025 in everything but size: a Pixtral vision encoder (2-D RoPE,
native aspect ratio) whose 2x2 neighbouring patches a learned merger folds into one token, an
RMS-norm + GELU MLP projector, a Qwen3 language model, a ChatML template writing
``<|image_pad|>`` per image, which the processor repeats once per merged token, with no row
breaks or end marker (one contiguous run per image). The Pixtral image processor fits each image
into 64 px on its longest edge, keeping the aspect ratio, and rounds both sides up to 32 px
(16-px patches x merge 2, as the real 1540 px are 55 x 28 px): a 64x64 or 64x48 image gives 2x2
= 4 visual tokens, a 160x48 one 64x19 -> 64x32 px, 2 tokens. Images of different aspect ratios
get different counts; LightOnOCR has no switch for that. No adapter-table row: the capture
derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    LightOnOcrConfig,
    LightOnOcrForConditionalGeneration,
    LightOnOcrProcessor,
    PixtralImageProcessor,
)

from .parts import TINY_VISION_TOWER, TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<|image_pad|>"
MARKERS = {"image_token": IMAGE_TOKEN, "image_break_token": "<|vision_pad|>", "image_end_token": "<|vision_end|>"}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", *MARKERS.values())
PATCH_SIZE = 16
SPATIAL_MERGE_SIZE = 2
MAX_IMAGE_SIZE = 64

DESCRIPTION = {
    "model_class": "LightOnOcrForConditionalGeneration",
    "processor_class": "LightOnOcrProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_sizes=image_sizes) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_img_tokens_i, hidden_size] tensor per image (patch-merged "
        "projector output, row-major)"
    ),
    "extra_tokens_per_image": "none: the run of <|image_pad|> is the image (no breaks, no markers)",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> LightOnOcrProcessor:
    """LightOnOCR processor with a freshly trained tokenizer; images fit in 64x64 px and rounded up
    to 32-px multiples, one ``<|image_pad|>`` per 2x2 16-px patches."""
    template = chatml_template(IMAGE_TOKEN)
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=MARKERS,
    )
    merged = PATCH_SIZE * SPATIAL_MERGE_SIZE
    image_processor = PixtralImageProcessor(
        size={"longest_edge": MAX_IMAGE_SIZE}, patch_size={"height": merged, "width": merged}
    )
    return LightOnOcrProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        spatial_merge_size=SPATIAL_MERGE_SIZE,
        chat_template=template,
    )


def build_model(processor: LightOnOcrProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `LightOnOcrForConditionalGeneration` (Pixtral vision of 2 layers of width 32, Qwen3
    text with `sizes`)."""
    tokenizer = processor.tokenizer
    text = sizes.typed_text_config("qwen3", tokenizer, rope_theta=1_000_000.0)
    config = LightOnOcrConfig(
        text_config={**text, "sliding_window": None},
        vision_config={
            "model_type": "pixtral",
            **TINY_VISION_TOWER,
            "head_dim": 16,
            "hidden_act": "silu",
            "image_size": MAX_IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
        },
        spatial_merge_size=SPATIAL_MERGE_SIZE,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(LightOnOcrForConditionalGeneration, config, seed, attn_implementation)
