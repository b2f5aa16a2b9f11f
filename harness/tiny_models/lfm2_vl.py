"""Tiny LFM2-VL (`Lfm2VlForConditionalGeneration` + `Lfm2VlProcessor` + `Lfm2VlImageProcessor`), built offline.

Mirrors LiquidAI/LFM2-VL-1.6B in everything but size: a SigLIP2 NaFlex vision tower (native
aspect ratio, patches padded to a fixed budget with an attention mask), a pixel-unshuffle (2x2)
projector with layer norm and a GELU MLP, and the hybrid LFM2 decoder: gated short-convolution
layers (``conv``, no attention) and grouped-query attention layers (``self_attn`` with q/k
RMS-norm and ``out_proj``) in the real checkpoints' pattern (attention at layers 2, 5, 8, 10, 12
and 14 of 16) read at `num_hidden_layers` evenly spaced depths: 4 layers are those at depths 0, 4,
8 and 12, i.e. conv, conv, attention, attention; 16 layers give the real pattern. The ChatML template opened by ``<|startoftext|>`` writes ``<image>`` per image in place;
the processor expands it to ``<|image_start|>`` + ``<image>`` x tokens + ``<|image_end|>``. The
image processor smart-resizes each image (aspect ratio kept) to sides that are multiples of 16 px
(8-px patches, unshuffled 2x2) within 4 to 16 tokens (the real 64 to 256 of 16-px patches); a
64x64 image stays 64x64: 8x8 patches, 4x4 = 16 tokens. Large images are split into 32-px tiles
plus a thumbnail by the real processor (``do_image_splitting``), a switch the capture turns off.
No adapter-table row: the capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import Lfm2VlConfig, Lfm2VlForConditionalGeneration, Lfm2VlImageProcessor, Lfm2VlProcessor

from .parts import TINY_VISION_TOWER, TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image>"
MARKERS = {"image_token": IMAGE_TOKEN, "image_start_token": "<|image_start|>", "image_end_token": "<|image_end|>",
           "image_thumbnail_token": "<|img_thumbnail|>"}
TILE_TOKENS = tuple(f"<|img_row_{row}_col_{col}|>" for row in range(1, 11) for col in range(1, 11))
SPECIAL_TOKENS = ("<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
                  *MARKERS.values(), *TILE_TOKENS)
CHAT_TEMPLATE = "{{- bos_token }}" + chatml_template(IMAGE_TOKEN)
PATCH_SIZE = 8
DOWNSAMPLE = 2
TILE_SIZE = 32
MIN_TOKENS, MAX_TOKENS = 4, 16
# The layers of LiquidAI/LFM2-VL-1.6B's (and LFM2-1.2B's) 16-layer decoder that hold attention.
REAL_LAYERS = 16
FULL_ATTENTION_LAYERS = (2, 5, 8, 10, 12, 14)

DESCRIPTION = {
    "model_class": "Lfm2VlForConditionalGeneration",
    "processor_class": "Lfm2VlProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.out_proj",
    "image_features": (
        "model.get_image_features(pixel_values, spatial_shapes, pixel_attention_mask) -> "
        "BaseModelOutputWithPooling; .pooler_output is a list with one [tokens_i, hidden_size] tensor per "
        "image or tile (projector output of its unshuffled patches, padding dropped, in input-embedding space)"
    ),
    "extra_tokens_per_image": (
        "<|image_start|> before and <|image_end|> after the run of <image>; with splitting on, each tile's run "
        "follows <|img_row_r_col_c|> and the thumbnail's follows <|img_thumbnail|>"
    ),
    "image_span": "one contiguous run of the image token per image (splitting off)",
}


def build_processor() -> Lfm2VlProcessor:
    """LFM2-VL processor with a freshly trained tokenizer (BOS written by the template); every image
    smart-resized to 4-16 tokens of 2x2-unshuffled 8-px patches, splitting into 32-px tiles on."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<|startoftext|>",
        add_bos=True,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        extra_special_tokens=MARKERS,
    )
    image_processor = Lfm2VlImageProcessor(
        encoder_patch_size=PATCH_SIZE,
        downsample_factor=DOWNSAMPLE,
        tile_size=TILE_SIZE,
        size={"height": TILE_SIZE, "width": TILE_SIZE},  # unused by the resize; the real one equals the tile
        min_image_tokens=MIN_TOKENS,
        max_image_tokens=MAX_TOKENS,
    )
    return Lfm2VlProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)


def build_model(processor: Lfm2VlProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Lfm2VlForConditionalGeneration` with `sizes`, the real conv/attention layer pattern, and a
    SigLIP2 vision tower of 2 layers of width 32 (2 heads) over a 16x16 grid of learned positions."""
    tokenizer = processor.tokenizer
    layers = sizes.num_hidden_layers
    depths = [i * REAL_LAYERS // layers for i in range(layers)]
    layer_types = ["full_attention" if depth in FULL_ATTENTION_LAYERS else "conv" for depth in depths]
    config = Lfm2VlConfig(
        text_config={
            "model_type": "lfm2",
            **sizes.text_config(tokenizer, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}),
            "layer_types": layer_types,
            "block_auto_adjust_ff_dim": False,
        },
        vision_config={
            "model_type": "siglip2_vision_model",
            **TINY_VISION_TOWER,
            "patch_size": PATCH_SIZE,
            "num_patches": 256,
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        projector_hidden_size=64,
        downsample_factor=DOWNSAMPLE,
    )
    return instantiate(Lfm2VlForConditionalGeneration, config, seed, attn_implementation)
