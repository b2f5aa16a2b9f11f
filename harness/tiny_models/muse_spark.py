"""Tiny Muse Spark (`MuseSparkForConditionalGeneration` + `MuseSparkProcessor`), built offline.

Mirrors meta-models/Muse-Spark-Open-816B-A42B in everything but size: Muse Glimmer's image
processor, vision tower, adapter and template (`muse_glimmer`), a decoder whose every MLP is a
mixture of experts (here 4 experts, top-2; the checkpoint has 256, top-8) run in a projected,
centered-RMS-normed expert space, and an audio tower (a pyramid of causal convolutions; here 2
stages of width 8 and 16) whose tokens the processor's feature extractor sizes. Attention is Muse
Glimmer's: weight-less q/k norm, queries scaled by ``qk_scale_factor``, per-head sigmoid output
gate before o_proj, 3 sliding-window RoPE layers then a full-attention NoPE layer. A 64x64 image
gives 4 visual tokens (the 2x2 grid of 28-px blocks, at the 4-token cap). No adapter-table row: the
capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    MuseSparkConfig,
    MuseSparkFeatureExtractor,
    MuseSparkForConditionalGeneration,
    MuseSparkProcessor,
)

from .muse_glimmer import (
    CHAT_TEMPLATE,
    IMAGE_TOKEN,
    SPECIAL_TOKENS,
    muse_config_kwargs,
    muse_tokenizer,
    muse_vision_parts,
)
from .muse_glimmer import DESCRIPTION as MUSE_GLIMMER_DESCRIPTION
from .parts import TextSizes, instantiate

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

AUDIO_TOKENS = ("<|audio|>", "<|soft_audio_start|>", "<|soft_audio_end|>")
NUM_EXPERTS = 4
EXPERTS_PER_TOKEN = 2

DESCRIPTION = {**MUSE_GLIMMER_DESCRIPTION, "model_class": "MuseSparkForConditionalGeneration",
               "processor_class": "MuseSparkProcessor"}


def build_processor() -> MuseSparkProcessor:
    """Muse Spark processor with a freshly trained tokenizer (Muse Glimmer's tokens plus the audio
    markers), Muse Glimmer's image/video processors and the default audio feature extractor."""
    image_processor, video_processor = muse_vision_parts()
    return MuseSparkProcessor(
        image_processor=image_processor,
        video_processor=video_processor,
        tokenizer=muse_tokenizer((*SPECIAL_TOKENS, *AUDIO_TOKENS)),
        feature_extractor=MuseSparkFeatureExtractor(),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: MuseSparkProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `MuseSparkForConditionalGeneration` with `sizes` and the processor's token ids: Muse
    Glimmer's tiny vision tower, 4 experts of width ``hidden_size`` in an expert space of width
    ``hidden_size``, and a 2-stage audio tower projecting into ``hidden_size``."""
    kwargs = muse_config_kwargs(processor, sizes)
    kwargs["text_config"].update(
        num_local_experts=NUM_EXPERTS, num_experts_per_tok=EXPERTS_PER_TOKEN,
        moe_intermediate_size=sizes.hidden_size, moe_hidden_size=sizes.hidden_size,
    )
    config = MuseSparkConfig(
        **kwargs,
        audio_config={
            "patch_sizes": [40, 48], "hidden_sizes": [8, 16], "depths": [1, 1], "num_hidden_layers": 2,
            "out_hidden_size": sizes.hidden_size,
        },
        audio_token_id=processor.tokenizer.convert_tokens_to_ids("<|audio|>"),
    )
    return instantiate(MuseSparkForConditionalGeneration, config, seed, attn_implementation)
