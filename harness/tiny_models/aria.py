"""Tiny Aria (`AriaForConditionalGeneration` + `AriaProcessor` + `AriaImageProcessor`), built offline.

Mirrors rhymes-ai/Aria in everything but size: an Idefics3 (SigLIP-style) vision tower whose
padded patches are masked out, Aria's projector (a fixed number of learned queries
cross-attending to all patches of one image, then an MLP), a mixture-of-experts language model
(routed top-k experts plus always-on shared experts), ChatML turns writing
``<fim_prefix><|img|><fim_suffix>`` per image in place, as the real template does.

`AriaImageProcessor` accepts only 490 or 980 px crops: it fits each image's longest side into
``max_image_size`` (the short side at least ``min_image_size``), pads to a square and returns the
pixel mask. This tiny one keeps the real sizes (980 px, short side >= 336 px) but uses 70-px patches
(14x14 = 196 patches instead of 70x70 = 4,900) and 8 queries instead of 256 (4 for 490 px instead
of 128). So every image, whatever its size or aspect ratio, gives 8 visual tokens; a 64x64 image
gives 8. Splitting into crops (``split_image``) is off by default, as for the real processor.
"""

from __future__ import annotations

from transformers import AriaConfig, AriaForConditionalGeneration, AriaImageProcessor, AriaProcessor

from .parts import TINY_VISION_TOWER, TextSizes, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<|img|>"
SPECIAL_TOKENS = ("<pad>", "<|im_start|>", "<|im_end|>", "<fim_prefix>", "<fim_suffix>", IMAGE_TOKEN)
PATCH_SIZE = 70
# Crop side (px) -> visual tokens per crop (the processor's `size_conversion`); the projector's
# table keys the same query counts by the number of patches of a crop.
TOKENS_PER_CROP = {490: 4, 980: 8}

# The real template: ChatML turns, each image item written in place as <fim_prefix><|img|><fim_suffix>.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'text' %}{{- item['text'] }}"
    "{%- elif item['type'] == 'image' %}{{- '<fim_prefix><|img|><fim_suffix>' }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

DESCRIPTION = {
    "model_class": "AriaForConditionalGeneration",
    "processor_class": "AriaProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, pixel_mask) -> BaseModelOutputWithPooling; .pooler_output is "
        "ONE tensor [num_crops, n_queries, hidden_size] (projector output: learned queries over each crop's patches)"
    ),
    "extra_tokens_per_image": "<fim_prefix> before and <fim_suffix> after each run of <|img|>",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> AriaProcessor:
    """`AriaProcessor` (980-px crops, 8 tokens per image) with a freshly trained tokenizer
    exposing ``<|img|>`` as its ``image_token`` (no BOS, eos ``<|im_end|>``, pad ``<pad>``)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        extra_special_tokens={"image_token": IMAGE_TOKEN},
    )
    return AriaProcessor(
        image_processor=AriaImageProcessor(), tokenizer=tokenizer, chat_template=CHAT_TEMPLATE,
        size_conversion=TOKENS_PER_CROP,
    )


def build_model(processor: AriaProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `AriaForConditionalGeneration` (Idefics3 vision, query projector, MoE text) with `sizes`:
    4 routed experts (top 2) and 2 shared ones, each of the text config's MLP width."""
    tokenizer = processor.tokenizer
    text_config = sizes.text_config(
        tokenizer,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
        moe_num_experts=4,
        moe_topk=2,
        moe_num_shared_experts=2,
    )
    config = AriaConfig(
        text_config=text_config,
        vision_config={
            "model_type": "idefics3_vision",
            **TINY_VISION_TOWER,
            "patch_size": PATCH_SIZE,
            "image_size": max(TOKENS_PER_CROP),
        },
        projector_patch_to_query_dict={(side // PATCH_SIZE) ** 2: n for side, n in TOKENS_PER_CROP.items()},
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(AriaForConditionalGeneration, config, seed, attn_implementation)
