"""Tiny HyperCLOVA X SEED Vision V2 (`HyperCLOVAXVisionV2ForConditionalGeneration` +
`HyperCLOVAXVisionV2Processor` + `Qwen2VLImageProcessor`), built offline.

Mirrors naver-hyperclovax/HyperCLOVAX-SEED-Think-32B in everything but size: a Qwen2.5-VL vision
transformer (14-px patches merged 2x2, windowed attention with a full-attention block), one linear
projector into a HyperCLOVA X language model (Peri-Layer Normalization: an extra RMS-norm after each
attention and MLP output; MuP multipliers at their neutral defaults) with plain 1-D RoPE; a ChatML
template writing ``<|image_start|><|IMAGE_PAD|><|image_end|>`` per image in place, the processor
repeating ``<|IMAGE_PAD|>`` once per merged patch. The image processor keeps the aspect ratio within
28x28 to 56x56 px (sides multiples of 28 px), so a 64x64 image is resized to 56x56: 4x4 patches,
2x2 = 4 visual tokens. No adapter-table row: the capture derives its adapter from transformers'
common layout.
"""

from __future__ import annotations

from transformers import (
    HyperCLOVAXVisionV2Config,
    HyperCLOVAXVisionV2ForConditionalGeneration,
    HyperCLOVAXVisionV2Processor,
    Qwen2VLVideoProcessor,
)

from .parts import TextSizes, chatml_template, instantiate
from .qwen3_vl import MERGE_SIZE, qwen_image_processor, qwen_vision_config
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<|IMAGE_PAD|>"
VIDEO_TOKEN = "<|VIDEO_PAD|>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_start|>", "<|image_end|>", IMAGE_TOKEN,
                  "<|video_start|>", "<|video_end|>", VIDEO_TOKEN)
CHAT_TEMPLATE = chatml_template("<|image_start|>" + IMAGE_TOKEN + "<|image_end|>")
PATCH_SIZE = 14
VISION_OUT = 64

DESCRIPTION = {
    "model_class": "HyperCLOVAXVisionV2ForConditionalGeneration",
    "processor_class": "HyperCLOVAXVisionV2Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; .pooler_output "
        "is a tuple with one [n_tokens_i, hidden_size] tensor per image (projector output of the merged "
        "patches, in input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / 4)"
    ),
    "extra_tokens_per_image": "<|image_start|> before and <|image_end|> after each run of <|IMAGE_PAD|>",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> HyperCLOVAXVisionV2Processor:
    """HyperCLOVAX Vision V2 processor with a freshly trained tokenizer; images resized within 28x28 to
    56x56 px (1 to 4 tokens)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": IMAGE_TOKEN, "video_token": VIDEO_TOKEN},
    )
    return HyperCLOVAXVisionV2Processor(
        image_processor=qwen_image_processor(PATCH_SIZE),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(patch_size=PATCH_SIZE, merge_size=MERGE_SIZE),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: HyperCLOVAXVisionV2Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `HyperCLOVAXVisionV2ForConditionalGeneration` with `sizes`: a Qwen2.5-VL vision tower of 2
    blocks of width 32 (2 heads), the second full attention, merged into width 64 and projected."""
    tokenizer = processor.tokenizer
    config = HyperCLOVAXVisionV2Config(
        text_config=sizes.typed_text_config("hyperclovax", tokenizer, rope_theta=10_000.0),
        vision_config={
            "model_type": "qwen2_5_vl_vision",
            **qwen_vision_config(PATCH_SIZE, VISION_OUT, window_size=2 * PATCH_SIZE * MERGE_SIZE,
                                 fullatt_block_indexes=[1]),
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        video_token_id=tokenizer.convert_tokens_to_ids(VIDEO_TOKEN),
    )
    return instantiate(HyperCLOVAXVisionV2ForConditionalGeneration, config, seed, attn_implementation)
