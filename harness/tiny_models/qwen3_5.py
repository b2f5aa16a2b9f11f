"""Tiny Qwen3.5 (`Qwen3_5ForConditionalGeneration` + `Qwen3VLProcessor`), built offline.

Mirrors Qwen/Qwen3.5-27B in everything but size: Qwen3-VL's processor, ChatML template and image
markup (16-px patches merged 2x2: a 64x64 image gives 4 visual tokens), a vision tower without
DeepStack, and a hybrid decoder. Most layers are Gated DeltaNet linear attention (``linear_attn``:
no softmax, no heads to capture); the others are softmax attention (``self_attn``) whose
``q_proj`` forms each head's query and its output gate (2 x head_dim per head), with q/k RMS norms,
GQA and interleaved M-RoPE on a quarter of each head (partial_rotary_factor 0.25; the checkpoint's
11:11:10 sections, here 1:1:0 of the 2 rotated pairs of a 16-wide head).

The checkpoint puts softmax attention in every 4th layer; this model in every 2nd
(``full_attention_interval`` 2), so the default 4 layers hold 2 attention layers (model layers 1
and 3), which the capture's grid rows 0 and 1 are.
"""

from __future__ import annotations

from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration, Qwen3VLProcessor

from .parts import TextSizes, instantiate
from .qwen3_vl import DESCRIPTION as QWEN3_VL_DESCRIPTION
from .qwen3_vl import IMAGE_TOKEN, PATCH_SIZE, build_processor, qwen_token_ids, qwen_vision_config

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

FULL_ATTENTION_INTERVAL = 2
LINEAR_HEADS = {"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4}

DESCRIPTION = {
    **QWEN3_VL_DESCRIPTION,
    "model_class": "Qwen3_5ForConditionalGeneration",
    "o_proj": "self_attn.o_proj",  # in the attention layers; the linear-attention ones hold linear_attn
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (merger output)"
    ),
}


def layer_types(num_layers: int) -> list[str]:
    """``linear_attention`` in each layer but every `FULL_ATTENTION_INTERVAL`-th, as Qwen3.5 writes them."""
    return ["full_attention" if (index + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
            for index in range(num_layers)]


def qwen3_5_config(config_class, processor: Qwen3VLProcessor, sizes: TextSizes, **text_extra):
    """A `config_class` (Qwen3.5 or Qwen3.5-MoE) with `sizes`, the processor's token ids, the tiny
    Qwen vision tower and the hybrid `layer_types`; `text_extra` adds text-config keys (MoE sizes)."""
    tokenizer = processor.tokenizer
    rope = {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [1, 1, 0], "mrope_interleaved": True}
    return config_class(
        text_config=sizes.text_config(tokenizer, rope_parameters=rope, layer_types=layer_types(sizes.num_hidden_layers),
                                      **LINEAR_HEADS, **text_extra),
        vision_config=qwen_vision_config(PATCH_SIZE, sizes.hidden_size, num_position_embeddings=16),
        **qwen_token_ids(tokenizer),
    )


def build_model(processor: Qwen3VLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Qwen3_5ForConditionalGeneration` with `sizes` (linear attention in layers 0, 2, ...)."""
    config = qwen3_5_config(Qwen3_5Config, processor, sizes)
    return instantiate(Qwen3_5ForConditionalGeneration, config, seed, attn_implementation)
