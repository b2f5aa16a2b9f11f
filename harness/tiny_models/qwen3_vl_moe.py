"""Tiny Qwen3-VL-MoE (`Qwen3VLMoeForConditionalGeneration` + `Qwen3VLProcessor`), built offline.

Mirrors Qwen/Qwen3-VL-30B-A3B-Instruct in everything but size: Qwen3-VL's processor, template,
vision tower (16-px patches merged 2x2, DeepStack) and interleaved M-RoPE, with every decoder
layer's MLP a sparse mixture of experts (here 4 experts of width `hidden_size`, top-2 routing with
renormalised weights; the checkpoint has 128 experts, top-8). Attention is Qwen3-VL's (q/k RMS
norms, GQA), so heads are captured as there. A 64x64 image gives 4 visual tokens. No adapter-table
row: the capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration, Qwen3VLProcessor

from .parts import TextSizes, instantiate
from .qwen3_vl import DESCRIPTION as QWEN3_VL_DESCRIPTION
from .qwen3_vl import IMAGE_TOKEN, build_processor, qwen3_vl_config

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

NUM_EXPERTS = 4
EXPERTS_PER_TOKEN = 2

DESCRIPTION = {**QWEN3_VL_DESCRIPTION, "model_class": "Qwen3VLMoeForConditionalGeneration"}


def build_model(processor: Qwen3VLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Qwen3VLMoeForConditionalGeneration` with `sizes` and the processor's token ids; every
    decoder layer routes each token to 2 of 4 experts (MLP width ``hidden_size``), input and output
    embeddings untied as in the checkpoint."""
    config = qwen3_vl_config(
        Qwen3VLMoeConfig,
        processor,
        sizes,
        num_experts=NUM_EXPERTS,
        num_experts_per_tok=EXPERTS_PER_TOKEN,
        moe_intermediate_size=sizes.hidden_size,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        tie_word_embeddings=False,
    )
    return instantiate(Qwen3VLMoeForConditionalGeneration, config, seed, attn_implementation)
