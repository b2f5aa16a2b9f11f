"""Tiny GLM-4.5V (`Glm4vMoeForConditionalGeneration` + `Glm4vProcessor`), built offline.

Mirrors zai-org/GLM-4.5V in everything but size: GLM-4.1V's processor, template and vision tower
(14-px patches merged 2x2 by a strided convolution, learned positions interpolated to each grid),
with the GLM-4.5-Air text decoder: M-RoPE 8:12:12 over half of each head, q/k/v biases, no extra
RMS norms after attention and MLP (unlike GLM-4.1V), the first layer a dense MLP and every later
one a sigmoid-routed mixture of experts plus one shared expert (here 4 routed experts of width
`hidden_size`, top-2 with renormalised weights; the checkpoint has 128, top-8). A 64x64 image
gives 4 visual tokens: the 2 x 56 x 56 px budget (both temporal copies counted) resizes it to
56x56, 4x4 patches merged 2x2. No adapter-table row: the capture derives its adapter from
transformers' common layout.
"""

from __future__ import annotations

from transformers import Glm4vMoeConfig, Glm4vMoeForConditionalGeneration, Glm4vProcessor

from . import glm4v
from .glm46v import glm_config
from .parts import TextSizes, instantiate

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

IMAGE_TOKEN = glm4v.IMAGE_TOKEN
NUM_EXPERTS = 4
EXPERTS_PER_TOKEN = 2

DESCRIPTION = {**glm4v.DESCRIPTION, "model_class": "Glm4vMoeForConditionalGeneration"}


def build_processor() -> Glm4vProcessor:
    """The `glm4v` processor (GLM-4.5V ships GLM-4.1V's processor classes)."""
    return glm4v.build_processor()


def build_model(processor: Glm4vProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Glm4vMoeForConditionalGeneration` from `glm46v.glm_config`: layer 0 dense, later
    layers route each token to 2 of 4 experts (width ``hidden_size``) beside one shared expert
    (`UserInputError` as `glm_config` raises)."""
    config = glm_config(
        Glm4vMoeConfig, processor, sizes, "glm4v_moe",
        n_routed_experts=NUM_EXPERTS,
        num_experts_per_tok=EXPERTS_PER_TOKEN,
        moe_intermediate_size=sizes.hidden_size,
        n_shared_experts=1,
        first_k_dense_replace=1,
    )
    return instantiate(Glm4vMoeForConditionalGeneration, config, seed, attn_implementation)
