"""Tiny Granite-Docling (`GraniteDoclingForConditionalGeneration` + `GraniteDoclingProcessor`), built offline.

Mirrors ibm-granite/granite-for-docling-500m in everything but size: SigLIP-style vision tower of
square tiles, a connector that pixel-shuffles 4x4 (a fine path shuffling 2x2 for four times the
tokens exists, taken only when the processor is called with ``fine_route=True``), projects, adds a
fixed 2-D sinusoidal position embedding and normalises; DeepStack features of tapped vision layers
added to the image tokens' hidden states after the first text layers; a Granite language model
(embedding, residual, attention and logit multipliers) found at ``model.text_model``; a Granite
tokenizer (no BOS added, ``<|end_of_text|>`` ends turns) and a Granite-style chat template
(``<|start_of_role|>user<|end_of_role|>...<|end_of_text|>\\n``) writing ``<image>`` per image item.
The real image processor tiles a page into up to 32 tiles of 512 px (``crop_to_patches``) plus a
thumbnail; this one is built with tiling off, the input the capture gives every family outside its
adapter table, so every image is resized to one 64x64 tile: 8-px patches, 8x8 = 64 per tile,
shuffled 4x4 into 4 visual tokens. The processor writes a lone tile as
``<fake_token_around_image><row_1_col_1>`` + ``<image>`` x 4 + ``\\n`` (no closing marker and no
thumbnail, which only follows several tiles). No adapter-table row: the capture derives the
adapter from the model.
"""

from __future__ import annotations

from transformers import (
    GraniteDoclingConfig,
    GraniteDoclingForConditionalGeneration,
    GraniteDoclingImageProcessor,
    GraniteDoclingProcessor,
)

from .idefics3 import DESCRIPTION as IDEFICS3_DESCRIPTION
from .parts import TINY_VISION_TOWER, TextSizes, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image>"
MARKERS = ("<fake_token_around_image>", IMAGE_TOKEN, "<global-img>")
# The real tokenizer names every tile of a grid of up to 16x16 tiles.
TILE_TOKENS = tuple(f"<row_{row}_col_{col}>" for row in range(1, 17) for col in range(1, 17))
SPECIAL_TOKENS = ("<|pad|>", "<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", *MARKERS, *TILE_TOKENS)
TILE_SIZE = 64
PATCH_SIZE = 8
SCALE_FACTOR = 4
DEEPSTACK_LAYERS = [0, 1]  # both vision layers (the real 12-layer tower taps layers 3, 7 and 10)

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{- item['text'] -}}"
    "{%- elif item['type'] == 'image' -%}{{- '<image>' -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|end_of_text|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%}"
)

DESCRIPTION = {
    **IDEFICS3_DESCRIPTION,
    "model_class": "GraniteDoclingForConditionalGeneration",
    "processor_class": "GraniteDoclingProcessor",
    "image_features": (
        "model.get_image_features(pixel_values, pixel_attention_mask) -> GraniteDoclingImageFeaturesOutput; "
        ".pooler_output is a tuple with one tensor per sample (batch row), [its tiles x image_seq_len, "
        "hidden_size], the tokens of all its images in order (connector output, in input-embedding space, "
        "before the text model's embedding multiplier); .deepstack_features holds one such tuple per tapped "
        "vision layer, added after the first text layers"
    ),
    "extra_tokens_per_image": (
        "<fake_token_around_image><row_1_col_1> before and '\\n' after the run of <image> (tiling off); with "
        "tiling on, each tile's run follows <fake_token_around_image><row_r_col_c>, rows end in '\\n', and a "
        "thumbnail '\\n<fake_token_around_image><global-img>' + run + '<fake_token_around_image>' follows"
    ),
    "image_span": "one contiguous run of the image token per image (tiling off)",
}


def build_processor() -> GraniteDoclingProcessor:
    """Granite-Docling processor with a freshly trained tokenizer; every image one 64x64 px tile of
    4 tokens (tiling off, see the module docstring)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<|end_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
    )
    image_processor = GraniteDoclingImageProcessor(
        size={"height": TILE_SIZE, "width": TILE_SIZE}, crop_to_patches=False
    )
    image_seq_len = (TILE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
    return GraniteDoclingProcessor(
        image_processor=image_processor, tokenizer=tokenizer, image_seq_len=image_seq_len, chat_template=CHAT_TEMPLATE
    )


def build_model(processor: GraniteDoclingProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `GraniteDoclingForConditionalGeneration` (Granite text model, rope theta 10,000, attention
    scaled by 1 / head_dim as the real 1/64) with `sizes`; a vision tower of 2 layers of width 32."""
    tokenizer = processor.tokenizer
    config = GraniteDoclingConfig(
        text_config=sizes.text_config(
            tokenizer,
            attention_multiplier=1.0 / sizes.head_dim,
            rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
        ),
        vision_config={
            **TINY_VISION_TOWER,
            "image_size": TILE_SIZE,
            "patch_size": PATCH_SIZE,
            "scale_factor": SCALE_FACTOR,
            "out_hidden_size": sizes.hidden_size,
            "deepstack_visual_indexes": DEEPSTACK_LAYERS,
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        pad_token_id=tokenizer.pad_token_id,
    )
    return instantiate(GraniteDoclingForConditionalGeneration, config, seed, attn_implementation)
