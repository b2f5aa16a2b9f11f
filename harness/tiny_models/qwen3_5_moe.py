"""Tiny Qwen3.5-MoE (`Qwen3_5MoeForConditionalGeneration` + `Qwen3VLProcessor`), built offline.

Mirrors Qwen/Qwen3.5-397B-A17B in everything but size: `qwen3_5`'s processor, vision tower and
hybrid decoder (Gated DeltaNet layers, gated softmax attention in every 2nd layer here, every 4th
in the checkpoint), with every layer's MLP a sparse mixture of experts plus a shared expert (here
4 experts of width `hidden_size`, top-2; the checkpoint has 512, top-10). A 64x64 image gives 4
visual tokens.
"""

from __future__ import annotations

from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration, Qwen3VLProcessor

from .parts import TextSizes, instantiate
from .qwen3_5 import DESCRIPTION as QWEN3_5_DESCRIPTION
from .qwen3_5 import IMAGE_TOKEN, build_processor, qwen3_5_config

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

DESCRIPTION = {**QWEN3_5_DESCRIPTION, "model_class": "Qwen3_5MoeForConditionalGeneration"}


def build_model(processor: Qwen3VLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Qwen3_5MoeForConditionalGeneration` with `sizes`: each layer routes a token to 2 of
    4 experts (width ``hidden_size``) beside a shared expert of the same width."""
    config = qwen3_5_config(Qwen3_5MoeConfig, processor, sizes, num_experts=4, num_experts_per_tok=2,
                            moe_intermediate_size=sizes.hidden_size,
                            shared_expert_intermediate_size=sizes.hidden_size)
    return instantiate(Qwen3_5MoeForConditionalGeneration, config, seed, attn_implementation)
