"""Tiny Ovis2 (`Ovis2ForConditionalGeneration` + `Ovis2Processor`), built offline.

Mirrors thisisiron/Ovis2-1B-hf in everything but size: a visual tokenizer (ViT with 2x2
neighbouring patches concatenated, ``hidden_stride`` 2, then a head giving a softmax over a
visual vocabulary) whose probabilities weight a visual embedding table, so each merged patch is
one visual token; a Qwen2 language model; the real ChatML template with its fixed system prompt
and ``<image>\\n`` per image in place, which the processor expands to ``<IMG_START>`` +
``<IMG_ATOM>`` x tokens + ``<IMG_GRID>`` [+ one run of ``<IMG_ATOM>`` per tile, ``<IMG_COL>`` /
``<IMG_ROW>`` between them] + ``<IMG_END>``; those five markers get embeddings from the visual
table too. Tiles are 64x64 px with 16-px patches: a 64x64 image gives 4x4 patches -> 2x2 = 4
visual tokens. Like the real processor, this one crops images into up to 4 tiles plus the whole
image (``crop_to_patches``); with it off (as the capture calls it) every image is one 64x64 tile,
4 tokens, whatever its size or aspect ratio. No adapter-table row: the capture derives its
adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import Ovis2Config, Ovis2ForConditionalGeneration, Ovis2ImageProcessor, Ovis2Processor

from .parts import TINY_VISION_TOWER, TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<IMG_ATOM>"
INDICATORS = ("<IMG_START>", "<IMG_GRID>", "<IMG_COL>", "<IMG_ROW>", "<IMG_END>")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", IMAGE_TOKEN, *INDICATORS)
TILE_SIZE = 64
PATCH_SIZE = 16
HIDDEN_STRIDE = 2
IMAGE_SEQ_LENGTH = (TILE_SIZE // PATCH_SIZE // HIDDEN_STRIDE) ** 2

DESCRIPTION = {
    "model_class": "Ovis2ForConditionalGeneration",
    "processor_class": "Ovis2Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithVisualIndicatorFeatures; .pooler_output "
        "is ONE tensor [total_tiles, image_seq_length, hidden_size] (visual-table embeddings, in input-embedding "
        "space); .visual_indicator_features [5, hidden_size] replace the embeddings of the five marker tokens"
    ),
    "extra_tokens_per_image": (
        "<IMG_START> before the first run of <IMG_ATOM>, <IMG_GRID> after it, <IMG_END> last; with tiling, one "
        "more run per tile split by <IMG_COL> / <IMG_ROW>; the template writes '\\n' after each image"
    ),
    "image_span": "one contiguous run of the image token per image (tiling off), markers around it",
}


def build_processor() -> Ovis2Processor:
    """Ovis2 processor with a freshly trained tokenizer; 64x64 px tiles of 4 tokens each (up to 4
    tiles plus the whole image when ``crop_to_patches`` is on, as by default)."""
    template = chatml_template("<image>\\n", default_system="You are a helpful assistant.")
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": IMAGE_TOKEN},
    )
    image_processor = Ovis2ImageProcessor(
        size={"height": TILE_SIZE, "width": TILE_SIZE}, crop_to_patches=True, max_patches=4
    )
    return Ovis2Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=template,
        image_seq_length=IMAGE_SEQ_LENGTH,
    )


def build_model(processor: Ovis2Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Ovis2ForConditionalGeneration` (visual tokenizer of 2 layers of width 32 over a
    64-entry visual vocabulary, Qwen2 text with `sizes`)."""
    tokenizer = processor.tokenizer
    config = Ovis2Config(
        text_config=sizes.typed_text_config("qwen2", tokenizer, rope_theta=1_000_000.0),
        vision_config={
            **TINY_VISION_TOWER,
            "image_size": TILE_SIZE,
            "patch_size": PATCH_SIZE,
            "hidden_stride": HIDDEN_STRIDE,
            "vocab_size": 64,
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        visual_indicator_token_ids=tokenizer.convert_tokens_to_ids(list(INDICATORS)),
        hidden_size=sizes.hidden_size,
        vocab_size=len(tokenizer),
    )
    return instantiate(Ovis2ForConditionalGeneration, config, seed, attn_implementation)
