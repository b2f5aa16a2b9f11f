"""Tiny LFM3-VL (`Lfm3VlForConditionalGeneration` + `Lfm3VlProcessor`), built offline.

Mirrors LiquidAI/LFM3-VL-2B in everything but size. The processor is Qwen3-VL's (Qwen2-VL image
processor: 16-px patches merged 2x2, one visual token per 32x32 px, no tiling) and writes only
the ``<|image_pad|>`` run; the LFM ChatML template opened by ``<|startoftext|>`` writes
``<|vision_start|><|image_pad|><|vision_end|>`` per image in place. The vision tower is LFM3's own
(gated depthwise 2D convolutions and axial-RoPE attention over each image's patch grid; here
layers conv, attention). The decoder is hybrid LFM3: gated short-convolution layers (``conv``, no
heads) and softmax attention layers (``self_attn``: q/k RMS norms, GQA, a per-head sigmoid output
gate ``g_proj`` applied before ``o_proj``, sandwich norms), full attention with proportional RoPE
on half of each head alternating with sliding-window attention (window 256) with plain RoPE, and
1-D positions. The checkpoint puts attention in every 2nd layer from layer 2 (full at 2, 6, ...,
sliding at 4, 8, ...); this model from layer 1 (full at 1, 5, ..., sliding at 3, 7, ...), so the
default 4 layers are conv, full, conv, sliding: 2 attention layers. The token strings are the
processor's defaults (the real ids 125009/125010/125030 are not those of this tokenizer).

A 64x64 image gives 4 visual tokens: it stays 64x64 (within the 1-4 token pixel budget), 4x4
patches of 16 px, merged 2x2.
"""

from __future__ import annotations

from transformers import Lfm3VlConfig, Lfm3VlForConditionalGeneration, Lfm3VlProcessor, Qwen3VLVideoProcessor

from .parts import TINY_VISION_TOWER, TextSizes, chatml_template, instantiate
from .qwen3_vl import DESCRIPTION as QWEN3_VL_DESCRIPTION
from .qwen3_vl import IMAGE_TOKEN, MERGE_SIZE, PATCH_SIZE, VISION_MARKUP, qwen_image_processor, qwen_token_ids
from .tokenizer import train_bpe_tokenizer

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

SPECIAL_TOKENS = ("<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
                  "<|vision_start|>", "<|vision_end|>", IMAGE_TOKEN, "<|video_pad|>")
CHAT_TEMPLATE = "{{- bos_token }}" + chatml_template(VISION_MARKUP)

DESCRIPTION = {
    **QWEN3_VL_DESCRIPTION,
    "model_class": "Lfm3VlForConditionalGeneration",
    "processor_class": "Lfm3VlProcessor",
    "o_proj": "self_attn.o_proj",  # in the attention layers; the convolution layers hold conv
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (projector output, "
        "in input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / 4)"
    ),
}


def layer_types(num_layers: int) -> list[str]:
    """``conv`` in even layers; odd layers alternate ``full_attention`` and ``sliding_attention``
    (LFM3's pattern shifted one layer earlier)."""
    return ["conv" if index % 2 == 0 else "full_attention" if index % 4 == 1 else "sliding_attention"
            for index in range(num_layers)]


def build_processor() -> Lfm3VlProcessor:
    """LFM3-VL processor with a freshly trained tokenizer (BOS written by the template); images
    resized to 1-4 visual tokens of 2x2-merged 16-px patches."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS,
        chat_template=CHAT_TEMPLATE,
        bos_token="<|startoftext|>",
        add_bos=True,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
    )
    return Lfm3VlProcessor(
        image_processor=qwen_image_processor(PATCH_SIZE),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(patch_size=PATCH_SIZE, merge_size=MERGE_SIZE),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: Lfm3VlProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Lfm3VlForConditionalGeneration` with `sizes` (hybrid `layer_types`, LFM3's default
    per-type RoPE), the processor's token ids and a 2-layer vision tower of width 32 (conv, attention)."""
    tokenizer = processor.tokenizer
    config = Lfm3VlConfig(
        text_config={"model_type": "lfm3",
                     **sizes.text_config(tokenizer, layer_types=layer_types(sizes.num_hidden_layers))},
        vision_config={
            **TINY_VISION_TOWER,
            "num_key_value_heads": 1,
            "layer_types": ["conv", "full_attention"],
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
        },
        projector_hidden_size=2 * sizes.hidden_size,
        **qwen_token_ids(tokenizer),
    )
    return instantiate(Lfm3VlForConditionalGeneration, config, seed, attn_implementation)
