"""Tiny Molmo2 (`Molmo2ForConditionalGeneration` + `Molmo2Processor` + `Molmo2ImageProcessor`), built offline.

Mirrors allenai/Molmo2-4B in everything but size: a SigLIP-style ViT whose features of two layers
(the last and the one before it here; the real -3 and -9) are concatenated, pooled 2x2 by an
attention-pooling adapter and projected by a SwiGLU MLP; the projected tokens are ADDED to the
embeddings of the ``<im_patch>`` placeholders (not written over them); all image tokens of a
prompt attend to each other bidirectionally (one block, from ``mm_token_type_ids``); a Qwen3-style
language model (per-head q/k RMS-norm, rope theta 5,000,000). The tokenizer mirrors the real one:
``<|im_end|>`` is both BOS and EOS, ``<|endoftext|>`` pads, and the processor puts the BOS in front
of a text that lacks it. Each ``<|image|>`` expands to a low-resolution view
(``<low_res_im_start>``, rows of ``<im_patch>`` each ended by ``<im_col>``, ``<im_end>``) then the
high-resolution overlapping crops (``<im_start>`` ... ``<im_end>``); the config's image token is
``<im_patch>``. Crops are 32x32 px with 8-px patches (4x4) and a 1-patch overlap margin per side
(the real 378 px / 14 px, margin 4), at most 8 crops (the real ``max_crops``; no on/off switch). A
64x64 image gives 2x2 pooled low-res tokens plus a 2x2 crop canvas of 48x48 px (2 x 16-px windows
+ 16 px of margins): 6x6 patches pooled to 3x3, 4 + 9 = 13 visual tokens.

One deliberate difference: the real chat template writes every image (``Image k<|image|>``) before
the turn's text and joins text items with spaces; this one writes the ChatML turn with each image
in place and text items as given, which the benchmarks need. The embedding covers only the tiny
vocabulary (``additional_vocab_size=0``; the real checkpoints keep the image tokens in 128 extra
rows the LM head does not predict). No adapter-table row: the capture derives its adapter from
transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Molmo2Config,
    Molmo2ForConditionalGeneration,
    Molmo2ImageProcessor,
    Molmo2Processor,
    Molmo2VideoProcessor,
)

from .parts import TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<im_patch>"
PLACEHOLDER = "<|image|>"
IMAGE_MARKERS = ("<im_start>", "<im_end>", IMAGE_TOKEN, "<im_col>", "<low_res_im_start>", PLACEHOLDER, "<im_low>",
                 "<frame_start>", "<frame_end>", "<|video|>")
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *IMAGE_MARKERS)
CHAT_TEMPLATE = "{{- bos_token }}" + chatml_template(PLACEHOLDER)
CROP_SIZE = 32
PATCH_SIZE = 8
VISION_WIDTH = 32

DESCRIPTION = {
    "model_class": "Molmo2ForConditionalGeneration",
    "processor_class": "Molmo2Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_token_pooling, image_grids) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [tokens_i, hidden_size] tensor per image (low-res then high-res "
        "pooled tokens, adapter output); the model ADDS them to the <im_patch> token embeddings"
    ),
    "extra_tokens_per_image": (
        "<low_res_im_start> ... <im_end> around the low-res view and <im_start> ... <im_end> around the crops; "
        "every row of <im_patch> ends in <im_col>"
    ),
    "image_span": "several runs of the image token per image (rows of both views), covered by one span",
}


def build_processor() -> Molmo2Processor:
    """Molmo2 processor with a freshly trained tokenizer (``<|im_end|>`` as BOS, written by the template);
    32x32 px crops of 8-px patches pooled 2x2, up to 8 overlapping crops plus the low-res view."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<|im_end|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": PLACEHOLDER, "video_token": "<|video|>"},
    )
    crops = {"size": {"height": CROP_SIZE, "width": CROP_SIZE}, "patch_size": PATCH_SIZE,
             "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
    return Molmo2Processor(
        image_processor=Molmo2ImageProcessor(**crops, overlap_margins=[1, 1]),
        video_processor=Molmo2VideoProcessor(**crops),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
        use_frame_special_tokens=False,
    )


def build_model(processor: Molmo2Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Molmo2ForConditionalGeneration` with `sizes`; a ViT of 2 layers of width 32 (2 heads) on
    32x32 px crops, features of both layers pooled by a 2-head adapter."""
    tokenizer = processor.tokenizer
    ids = dict(zip(IMAGE_MARKERS, tokenizer.convert_tokens_to_ids(list(IMAGE_MARKERS))))
    heads = {"num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": VISION_WIDTH // 2}
    config = Molmo2Config(
        text_config={
            **sizes.text_config(tokenizer, rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0}),
            "additional_vocab_size": 0,
            "qk_norm_type": "qwen3",
        },
        vision_config={
            "hidden_size": VISION_WIDTH,
            "intermediate_size": 2 * VISION_WIDTH,
            "num_hidden_layers": 2,
            **heads,
            "image_size": [CROP_SIZE, CROP_SIZE],
            "patch_size": PATCH_SIZE,
        },
        adapter_config={
            "vision_feature_layer": [-1, -2],
            "hidden_size": VISION_WIDTH,
            **heads,
            "intermediate_size": 2 * VISION_WIDTH,
            "text_hidden_size": sizes.hidden_size,
        },
        image_start_token_id=ids["<im_start>"],
        low_res_image_start_token_id=ids["<low_res_im_start>"],
        image_end_token_id=ids["<im_end>"],
        image_patch_id=ids[IMAGE_TOKEN],
        frame_start_token_id=ids["<frame_start>"],
        frame_end_token_id=ids["<frame_end>"],
    )
    return instantiate(Molmo2ForConditionalGeneration, config, seed, attn_implementation)
