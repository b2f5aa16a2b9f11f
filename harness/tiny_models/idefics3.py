"""Tiny Idefics3 (`Idefics3ForConditionalGeneration` + `Idefics3Processor`), built offline.

Mirrors HuggingFaceM4/Idefics3-8B-Llama3 in everything but size: SigLIP-style vision tower,
pixel-shuffle connector (scale factor 2) with a linear projection, Llama 3 language model found at
``model.text_model`` (not ``model.language_model``), the real ``User:``/``Assistant:`` template
opened by ``<|begin_of_text|>`` with turns closed by ``<end_of_utterance>``, and the real expansion
of each ``<image>``: ``<fake_token_around_image><global-img>`` + ``<image>`` x image_seq_len +
``<fake_token_around_image>``. Tiles are 64x64 px with 16-px patches, 2x2-shuffled: 4 visual
tokens per image. The real image processor splits an image into up to 4x4 tiles plus the global
one (``do_image_splitting=True``, ``size`` = 4 x ``max_image_size``); this one is built with
splitting off, the input the capture gives every family outside its adapter table
(`harness.capture.adapters.TILING_SWITCHES`), so every image is one 64x64 global tile. No
adapter-table row: the capture derives the adapter from the model.
"""

from __future__ import annotations

from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessor, Idefics3Processor

from .parts import TINY_VISION_TOWER, TextSizes, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image>"
MARKERS = ("<fake_token_around_image>", IMAGE_TOKEN, "<end_of_utterance>", "<global-img>")
# The sub-image position tokens of the real tokenizers (a split image names each tile's row and column).
TILE_TOKENS = tuple(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7))
TILE_SIZE = 64
PATCH_SIZE = 16
SCALE_FACTOR = 2
SPLIT_FACTOR = 4  # the real processors resize the longest edge to 4 tiles before splitting

DESCRIPTION = {
    "model_class": "Idefics3ForConditionalGeneration",
    "processor_class": "Idefics3Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.text_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, pixel_attention_mask) -> BaseModelOutputWithPooling; "
        ".pooler_output is a list with one tensor per sample (batch row), [its tiles x image_seq_len, "
        "hidden_size], the tokens of all its images in order (connector output, in input-embedding space)"
    ),
    "extra_tokens_per_image": (
        "<fake_token_around_image><global-img> before and <fake_token_around_image> after the run of "
        "<image>; with image splitting on, each tile's run follows <fake_token_around_image><row_r_col_c> "
        "and rows end in '\\n'"
    ),
    "image_span": "one contiguous run of the image token per image (splitting off)",
}


def chat_template(bos_token: str) -> str:
    """The Idefics3 / SmolVLM chat template opened by `bos_token`: ``User:<image>text<end_of_utterance>\\n``
    (``User: text`` when the turn starts with text), ``add_generation_prompt`` appends ``Assistant:``."""
    return (
        bos_token + "{% for message in messages %}{{ message['role'] | capitalize }}"
        "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
        "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
        "{% for item in message['content'] %}"
        "{% if item['type'] == 'text' %}{{ item['text'] }}"
        "{% elif item['type'] == 'image' %}{{ '<image>' }}{% endif %}"
        "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
        "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
    )


def idefics_vision_config(patch_size: int) -> dict:
    """Tiny SigLIP-style vision tower of 64x64 px tiles: 2 layers of width 32, 2 heads."""
    return {
        **TINY_VISION_TOWER,
        "image_size": TILE_SIZE,
        "patch_size": patch_size,
    }


def image_seq_len(patch_size: int, scale_factor: int) -> int:
    """Visual tokens per 64x64 px tile: (64 / patch)^2 patches, pixel-shuffled by `scale_factor` per side."""
    return (TILE_SIZE // patch_size) ** 2 // scale_factor**2


def idefics_processor(processor_class, image_processor_class, specials: tuple[str, ...], bos_token: str,
                      pad_token: str, patch_size: int, scale_factor: int, **parts):
    """An Idefics3-style processor: a freshly trained tokenizer holding `specials`, then the image
    markers and tile tokens (BOS added to plain text and written by the template, turns ended by
    ``<end_of_utterance>``, as the real tokenizers do); an image processor of 64x64 px tiles whose
    longest-edge resize is 4 tiles, splitting off (see the module docstring); `parts` are further
    processor parts (SmolVLM's video processor)."""
    template = chat_template(bos_token)
    tokenizer = train_bpe_tokenizer(
        (*specials, *MARKERS, *TILE_TOKENS),
        chat_template=template,
        bos_token=bos_token,
        add_bos=True,
        eos_token="<end_of_utterance>",
        pad_token=pad_token,
    )
    image_processor = image_processor_class(
        size={"longest_edge": SPLIT_FACTOR * TILE_SIZE},
        max_image_size={"longest_edge": TILE_SIZE},
        do_image_splitting=False,
    )
    return processor_class(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=image_seq_len(patch_size, scale_factor),
        chat_template=template,
        **parts,
    )


def build_processor() -> Idefics3Processor:
    """Idefics3 processor with a freshly trained tokenizer; 64x64 px tiles of 4 tokens, splitting off."""
    specials = ("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>")
    return idefics_processor(Idefics3Processor, Idefics3ImageProcessor, specials, "<|begin_of_text|>",
                             "<|reserved_special_token_0|>", PATCH_SIZE, SCALE_FACTOR)


def idefics_config(config_class, processor, sizes: TextSizes, patch_size: int, scale_factor: int, rope_theta: float):
    """An Idefics3-style config (Llama text model of `sizes`, tiny vision tower) with the processor's ids."""
    tokenizer = processor.tokenizer
    return config_class(
        text_config={
            "model_type": "llama",
            **sizes.text_config(tokenizer, rope_parameters={"rope_type": "default", "rope_theta": rope_theta}),
        },
        vision_config=idefics_vision_config(patch_size),
        scale_factor=scale_factor,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        pad_token_id=tokenizer.pad_token_id,
    )


def build_model(processor: Idefics3Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Idefics3ForConditionalGeneration` (Llama 3 text model, rope theta 500,000) with `sizes`."""
    config = idefics_config(Idefics3Config, processor, sizes, PATCH_SIZE, SCALE_FACTOR, 500_000.0)
    return instantiate(Idefics3ForConditionalGeneration, config, seed, attn_implementation)
