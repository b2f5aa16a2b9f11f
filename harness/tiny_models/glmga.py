"""Tiny GLM-ga (`Glm46VForConditionalGeneration` under `GlmgaConfig` + `Glm46VProcessor`), built offline.

No checkpoint is named beyond the config docs' zai-org/GLM-4.1V-9B-Thinking. transformers 5.24 ships
``glmga`` as a config and image/video processors only: its model classes
are GLM-4.6V's (the auto mapping sends ``glmga`` to `Glm46VForConditionalGeneration`), its config
is `Glm46VConfig`'s fields under the ``glmga`` model type, and `GlmgaImageProcessor` adds a
``patch_expand_factor`` that multiplies the resize factor (default 1: it stays 14 x 2 = 28 px).
No processor class of its own exists, so `Glm46VProcessor` wraps these, as
GLM-4.6V checkpoints do. Everything else is `glm46v`'s: the tokenizer, template, tiny sizes and a
64x64 image giving 4 visual tokens (resized to 56x56 by the 2 x 56 x 56 px budget, 4x4 patches
merged 2x2). No adapter-table row: the capture derives its adapter from transformers' common
layout.
"""

from __future__ import annotations

from transformers import (
    Glm46VForConditionalGeneration,
    Glm46VProcessor,
    GlmgaConfig,
    GlmgaImageProcessor,
    GlmgaVideoProcessor,
)

from .glm46v import DESCRIPTION, IMAGE_TOKEN, glm_config, glm_processor
from .parts import TextSizes, instantiate

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]


def build_processor() -> Glm46VProcessor:
    """`Glm46VProcessor` over `GlmgaImageProcessor` / `GlmgaVideoProcessor`, as `glm_processor` builds it."""
    return glm_processor(GlmgaImageProcessor, GlmgaVideoProcessor)


def build_model(processor: Glm46VProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Glm46VForConditionalGeneration` of a `GlmgaConfig` from `glm46v.glm_config`
    (`UserInputError` as it raises)."""
    config = glm_config(GlmgaConfig, processor, sizes, "glmga")
    return instantiate(Glm46VForConditionalGeneration, config, seed, attn_implementation)
