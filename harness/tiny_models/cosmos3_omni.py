"""Tiny Cosmos3 Reasoner (`Cosmos3OmniForConditionalGeneration` + `Qwen3VLProcessor`), built offline.

Mirrors the reasoner of nvidia/Cosmos3-Nano in everything but size: transformers keeps only its
vision-language part (the generator, sound and action towers of the unified checkpoint are dropped
on load), which is Qwen3-VL's: a Qwen3-VL vision tower (16-px patches merged 2x2, DeepStack
features added to the first decoder layers), a Qwen3-VL decoder with interleaved M-RoPE, and the
checkpoint's processor parts (Qwen2-VL image processor, Qwen3-VL video processor, Qwen2 tokenizer;
transformers registers no processor class of its own, so Qwen3-VL's is used). ChatML template,
images written as ``<|vision_start|><|image_pad|><|vision_end|>``. A 64x64 image gives 4 visual
tokens (64x64 px is 4x4 patches, merged 2x2). No adapter-table row: the capture derives its adapter
from transformers' common layout.
"""

from __future__ import annotations

from transformers import Cosmos3OmniConfig, Cosmos3OmniForConditionalGeneration, Qwen3VLProcessor

from .parts import TextSizes, instantiate
from .qwen3_vl import DESCRIPTION as QWEN3_VL_DESCRIPTION
from .qwen3_vl import IMAGE_TOKEN, build_processor, qwen3_vl_config

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

DESCRIPTION = {**QWEN3_VL_DESCRIPTION, "model_class": "Cosmos3OmniForConditionalGeneration"}


def build_model(processor: Qwen3VLProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Cosmos3OmniForConditionalGeneration` with `sizes` and the processor's token ids: the
    tiny Qwen3-VL vision tower (DeepStack into decoder layer 0) and interleaved M-RoPE 24:20:20."""
    config = qwen3_vl_config(Cosmos3OmniConfig, processor, sizes)
    return instantiate(Cosmos3OmniForConditionalGeneration, config, seed, attn_implementation)
