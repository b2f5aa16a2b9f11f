"""Tiny GLM-OCR (`GlmOcrForConditionalGeneration` + `Glm46VProcessor`), built offline.

Mirrors zai-org/GLM-OCR in everything but size: the checkpoint's processor is `Glm46VProcessor`
with `Glm46VImageProcessor` (so `glm46v`'s tokenizer, template and tiny processor are reused), its
model GLM-4.1V's layout with a CogViT-style vision tower (no learned position embeddings, only 2-D
RoPE; q/k RMS norms and biases in every attention; 14-px patches merged 2x2 by a strided
convolution, then a merger MLP of width 3 x ``out_hidden_size``) and a small GLM decoder without
q/k/v biases, keeping GLM-4.1V's M-RoPE 8:12:12 over half of each head and its RMS norms after
attention and MLP. A 64x64 image gives 4 visual tokens: the 2 x 56 x 56 px budget (both temporal
copies counted) resizes it to 56x56, 4x4 patches merged 2x2. No adapter-table row: the capture
derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import GlmOcrConfig, GlmOcrForConditionalGeneration, Glm46VProcessor

from .glm46v import DESCRIPTION as GLM46V_DESCRIPTION
from .glm46v import IMAGE_TOKEN, build_processor, glm_config
from .parts import TextSizes, instantiate

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

DESCRIPTION = {**GLM46V_DESCRIPTION, "model_class": "GlmOcrForConditionalGeneration"}


def build_model(processor: Glm46VProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `GlmOcrForConditionalGeneration` from `glm46v.glm_config` (`UserInputError` as it
    raises: GLM-OCR's text config has no head_dim of its own either)."""
    config = glm_config(GlmOcrConfig, processor, sizes, "glm_ocr")
    return instantiate(GlmOcrForConditionalGeneration, config, seed, attn_implementation)
