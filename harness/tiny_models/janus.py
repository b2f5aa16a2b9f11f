"""Tiny Janus (`JanusForConditionalGeneration` + `JanusProcessor`), built offline.

Mirrors deepseek-community/Janus-Pro-1B in everything but size: a SigLIP-style vision tower whose
every patch becomes one visual token through a 2-layer GELU aligner, a Llama language model, the
VQ-VAE and generation head of its image-generation path (unused when generating text, shrunk to
one 32-channel level), and the real prompt's structure: the default system sentence (which the
real processor prepends; here the template writes it), turns ``<|User|>: ... \\n\\n`` and
``<|Assistant|>:``, the first text item of a turn left-stripped and the last right-stripped, a
space between adjacent text items, ``<image_placeholder>`` per image with a newline between it and
its neighbours, which the processor expands to ``<begin_of_image>`` + ``<image_placeholder>`` x
tokens + ``<end_of_image>``. As DeepSeek-VL's, the image processor fits the longest side into
32 px and pads to a square; a 64x64 image gives 2x2 16-px patches, 4 tokens (the real 384 px /
16 px: 576), whatever its size or aspect ratio. No adapter-table row: the capture derives its
adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import JanusConfig, JanusForConditionalGeneration, JanusImageProcessor, JanusProcessor
from transformers.models.janus.processing_janus import DEFAULT_SYSTEM_PROMPT

from .parts import TextSizes, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image_placeholder>"
BOI, EOI = "<begin_of_image>", "<end_of_image>"
BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
SPECIAL_TOKENS = (BOS, EOS, PAD, "<|User|>", "<|Assistant|>", IMAGE_TOKEN, BOI, EOI)
IMAGE_SIZE = 32
PATCH_SIZE = 16
NUM_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2
SYSTEM = DEFAULT_SYSTEM_PROMPT.replace("\n", "\\n")

# The real processor prepends SYSTEM to every text (`use_default_system_prompt`); the template
# writes it instead, so the processed text is the rendered one (same tokens).
CHAT_TEMPLATE = (
    "{{- '" + SYSTEM + "' }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- '<|User|>: ' }}"
    "{%- elif message['role'] == 'assistant' %}{{- '<|Assistant|>: ' }}"
    "{%- else %}{{- message['role'].capitalize() + ': ' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] | trim }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}{{- '" + IMAGE_TOKEN + "' }}"
    "{%- if not loop.last %}{{- '\\n' }}{%- endif %}"
    "{%- elif item['type'] == 'text' %}{%- set text = item['text'] %}"
    "{%- if loop.first %}{%- set text = text.lstrip() %}{%- endif %}"
    "{%- if loop.last %}{%- set text = text.rstrip() %}{%- endif %}"
    "{%- if not loop.first and message['content'][loop.index0 - 1]['type'] == 'text' %}{{- ' ' }}{%- endif %}"
    "{{- text }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' %}{{- '" + EOS + "' }}{%- else %}{{- '\\n\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|Assistant|>:' }}{%- endif %}"
)

DESCRIPTION = {
    "model_class": "JanusForConditionalGeneration",
    "processor_class": "JanusProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE "
        "tensor [num_images, patches, hidden_size] (the aligner's output for every vision patch, in "
        "input-embedding space)"
    ),
    "extra_tokens_per_image": "<begin_of_image> before and <end_of_image> after each run of <image_placeholder>",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> JanusProcessor:
    """Janus processor with a freshly trained tokenizer (BOS added in front of every text); every
    image fit and padded into 32x32 px, 4 tokens between ``<begin_of_image>`` / ``<end_of_image>``."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token=BOS,
        add_bos=True,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens={"image_token": IMAGE_TOKEN, "boi_token": BOI, "eoi_token": EOI},
    )
    return JanusProcessor(
        image_processor=JanusImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        num_image_tokens=NUM_IMAGE_TOKENS,
    )


def build_model(processor: JanusProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `JanusForConditionalGeneration` (vision tower of 2 layers of width 32, Llama text with
    `sizes`, a one-level 32-channel VQ-VAE with a 16-entry codebook)."""
    tokenizer = processor.tokenizer
    config = JanusConfig(
        text_config=sizes.typed_text_config("llama", tokenizer, rope_theta=10_000.0),
        vision_config={
            "hidden_size": 32,
            "mlp_ratio": 2.0,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
            "projection_dim": sizes.hidden_size,
            "num_image_tokens": NUM_IMAGE_TOKENS,
        },
        vq_config={
            "embed_dim": 8,
            "num_embeddings": 16,
            "latent_channels": 32,
            "base_channels": 32,
            "channel_multiplier": [1],
            "num_res_blocks": 1,
            "projection_dim": sizes.hidden_size,
            "image_token_embed_dim": sizes.hidden_size,
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(JanusForConditionalGeneration, config, seed, attn_implementation)
