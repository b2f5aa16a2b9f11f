"""Tiny ERNIE-4.5-VL-MoE (`Ernie4_5_VLMoeForConditionalGeneration` + `Ernie4_5_VLMoeProcessor`), built offline.

Mirrors baidu/ERNIE-4.5-VL-28B-A3B-PT in everything but size: ERNIE's template
(``<|begin_of_sentence|>`` once, ``User: ...``, then ``\\nAssistant: `` and the empty thinking block
``<think>\\n\\n</think>\\n\\n`` of its non-thinking mode), each image written in place as
``Picture k:<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>``, a NaViT vision tower (14-px patches
at native resolution, 2-D vision RoPE) whose resampler merges 2x2 patches (one visual token per 28x28
px), and a decoder of GQA attention with ERNIE's 3-D RoPE (h/w frequencies interleaved, then t; 3:3:2
of a 16-wide head's 8 frequencies, 22:22:20 of 64 in the checkpoint) whose first layer has a dense
MLP and every other layer a modality-isolated mixture of experts (text and vision tokens routed to
separate expert sets, 2 of 4 here, 6 of 64 there, plus a shared expert). The video processor draws
no timestamps on frames here (the checkpoint ships a font for that). A 64x64 image gives 4 visual
tokens (resized to 56x56, 4x4 patches, 2x2 after the merge). No adapter-table row: the capture
derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Ernie4_5_VLMoeConfig,
    Ernie4_5_VLMoeForConditionalGeneration,
    Ernie4_5_VLMoeImageProcessor,
    Ernie4_5_VLMoeProcessor,
    Ernie4_5_VLMoeVideoProcessor,
)

from .parts import TextSizes, instantiate
from .qwen2_5_vl import DESCRIPTION as QWEN2_5_VL_DESCRIPTION
from .tokenizer import train_bpe_tokenizer

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

IMAGE_TOKEN = "<|IMAGE_PLACEHOLDER|>"
# Tokenizer attributes the processor reads, and the config's id names for them.
VISION_TOKENS = {
    "image_token": ("image_token_id", IMAGE_TOKEN),
    "image_start_token": ("image_start_token_id", "<|IMAGE_START|>"),
    "image_end_token": ("image_end_token_id", "<|IMAGE_END|>"),
    "video_token": ("video_token_id", "<|VIDEO_PLACEHOLDER|>"),
    "video_start_token": ("video_start_token_id", "<|VIDEO_START|>"),
    "video_end_token": ("video_end_token_id", "<|VIDEO_END|>"),
}
SPECIAL_TOKENS = (
    "<unk>", "<s>", "</s>", "<|begin_of_sentence|>", "<|end_of_sentence|>",
    *(token for _, token in VISION_TOKENS.values()), "<think>", "</think>",
)
PATCH_SIZE = 14
MERGE_SIZE = 2
NUM_EXPERTS = 4
EXPERTS_PER_TOKEN = 2

# The real template's structure (numbered pictures in place), without its video and reasoning branches.
CHAT_TEMPLATE = (
    "{%- set pictures = namespace(count=0) -%}"
    "<|begin_of_sentence|>"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- 'User: ' }}"
    "{%- elif message['role'] == 'assistant' %}{{- '\\nAssistant: ' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{%- set pictures.count = pictures.count + 1 %}"
    "{{- 'Picture ' + pictures.count|string + ':<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'system' %}{{- '\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{{- '<|end_of_sentence|>' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '\\nAssistant: <think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)

DESCRIPTION = {
    **QWEN2_5_VL_DESCRIPTION,
    "model_class": "Ernie4_5_VLMoeForConditionalGeneration",
    "processor_class": "Ernie4_5_VLMoeProcessor",
    "image_token": IMAGE_TOKEN,
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (resampler output, "
        "in input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / 4)"
    ),
    "extra_tokens_per_image": (
        "'Picture k:' then <|IMAGE_START|> before and <|IMAGE_END|> after each run of <|IMAGE_PLACEHOLDER|>"
    ),
}


def build_processor() -> Ernie4_5_VLMoeProcessor:
    """ERNIE-4.5-VL processor with a freshly trained tokenizer (bos <s>, eos </s>, pad and unk
    <unk>, as the checkpoint's); images resized to between 28x28 and 56x56 px (1 to 4 tokens)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<unk>",
        unk_token="<unk>",
        extra_special_tokens={name: token for name, (_, token) in VISION_TOKENS.items()},
    )
    factor = PATCH_SIZE * MERGE_SIZE
    shapes = {"patch_size": PATCH_SIZE, "merge_size": MERGE_SIZE}
    return Ernie4_5_VLMoeProcessor(
        image_processor=Ernie4_5_VLMoeImageProcessor(
            size={"shortest_edge": factor * factor, "longest_edge": (2 * factor) ** 2}, **shapes
        ),
        tokenizer=tokenizer,
        video_processor=Ernie4_5_VLMoeVideoProcessor(draw_on_frames=False, **shapes),
        chat_template=CHAT_TEMPLATE,
    )


def ernie_mrope_section(head_dim: int) -> list[int]:
    """ERNIE's (h, w, t) split of a head's head_dim/2 rotary frequencies: t gets 20/64 of them,
    h and w share the rest equally (22:22:20 of the checkpoint's 64)."""
    half = head_dim // 2
    spatial = (half - half * 20 // 64) // 2
    return [spatial, spatial, half - 2 * spatial]


def build_model(processor: Ernie4_5_VLMoeProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Ernie4_5_VLMoeForConditionalGeneration` with `sizes` and the processor's token ids;
    decoder layer 0 dense, the others modality-isolated MoE (2 of 4 experts of width
    ``hidden_size`` for text, ``hidden_size / 2`` for vision, one shared expert); vision tower of 2
    blocks of width 32 (2 heads) resampled into ``hidden_size``."""
    tokenizer = processor.tokenizer
    config = Ernie4_5_VLMoeConfig(
        text_config=sizes.text_config(
            tokenizer,
            rope_parameters={"rope_type": "default", "rope_theta": 500_000.0,
                             "mrope_section": ernie_mrope_section(sizes.head_dim)},
            moe_num_experts=NUM_EXPERTS,
            moe_k=EXPERTS_PER_TOKEN,
            moe_num_shared_experts=1,
            moe_intermediate_size=[sizes.hidden_size, sizes.hidden_size // 2],
            mlp_layer_types=["dense"] + ["sparse"] * (sizes.num_hidden_layers - 1),
        ),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
        },
        **{key: tokenizer.convert_tokens_to_ids(token) for key, token in VISION_TOKENS.values()},
    )
    return instantiate(Ernie4_5_VLMoeForConditionalGeneration, config, seed, attn_implementation)
