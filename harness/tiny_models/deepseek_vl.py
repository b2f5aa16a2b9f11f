"""Tiny DeepSeek-VL (`DeepseekVLForConditionalGeneration` + `DeepseekVLProcessor`), built offline.

Mirrors deepseek-community/deepseek-vl-1.3b-chat in everything but size: a SigLIP vision tower
(no pooling head) whose every patch becomes one visual token through a 2-layer GELU aligner, a
Llama language model, and the real template's structure: the default system sentence, turns
``User: ... \\n\\n`` and ``Assistant:``, the first text item of a turn left-stripped and the last
right-stripped, ``<image_placeholder>`` per image, which the processor repeats once per visual
token. The image processor fits the longest side into 32 px and pads to a square; a 64x64 image
gives 2x2 16-px patches, 4 tokens (the real 384 px / 16 px: 576). No adapter-table row: the
capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    DeepseekVLConfig,
    DeepseekVLForConditionalGeneration,
    DeepseekVLImageProcessor,
    DeepseekVLProcessor,
)

from .parts import TextSizes, instantiate, siglip_vision_config
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image_placeholder>"
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
SPECIAL_TOKENS = (BOS, EOS, IMAGE_TOKEN)
IMAGE_SIZE = 32
PATCH_SIZE = 16
SYSTEM = (
    "You are a helpful language and vision assistant. You are able to understand the visual content that "
    "the user provides, and assist the user with a variety of tasks using natural language."
)

CHAT_TEMPLATE = (
    "{{- '" + SYSTEM + "\\n\\n' }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- 'User: ' }}"
    "{%- elif message['role'] == 'assistant' %}{{- 'Assistant: ' }}"
    "{%- else %}{{- message['role'].capitalize() + ': ' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] | trim }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '" + IMAGE_TOKEN + "' }}"
    "{%- elif item['type'] == 'text' %}{%- set text = item['text'] %}"
    "{%- if loop.first %}{%- set text = text.lstrip() %}{%- endif %}"
    "{%- if loop.last %}{%- set text = text.rstrip() %}{%- endif %}"
    "{{- text }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' %}{{- '" + EOS + "' }}{%- else %}{{- '\\n\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'Assistant:' }}{%- endif %}"
)

DESCRIPTION = {
    "model_class": "DeepseekVLForConditionalGeneration",
    "processor_class": "DeepseekVLProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE "
        "tensor [num_images, patches, hidden_size] (the aligner's output for every SigLIP patch, in "
        "input-embedding space)"
    ),
    "extra_tokens_per_image": "none: the run of <image_placeholder> is the image (no markers around it)",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> DeepseekVLProcessor:
    """DeepSeek-VL processor with a freshly trained tokenizer (BOS added in front of every text);
    every image fit and padded into 32x32 px, 4 tokens."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token=BOS,
        add_bos=True,
        eos_token=EOS,
        pad_token=EOS,
        extra_special_tokens={"image_token": IMAGE_TOKEN},
    )
    return DeepseekVLProcessor(
        image_processor=DeepseekVLImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        num_image_tokens=(IMAGE_SIZE // PATCH_SIZE) ** 2,
    )


def build_model(processor: DeepseekVLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `DeepseekVLForConditionalGeneration` (SigLIP vision of 2 layers of width 32, Llama
    text with `sizes`)."""
    tokenizer = processor.tokenizer
    config = DeepseekVLConfig(
        text_config=sizes.typed_text_config("llama", tokenizer, rope_theta=10_000.0),
        vision_config=siglip_vision_config(IMAGE_SIZE, PATCH_SIZE),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(DeepseekVLForConditionalGeneration, config, seed, attn_implementation)
