"""Tiny LLaVA-NeXT-Video (`LlavaNextVideoForConditionalGeneration` + `LlavaNextVideoProcessor`), built offline.

Mirrors llava-hf/LLaVA-NeXT-Video-7B-hf in everything but size: for images, the LLaVA-NeXT parts
of `llava_next` (CLIP vision tower without its CLS token, second-to-last layer features, any-res
grids of 32x32 px tiles with one learned ``image_newline`` per row, Llama language model, the
``USER: ... ASSISTANT:`` template with images in place), plus the video path (frames pooled 2x2),
whose ``<video>`` token, as in the real tokenizer, comes before ``<image>``. Images count as in
LLaVA-NeXT, which has no switch to turn any-res off: a 64x64 image (or 64x48, on the same 2x2
grid) gives 4 base + 4x4 grid + 4 newlines = 24 visual tokens, a 160x48 one 4 + 2x6 + 2 = 18.
"""

from __future__ import annotations

from transformers import (
    LlavaNextImageProcessor,
    LlavaNextVideoConfig,
    LlavaNextVideoForConditionalGeneration,
    LlavaNextVideoProcessor,
    LlavaNextVideoVideoProcessor,
)

from . import llava_next
from .llava_clip import CHAT_TEMPLATE, IMAGE_SIZE, IMAGE_TOKEN, PATCH_SIZE, clip_llava_config
from .llava_next import GRID_PINPOINTS
from .parts import TextSizes, instantiate
from .tokenizer import llama_style_tokenizer

VIDEO_TOKEN = "<video>"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", VIDEO_TOKEN, IMAGE_TOKEN, "<pad>")

DESCRIPTION = {
    **llava_next.DESCRIPTION,
    "model_class": "LlavaNextVideoForConditionalGeneration",
    "processor_class": "LlavaNextVideoProcessor",
}


def build_processor() -> LlavaNextVideoProcessor:
    """`LlavaNextVideoProcessor`: LLaVA-NeXT any-res images of 32x32 px tiles (4 tokens each), 32x32
    px video frames, and a freshly trained Llama-style tokenizer holding ``<video>`` and ``<image>``."""
    tiny = {"size": {"shortest_edge": IMAGE_SIZE}, "crop_size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE}}
    return LlavaNextVideoProcessor(
        video_processor=LlavaNextVideoVideoProcessor(**tiny),
        image_processor=LlavaNextImageProcessor(**tiny, image_grid_pinpoints=GRID_PINPOINTS),
        tokenizer=llama_style_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE),
        chat_template=CHAT_TEMPLATE,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


def build_model(processor: LlavaNextVideoProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `LlavaNextVideoForConditionalGeneration` (CLIP vision + Llama text) with `sizes`."""
    tokenizer = processor.tokenizer
    config = clip_llava_config(
        LlavaNextVideoConfig,
        tokenizer,
        sizes,
        image_grid_pinpoints=GRID_PINPOINTS,
        video_token_index=tokenizer.convert_tokens_to_ids(VIDEO_TOKEN),
    )
    return instantiate(LlavaNextVideoForConditionalGeneration, config, seed, attn_implementation)
