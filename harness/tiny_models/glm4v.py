"""Tiny GLM-4.1V (`Glm4vForConditionalGeneration` + `Glm4vProcessor`), built offline.

Mirrors zai-org/GLM-4.1V-9B-Thinking (and GLM-4.6V-Flash, the same architecture) in everything but
size: GLM's template (``[gMASK]<sop>``, turns opened by ``<|user|>\\n`` / ``<|assistant|>\\n`` and
closed by nothing, images written as ``<|begin_of_image|><|image|><|end_of_image|>``), a vision
tower with learned position embeddings interpolated to each image's grid, 14-px patches merged 2x2
by a strided convolution (one visual token per 28x28 px), M-RoPE 8:12:12 over half of each head
(``partial_rotary_factor`` 0.5, pairs interleaved), q/k/v biases, and decoder layers that RMS-norm
the attention and MLP outputs before each residual add. A 64x64 image gives 4 visual tokens
(resized to 56x56). No adapter-table row: the capture derives its adapter from transformers'
common layout.
"""

from __future__ import annotations

from transformers import (
    Glm4vConfig,
    Glm4vForConditionalGeneration,
    Glm4vImageProcessor,
    Glm4vProcessor,
    Glm4vVideoProcessor,
)

from .parts import TextSizes, instantiate
from .qwen2_5_vl import DESCRIPTION as QWEN2_5_VL_DESCRIPTION
from .qwen3_vl import mrope_text_config
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<|image|>"
MARKERS = {
    "image_start_token_id": "<|begin_of_image|>",
    "image_end_token_id": "<|end_of_image|>",
    "video_start_token_id": "<|begin_of_video|>",
    "video_end_token_id": "<|end_of_video|>",
    "image_token_id": IMAGE_TOKEN,
    "video_token_id": "<|video|>",
}
SPECIAL_TOKENS = ("<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", *MARKERS.values())
PATCH_SIZE = 14
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
# The processor's pixel budget counts both temporal copies of an image: 2 x 56 x 56 px is 2x2 tokens.
MAX_PIXELS = TEMPORAL_PATCH_SIZE * (2 * PATCH_SIZE * MERGE_SIZE) ** 2
PARTIAL_ROTARY_FACTOR = 0.5

# The real template's structure (no end-of-turn token: the next role token ends a turn), without
# its video and thinking-metadata branches.
CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- for message in messages %}"
    "{{- '<|' + message['role'] + '|>\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|begin_of_image|><|image|><|end_of_image|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}"
)

# As Qwen2.5-VL's (the same merger output per image), with GLM's classes and image markers.
DESCRIPTION = {
    **QWEN2_5_VL_DESCRIPTION,
    "model_class": "Glm4vForConditionalGeneration",
    "processor_class": "Glm4vProcessor",
    "image_token": IMAGE_TOKEN,
    "extra_tokens_per_image": "<|begin_of_image|> before and <|end_of_image|> after each run of <|image|>",
}


def build_processor() -> Glm4vProcessor:
    """GLM-4.1V processor with a freshly trained tokenizer (eos and pad ``<|endoftext|>``, as the
    checkpoint's); images capped at 56x56 px (4 tokens)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS, chat_template=CHAT_TEMPLATE, eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )
    shapes = {"patch_size": PATCH_SIZE, "merge_size": MERGE_SIZE, "temporal_patch_size": TEMPORAL_PATCH_SIZE}
    return Glm4vProcessor(
        image_processor=Glm4vImageProcessor(
            size={"shortest_edge": MAX_PIXELS // 4, "longest_edge": MAX_PIXELS}, **shapes
        ),
        tokenizer=tokenizer,
        video_processor=Glm4vVideoProcessor(**shapes),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: Glm4vProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Glm4vForConditionalGeneration` with `sizes` and the processor's token ids; vision
    tower of 2 blocks of width 32 (2 heads) with a 4x4 grid of learned positions, merged into
    ``hidden_size``.

    Raises:
        UserInputError: ``hidden_size != num_attention_heads * head_dim`` (GLM-4.1V's text
            attention derives head_dim from them).
    """
    sizes.require_hidden_size_from_heads("glm4v")
    rotary_dim = int(sizes.head_dim * PARTIAL_ROTARY_FACTOR)
    config = Glm4vConfig(
        text_config=mrope_text_config(
            processor, sizes, 10_000.0, spatial_share=24, rotary_dim=rotary_dim,
            partial_rotary_factor=PARTIAL_ROTARY_FACTOR,
        ),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "image_size": 2 * PATCH_SIZE * MERGE_SIZE,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": TEMPORAL_PATCH_SIZE,
            "out_hidden_size": sizes.hidden_size,
        },
        **{name: processor.tokenizer.convert_tokens_to_ids(token) for name, token in MARKERS.items()},
    )
    return instantiate(Glm4vForConditionalGeneration, config, seed, attn_implementation)
