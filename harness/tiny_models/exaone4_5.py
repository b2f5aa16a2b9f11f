"""Tiny EXAONE 4.5 (`Exaone4_5_ForConditionalGeneration` + `Exaone4_5_Processor`), built offline.

Mirrors LGAI-EXAONE/EXAONE-4.5-33B in everything but size: Qwen2-VL's image processor (14-px
patches merged 2x2, one visual token per 28x28 px), a Qwen2.5-VL-style vision tower (windowed
attention with full-attention blocks, RMS-normed merger) whose attention has grouped KV heads and
2-D axial RoPE, and an EXAONE 4 decoder: q/k RMS norms, RMS norms after attention and MLP, 3
sliding-window layers with RoPE then one full-attention layer without positional encoding
(window 32 tokens here so that test prompts cross it). Unlike Qwen2-VL the decoder takes plain
1-D positions (no M-RoPE). EXAONE's turns (``[|user|]...[|endofturn|]\\n``); images written as
``<|vision_start|><|image_pad|><|vision_end|>`` (the processor's image token; the markers are not
in the config). A 64x64 image gives 4 visual tokens (resized to 56x56, 4x4 patches merged 2x2).
No adapter-table row: the capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Exaone4_5_Config,
    Exaone4_5_ForConditionalGeneration,
    Exaone4_5_Processor,
    Qwen2VLVideoProcessor,
)

from .parts import TextSizes, instantiate
from .qwen2_5_vl import DESCRIPTION as QWEN2_5_VL_DESCRIPTION
from .qwen3_vl import IMAGE_TOKEN, MERGE_SIZE, VISION_MARKUP, qwen_image_processor
from .tokenizer import train_bpe_tokenizer

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

SPECIAL_TOKENS = (
    "[PAD]", "[BOS]", "[|endofturn|]", "[|system|]", "[|user|]", "[|assistant|]",
    "<|vision_start|>", "<|vision_end|>", IMAGE_TOKEN, "<|video_pad|>",
)
PATCH_SIZE = 14
SLIDING_WINDOW = 32
GLOBAL_EVERY = 4  # the checkpoint's "LLLG": 3 sliding-window layers, then a global one

# The real template's turn structure, without its reasoning, tool and video branches.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '[|' + message['role'] + '|]' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '" + VISION_MARKUP + "' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '[|endofturn|]\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '[|assistant|]' }}{%- endif %}"
)

DESCRIPTION = {
    **QWEN2_5_VL_DESCRIPTION,
    "model_class": "Exaone4_5_ForConditionalGeneration",
    "processor_class": "Exaone4_5_Processor",
}


def build_processor() -> Exaone4_5_Processor:
    """EXAONE 4.5 processor with a freshly trained tokenizer (eos ``[|endofturn|]``, pad ``[PAD]``);
    images capped at 56x56 px (4 tokens)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS, chat_template=CHAT_TEMPLATE, bos_token="[BOS]", eos_token="[|endofturn|]", pad_token="[PAD]"
    )
    return Exaone4_5_Processor(
        image_processor=qwen_image_processor(PATCH_SIZE),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(patch_size=PATCH_SIZE, merge_size=MERGE_SIZE),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: Exaone4_5_Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Exaone4_5_ForConditionalGeneration` with `sizes` and the processor's token ids;
    vision tower of 2 blocks of width 32 (2 query heads sharing 1 KV head; block 1 full attention,
    block 0 windows of 56 px) merged 2x2 into ``hidden_size``."""
    tokenizer = processor.tokenizer
    layer_types = [
        "full_attention" if (layer + 1) % GLOBAL_EVERY == 0 else "sliding_attention"
        for layer in range(sizes.num_hidden_layers)
    ]
    config = Exaone4_5_Config(
        text_config={
            **sizes.typed_text_config("exaone4", tokenizer, rope_theta=1_000_000.0),
            "sliding_window": SLIDING_WINDOW,
            "layer_types": layer_types,
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "num_key_value_heads": 1,
            "patch_size": PATCH_SIZE,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
            "window_size": 2 * PATCH_SIZE * MERGE_SIZE,
            "fullatt_block_indexes": [1],
            "out_hidden_size": sizes.hidden_size,
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        video_token_id=tokenizer.convert_tokens_to_ids("<|video_pad|>"),
    )
    return instantiate(Exaone4_5_ForConditionalGeneration, config, seed, attn_implementation)
