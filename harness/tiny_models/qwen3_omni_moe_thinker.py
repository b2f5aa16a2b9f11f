"""Tiny Qwen3-Omni-MoE Thinker (`Qwen3OmniMoeThinkerForConditionalGeneration` + `Qwen3OmniMoeProcessor`),
built offline.

Mirrors the thinker (the text-generating half) of Qwen/Qwen3-Omni-30B-A3B-Instruct in everything
but size: ChatML template without a default system prompt, images written as
``<|vision_start|><|image_pad|><|vision_end|>`` (audio as ``<|audio_start|><|audio_pad|><|audio_end|>``),
Qwen3-VL's vision tower (16-px patches merged 2x2, one visual token per 32x32 px, learned position
embeddings, DeepStack features added to the first decoder layer), a Whisper-style audio tower
(1 layer of width 32 here; unused by image prompts), and a decoder of Qwen3 attention (q/k RMS
norms, GQA) with interleaved M-RoPE 24:20:20 whose every MLP is a sparse mixture of experts (4
experts, top-2, here; 128, top-8, in the checkpoint). The talker and code2wav halves are not built.
A 64x64 image gives 4 visual tokens (4x4 16-px patches, 2x2 after the merge). No adapter-table row:
the capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Qwen3OmniMoeProcessor,
    Qwen3OmniMoeThinkerConfig,
    Qwen3OmniMoeThinkerForConditionalGeneration,
)

from .parts import TextSizes, chatml_template, instantiate
from .qwen2_5_omni_thinker import omni_audio_config, omni_processor, omni_token_ids, omni_tokenizer
from .qwen3_vl import DESCRIPTION as QWEN3_VL_DESCRIPTION
from .qwen3_vl import IMAGE_TOKEN, PATCH_SIZE, VISION_MARKUP, mrope_section, qwen_vision_config

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

# The Omni processors' tokenizer attributes, with Qwen3-Omni's tokens (Qwen3's vision and audio pads).
OMNI_TOKENS = {
    "image_token": IMAGE_TOKEN,
    "audio_token": "<|audio_pad|>",
    "video_token": "<|video_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}
NUM_EXPERTS = 4
EXPERTS_PER_TOKEN = 2

DESCRIPTION = {
    **QWEN3_VL_DESCRIPTION,
    "model_class": "Qwen3OmniMoeThinkerForConditionalGeneration",
    "processor_class": "Qwen3OmniMoeProcessor",
}


def build_processor() -> Qwen3OmniMoeProcessor:
    """Qwen3-Omni processor with a freshly trained tokenizer; images capped at 64x64 px (4 tokens)."""
    return omni_processor(Qwen3OmniMoeProcessor, PATCH_SIZE, omni_tokenizer(OMNI_TOKENS, chatml_template(VISION_MARKUP)))


def build_model(processor: Qwen3OmniMoeProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Qwen3OmniMoeThinkerForConditionalGeneration` with `sizes` and the processor's token
    ids; every decoder layer routes each token to 2 of 4 experts (MLP width ``hidden_size``); vision
    tower as the tiny Qwen3-VL's (DeepStack into layer 0), audio tower of 1 layer of width 32."""
    config = Qwen3OmniMoeThinkerConfig(
        text_config=sizes.text_config(
            processor.tokenizer,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0,
                             "mrope_section": mrope_section(sizes.head_dim, spatial_share=20),
                             "mrope_interleaved": True},
            num_experts=NUM_EXPERTS,
            num_experts_per_tok=EXPERTS_PER_TOKEN,
            moe_intermediate_size=sizes.hidden_size,
        ),
        vision_config=qwen_vision_config(
            PATCH_SIZE, sizes.hidden_size, num_position_embeddings=16, deepstack_visual_indexes=[0]
        ),
        audio_config=omni_audio_config(sizes.hidden_size, downsample_hidden_size=32),
        **omni_token_ids(processor.tokenizer),
    )
    return instantiate(Qwen3OmniMoeThinkerForConditionalGeneration, config, seed, attn_implementation)
