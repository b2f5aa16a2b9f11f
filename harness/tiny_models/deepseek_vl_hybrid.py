"""Tiny DeepSeek-VL hybrid (`DeepseekVLHybridForConditionalGeneration` + `DeepseekVLHybridProcessor`).

Mirrors deepseek-community/deepseek-vl-7b-chat in everything but size: a low-resolution SigLIP
tower and a high-resolution SAM tower (windowed attention, one global-attention layer whose
output is mixed back in) see each image; the SAM features are resampled to 4x the SigLIP grid and
halved twice by strided convolutions, so both give one vector per SigLIP patch, and the aligner
concatenates the two halves into one visual token each. Llama language model; tokenizer and chat
template are `deepseek_vl`'s (the 7B checkpoint shares them). The image processor fits the
longest side into 32 px (low-res) and 64 px (high-res) and pads each to a square; a 64x64 image
gives 2x2 16-px SigLIP patches, 4 tokens, whatever its size or aspect ratio (the real 384 /
1024 px: 576). No adapter-table row: the capture derives its adapter from transformers' common
layout.
"""

from __future__ import annotations

from transformers import (
    DeepseekVLHybridConfig,
    DeepseekVLHybridForConditionalGeneration,
    DeepseekVLHybridImageProcessor,
    DeepseekVLHybridProcessor,
)

from . import deepseek_vl
from .parts import TextSizes, instantiate, siglip_vision_config

IMAGE_TOKEN = deepseek_vl.IMAGE_TOKEN
IMAGE_SIZE = deepseek_vl.IMAGE_SIZE
PATCH_SIZE = deepseek_vl.PATCH_SIZE
HIGH_RES_SIZE = 64

DESCRIPTION = {
    **deepseek_vl.DESCRIPTION,
    "model_class": "DeepseekVLHybridForConditionalGeneration",
    "processor_class": "DeepseekVLHybridProcessor",
    "image_features": (
        "model.get_image_features(pixel_values, high_res_pixel_values) -> "
        "BaseModelOutputWithHighResVisionEncodings; .pooler_output is ONE tensor [num_images, patches, "
        "hidden_size] (the aligner's output for every SigLIP patch, SAM and SigLIP halves fused, in "
        "input-embedding space)"
    ),
}


def build_processor() -> DeepseekVLHybridProcessor:
    """DeepSeek-VL hybrid processor with `deepseek_vl`'s tokenizer and template; every image fit
    and padded into 32x32 px (SigLIP) and 64x64 px (SAM), 4 tokens."""
    tokenizer = deepseek_vl.build_processor().tokenizer
    image_processor = DeepseekVLHybridImageProcessor(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        high_res_size={"height": HIGH_RES_SIZE, "width": HIGH_RES_SIZE},
    )
    return DeepseekVLHybridProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=deepseek_vl.CHAT_TEMPLATE,
        num_image_tokens=(IMAGE_SIZE // PATCH_SIZE) ** 2,
    )


def build_model(processor: DeepseekVLHybridProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `DeepseekVLHybridForConditionalGeneration` (SigLIP and SAM towers of 2 layers of
    width 32, SAM's second layer global, windows of 2x2 patches; Llama text with `sizes`)."""
    tokenizer = processor.tokenizer
    config = DeepseekVLHybridConfig(
        text_config=sizes.typed_text_config("llama", tokenizer, rope_theta=10_000.0),
        vision_config=siglip_vision_config(IMAGE_SIZE, PATCH_SIZE),
        high_res_vision_config={
            "model_type": "sam_vision_model",
            "hidden_size": 32,
            "output_channels": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "mlp_dim": 64,
            "image_size": HIGH_RES_SIZE,
            "patch_size": PATCH_SIZE,
            "window_size": 2,
            "global_attn_indexes": [1],
            "num_pos_feats": 16,
            "initializer_range": 0.02,  # SAM's default 1e-10 would leave a random tower's output constant
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(DeepseekVLHybridForConditionalGeneration, config, seed, attn_implementation)
