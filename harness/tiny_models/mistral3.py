"""Tiny Mistral 3 (`Mistral3ForConditionalGeneration` + `PixtralProcessor`), built offline.

Mirrors mistralai/Mistral-Small-3.1-24B-Instruct-2503 in everything but size: the Pixtral parts
of `llava_pixtral` (Pixtral vision encoder with 2-D RoPE at native aspect ratio, 16-px patches,
Mistral language model, ``[IMG]`` rows closed by ``[IMG_BREAK]`` / ``[IMG_END]``) plus the
Mistral 3 projector: RMS norm, then a learned patch merger folding 2x2 neighbouring patches into
one token, then the MLP. The processor fits each image into 64 px on its longest edge, keeping the
aspect ratio, and rounds both sides up to 32 px (one merged token): a 64x64 or 64x48 image gives
2 rows x 2 ``[IMG]`` = 4 visual tokens (+1 break +1 end), a 64x32 one 2 tokens in one row.
Images of different aspect ratios get different token counts; Mistral 3 has no switch for that.

One difference in the chat template: the real one writes a system prompt between
``[SYSTEM_PROMPT]`` / ``[/SYSTEM_PROMPT]`` markers; this one folds it into the last user turn as
Pixtral's does (the user turns, which the benchmarks use, are the same).
"""

from __future__ import annotations

from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralProcessor

from . import llava_pixtral
from .llava_pixtral import pixtral_config
from .parts import TextSizes, instantiate

IMAGE_TOKEN = llava_pixtral.IMAGE_TOKEN
SPATIAL_MERGE_SIZE = 2

DESCRIPTION = {
    **llava_pixtral.DESCRIPTION,
    "model_class": "Mistral3ForConditionalGeneration",
    "image_features": (
        "model.get_image_features(pixel_values, image_sizes=image_sizes) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_img_tokens_i, hidden_size] tensor per image (patch-merged "
        "projector output for the [IMG] positions only, row-major; [IMG_BREAK]/[IMG_END] are ordinary text tokens)"
    ),
}


def build_processor() -> PixtralProcessor:
    """The `llava_pixtral` processor with 2x2 patches merged into one ``[IMG]`` (32 px per token)."""
    return llava_pixtral.build_processor(spatial_merge_size=SPATIAL_MERGE_SIZE)


def build_model(processor: PixtralProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Mistral3ForConditionalGeneration` (Pixtral vision + patch merger + Mistral text) with `sizes`."""
    config = pixtral_config(
        Mistral3Config, processor.tokenizer, sizes, spatial_merge_size=SPATIAL_MERGE_SIZE, tie_word_embeddings=False
    )
    return instantiate(Mistral3ForConditionalGeneration, config, seed, attn_implementation)
