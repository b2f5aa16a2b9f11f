"""Tiny Qianfan-OCR (`QianfanOCRForConditionalGeneration` + `QianfanOCRProcessor` + `GotOcr2ImageProcessor`),
built offline.

Mirrors baidu/Qianfan-OCR in everything but size: an InternViT-style vision tower (layer scale,
mean pooling, absolute positions), pixel-shuffle (downsample 0.5) + MLP projector, a Qwen3
language model (per-head q/k RMS-norm), and the InternVL-style ChatML template writing
``<image>\\n`` per image in place, which the processor expands to ``<img>`` + ``<IMG_CONTEXT>`` x
(image_seq_length x tiles) + ``</img>``; the config's image token is ``<IMG_CONTEXT>``. Tiles are
64x64 px with 16-px patches (4x4, pixel-shuffled to 2x2), 4 visual tokens per tile (the real 448 px
/ 14 px: 256). The processor crops an image into up to 4 tiles plus a thumbnail by default
(``crop_to_patches``), a switch the capture turns off, so every image is one 64x64 tile: a 64x64
image gives 4 visual tokens. Tile sizes and the tokenizer's image markers are those of the tiny
InternVL (`internvl`). No adapter-table row: the capture derives its adapter from transformers'
common layout.
"""

from __future__ import annotations

from transformers import GotOcr2ImageProcessor, QianfanOCRConfig, QianfanOCRForConditionalGeneration, QianfanOCRProcessor

from .internvl import DOWNSAMPLE_RATIO, IMAGE_SEQ_LENGTH, IMAGE_TOKEN, TILE_SIZE, internvl_vision_config
from .parts import TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

PLACEHOLDER = "<image>"
MARKERS = {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": IMAGE_TOKEN}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *MARKERS.values())
CHAT_TEMPLATE = chatml_template(PLACEHOLDER + "\\n")

DESCRIPTION = {
    "model_class": "QianfanOCRForConditionalGeneration",
    "processor_class": "QianfanOCRProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE "
        "tensor [total_tiles, image_seq_length, hidden_size] (projector output, in input-embedding "
        "space); an image's tokens are the rows of its tiles, in order"
    ),
    "extra_tokens_per_image": (
        "<img> before and </img> after each run of <IMG_CONTEXT> (the template's <image> placeholder is "
        "replaced); the template writes '\\n' after each image; tiled images stay one run"
    ),
    "image_span": "one contiguous run of the image token per image (all its tiles)",
}


def build_processor() -> QianfanOCRProcessor:
    """Qianfan-OCR processor with a freshly trained tokenizer; 64x64 px tiles of 4 tokens each, up to
    4 tiles plus a thumbnail when cropping is on."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=MARKERS,
    )
    return QianfanOCRProcessor(
        image_processor=GotOcr2ImageProcessor(
            size={"height": TILE_SIZE, "width": TILE_SIZE}, crop_to_patches=True, max_patches=4
        ),
        tokenizer=tokenizer,
        image_seq_length=IMAGE_SEQ_LENGTH,
        chat_template=CHAT_TEMPLATE,
        image_placeholder_token=PLACEHOLDER,
    )


def build_model(processor: QianfanOCRProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `QianfanOCRForConditionalGeneration` (Qwen3 text model with `sizes`; vision tower of 2
    layers of width 32, 2 heads, on 64x64 px tiles)."""
    tokenizer = processor.tokenizer
    config = QianfanOCRConfig(
        text_config=sizes.typed_text_config("qwen3", tokenizer, rope_theta=1_000_000.0),
        vision_config=internvl_vision_config(),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        image_seq_length=IMAGE_SEQ_LENGTH,
        downsample_ratio=DOWNSAMPLE_RATIO,
    )
    return instantiate(QianfanOCRForConditionalGeneration, config, seed, attn_implementation)
