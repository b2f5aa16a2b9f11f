"""Tiny Command A Vision (`Cohere2VisionForConditionalGeneration` + `Cohere2VisionProcessor`), built offline.

Mirrors CohereLabs/command-a-vision-07-2025 in everything but size: a SigLIP vision tower whose
patch grid is pixel-shuffled 2x2 into a SwiGLU projector, and a Cohere2 decoder (one LayerNorm
before attention and MLP run in parallel, logits scaled by ``logit_scale``, input and output
embeddings tied, 3 sliding-window layers with RoPE then one full-attention layer without any
positional encoding). The processor cuts an image into tiles (``crop_to_patches``: the grid of up
to 12 tiles closest to its aspect ratio, plus a thumbnail when there is more than one) and writes
each image as ``<|START_OF_IMG|>`` + per tile (``<|IMG_PATCH|>`` x tokens + ``<|IMG_LINE_BREAK|>``)
+ ``<|END_OF_IMG|>``. Tiles are 32x32 px with 8-px patches: 4x4 patches shuffled to 2x2 = 4 visual
tokens per tile (the processor's ``patch_size`` 2 is the side of that token grid, as 16 is for the
checkpoint's 512-px tiles). A 64x64 image with tiling on (as built, as the checkpoint) gives 2x2
tiles + the thumbnail = 20 visual tokens; with it off (as the capture calls it, its tiling
switches) 1 tile = 4 visual tokens, whatever the image's size.

One difference in the chat template: the real one always writes a system turn (a long default
preamble when none is given); this one writes a system turn only when a message has that role
(the user turns, which the benchmarks use, are the same). No adapter-table row: the capture
derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Cohere2VisionConfig,
    Cohere2VisionForConditionalGeneration,
    Cohere2VisionImageProcessor,
    Cohere2VisionProcessor,
)

from .parts import TextSizes, instantiate, siglip_vision_config
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<|IMG_PATCH|>"
IMAGE_MARKERS = {
    "boi_token": "<|START_OF_IMG|>",
    "eoi_token": "<|END_OF_IMG|>",
    "image_token": IMAGE_TOKEN,
    "img_line_break_token": "<|IMG_LINE_BREAK|>",
}
SPECIAL_TOKENS = (
    "<PAD>", "<UNK>", "<BOS_TOKEN>", "<EOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>",
    "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
    *IMAGE_MARKERS.values(),
)
TILE_SIZE = 32
PATCH_SIZE = 8
DOWNSAMPLE_FACTOR = 2
TOKEN_GRID = TILE_SIZE // PATCH_SIZE // DOWNSAMPLE_FACTOR  # the image processor's `patch_size`

# The real template's turn structure without its default system preamble, documents and tools.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- set role_tokens = {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>', "
    "'assistant': '<|CHATBOT_TOKEN|>'} %}"
    "{%- for message in messages %}"
    "{{- '<|START_OF_TURN_TOKEN|>' + role_tokens[message['role']] }}"
    "{%- if message['role'] == 'assistant' %}{{- '<|START_RESPONSE|>' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|IMG_PATCH|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' %}{{- '<|END_RESPONSE|>' }}{%- endif %}"
    "{{- '<|END_OF_TURN_TOKEN|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_RESPONSE|>' }}"
    "{%- endif %}"
)

DESCRIPTION = {
    "model_class": "Cohere2VisionForConditionalGeneration",
    "processor_class": "Cohere2VisionProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE tensor "
        "[total_tiles, tokens_per_tile, hidden_size] (projector output, in input-embedding space)"
    ),
    "extra_tokens_per_image": (
        "<|START_OF_IMG|> first, <|IMG_LINE_BREAK|> after each tile's run of <|IMG_PATCH|>, <|END_OF_IMG|> last"
    ),
    "image_span": (
        "one contiguous run of the image token per image with tiling off (then <|IMG_LINE_BREAK|>); "
        "with tiling, one run per tile split by <|IMG_LINE_BREAK|>"
    ),
}


def build_processor() -> Cohere2VisionProcessor:
    """Command A Vision processor with a freshly trained tokenizer (``<BOS_TOKEN>`` in front of
    every text, eos ``<|END_OF_TURN_TOKEN|>``, pad ``<PAD>``); 32x32 px tiles of 4 tokens, up to
    12 tiles plus a thumbnail per image (``crop_to_patches`` on, as by default)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<BOS_TOKEN>",
        add_bos=True,
        eos_token="<|END_OF_TURN_TOKEN|>",
        pad_token="<PAD>",
        unk_token="<UNK>",
        extra_special_tokens=IMAGE_MARKERS,
    )
    image_processor = Cohere2VisionImageProcessor(
        size={"height": TILE_SIZE, "width": TILE_SIZE}, patch_size=TOKEN_GRID, crop_to_patches=True, max_patches=12
    )
    return Cohere2VisionProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)


def build_model(processor: Cohere2VisionProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Cohere2VisionForConditionalGeneration`: SigLIP tower of 2 layers of width 32 over
    32-px tiles, 2x2 pixel shuffle, SwiGLU projector of width 4 x ``hidden_size``, Cohere2 text
    with `sizes` (sliding window 4,096, longer than any test prompt).

    Raises:
        UserInputError: ``hidden_size != num_attention_heads * head_dim`` (Cohere2 derives head_dim
            from them).
    """
    sizes.require_hidden_size_from_heads("cohere2_vision")
    tokenizer = processor.tokenizer
    config = Cohere2VisionConfig(
        text_config={**sizes.typed_text_config("cohere2", tokenizer, rope_theta=50_000.0), "sliding_window": 4096},
        vision_config=siglip_vision_config(TILE_SIZE, PATCH_SIZE),
        downsample_factor=DOWNSAMPLE_FACTOR,
        alignment_intermediate_size=4 * sizes.hidden_size,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(Cohere2VisionForConditionalGeneration, config, seed, attn_implementation)
