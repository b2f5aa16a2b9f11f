"""Tiny SmolVLM (`SmolVLMForConditionalGeneration` + `SmolVLMProcessor`), built offline.

Mirrors HuggingFaceTB/SmolVLM-256M-Instruct / SmolVLM2 in everything but size: the Idefics3 layout
(`harness.tiny_models.idefics3`: SigLIP-style vision tower, pixel-shuffle connector, Llama text
model at ``model.text_model``, ``<fake_token_around_image><global-img>`` + ``<image>`` x
image_seq_len + ``<fake_token_around_image>`` per image, ``User:``/``Assistant:`` template) with
SmolVLM's own parts: a SmolLM2 tokenizer opened by ``<|im_start|>``, a 4x4 pixel shuffle (scale
factor 4, as the 256M/500M checkpoints), and a video processor beside the image processor. Tiles
are 64x64 px with 8-px patches: 64 patches shuffled 4x4 give 4 visual tokens per image. Image
splitting is off, as for Idefics3 (the capture's input for families outside its table). No
adapter-table row: the capture derives the adapter from the model.
"""

from __future__ import annotations

from transformers import (
    SmolVLMConfig,
    SmolVLMForConditionalGeneration,
    SmolVLMImageProcessor,
    SmolVLMProcessor,
    SmolVLMVideoProcessor,
)

from .idefics3 import DESCRIPTION as IDEFICS3_DESCRIPTION
from .idefics3 import IMAGE_TOKEN, SPLIT_FACTOR, TILE_SIZE, idefics_config, idefics_processor
from .parts import TextSizes, instantiate

PATCH_SIZE = 8
SCALE_FACTOR = 4

DESCRIPTION = {
    **IDEFICS3_DESCRIPTION,
    "model_class": "SmolVLMForConditionalGeneration",
    "processor_class": "SmolVLMProcessor",
}


def build_processor() -> SmolVLMProcessor:
    """SmolVLM processor with a freshly trained tokenizer; 64x64 px tiles of 4 tokens, splitting off;
    its video processor samples up to 4 frames at 1 fps, each one 64x64 px tile."""
    frames = {"longest_edge": TILE_SIZE}
    video_processor = SmolVLMVideoProcessor(
        size={"longest_edge": SPLIT_FACTOR * TILE_SIZE},
        max_image_size=frames,
        video_sampling={"fps": 1, "max_frames": 4, "video_size": frames},
    )
    specials = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    return idefics_processor(SmolVLMProcessor, SmolVLMImageProcessor, specials, "<|im_start|>", "<|im_end|>",
                             PATCH_SIZE, SCALE_FACTOR, video_processor=video_processor)


def build_model(processor: SmolVLMProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `SmolVLMForConditionalGeneration` (SmolLM2 text model, rope theta 100,000) with `sizes`."""
    config = idefics_config(SmolVLMConfig, processor, sizes, PATCH_SIZE, SCALE_FACTOR, 100_000.0)
    return instantiate(SmolVLMForConditionalGeneration, config, seed, attn_implementation)
