"""Tiny PaddleOCR-VL (`PaddleOCRVLForConditionalGeneration` + `PaddleOCRVLProcessor`), built offline.

Mirrors PaddlePaddle/PaddleOCR-VL in everything but size: its template's turn structure
(``<|begin_of_sentence|>`` once, then ``User: ...\\n`` and ``Assistant: ...</s>``), images written
as ``<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>``, a SigLIP-style NaViT vision tower (14-px
patches at native resolution, learned position embeddings interpolated to each image's grid, 2-D
vision RoPE) whose projector merges 2x2 patches (one visual token per 28x28 px), and an ERNIE-4.5
decoder (GQA, separate head_dim, no biases) with (non-interleaved) M-RoPE 16:24:24 of base 5e5.
What differs besides size: the real template writes a user turn's images before all of its text;
this one writes them in place, interleaved with the text, and the video placeholder's name is a
stand-in (the model reads no video here). A 64x64 image gives 4 visual tokens (resized to 56x56,
4x4 patches, 2x2 after the merge). No adapter-table row: the capture derives its adapter from
transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    PaddleOCRVLConfig,
    PaddleOCRVLForConditionalGeneration,
    PaddleOCRVLImageProcessor,
    PaddleOCRVLProcessor,
)

from .parts import TINY_VISION_TOWER, TextSizes, instantiate
from .qwen2_5_vl import DESCRIPTION as QWEN2_5_VL_DESCRIPTION
from .qwen3_vl import mrope_text_config
from .tokenizer import train_bpe_tokenizer

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

IMAGE_TOKEN = "<|IMAGE_PLACEHOLDER|>"
MARKERS = {
    "image_token_id": IMAGE_TOKEN,
    "video_token_id": "<|VIDEO_PLACEHOLDER|>",
    "vision_start_token_id": "<|IMAGE_START|>",
    "vision_end_token_id": "<|IMAGE_END|>",
}
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<|begin_of_sentence|>", *MARKERS.values())
PATCH_SIZE = 14
MERGE_SIZE = 2

# The real template's turns, with each image item written where it stands.
CHAT_TEMPLATE = (
    "<|begin_of_sentence|>"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- 'User: ' }}"
    "{%- elif message['role'] == 'assistant' %}{{- 'Assistant: ' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'user' %}{{- '\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{{- '</s>' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'Assistant: ' }}{%- endif %}"
)

DESCRIPTION = {
    **QWEN2_5_VL_DESCRIPTION,
    "model_class": "PaddleOCRVLForConditionalGeneration",
    "processor_class": "PaddleOCRVLProcessor",
    "image_token": IMAGE_TOKEN,
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (projector output, "
        "in input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / 4)"
    ),
    "extra_tokens_per_image": "<|IMAGE_START|> before and <|IMAGE_END|> after each run of <|IMAGE_PLACEHOLDER|>",
}


def build_processor() -> PaddleOCRVLProcessor:
    """PaddleOCR-VL processor with a freshly trained tokenizer (bos <s>, eos </s>, pad and unk
    <unk>, as ERNIE-4.5's); images resized to between 28x28 and 56x56 px (1 to 4 tokens)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<unk>",
        unk_token="<unk>",
        extra_special_tokens={"image_token": IMAGE_TOKEN},
    )
    factor = PATCH_SIZE * MERGE_SIZE
    image_processor = PaddleOCRVLImageProcessor(
        size={"shortest_edge": factor * factor, "longest_edge": (2 * factor) ** 2},
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
    )
    return PaddleOCRVLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)


def build_model(processor: PaddleOCRVLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `PaddleOCRVLForConditionalGeneration` with `sizes` and the processor's token ids;
    vision tower of 2 layers of width 32 (2 heads) with a 4x4 grid of learned positions, projected
    into ``hidden_size``."""
    config = PaddleOCRVLConfig(
        text_config=mrope_text_config(processor, sizes, 500_000.0, spatial_share=24),
        vision_config={
            **TINY_VISION_TOWER,
            "image_size": 2 * PATCH_SIZE * MERGE_SIZE,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
        },
        **{name: processor.tokenizer.convert_tokens_to_ids(token) for name, token in MARKERS.items()},
    )
    return instantiate(PaddleOCRVLForConditionalGeneration, config, seed, attn_implementation)
