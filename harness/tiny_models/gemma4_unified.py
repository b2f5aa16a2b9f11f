"""Tiny Gemma 4 Unified (`Gemma4UnifiedForConditionalGeneration` + `Gemma4UnifiedProcessor`), built offline.

Mirrors google/gemma-4-12B-it (the encoder-free Gemma 4) in everything but size: no vision tower;
each 48x48 px patch (3x3 merged 16-px patches) is one soft token, embedded by LayerNorm -> Dense
-> LayerNorm, a factorized 2-D position table, LayerNorm, RMSNorm and a projection into the
language model; a Gemma 4 language model whose sliding-window layers (window 32 tokens here, so it
binds in short test prompts) of ``head_dim`` interleave with full-attention layers of twice that
width (``global_head_dim``) and proportional RoPE on a quarter of it; vision tokens attend
bidirectionally within their image (``use_bidirectional_attention="vision"``, the default). The
tokenizer, chat template and image markup are Gemma 4's (`harness.tiny_models.gemma4`): each
``<|image|>`` expands to ``<|image>`` + ``<|image|>`` x soft tokens + ``<image|>``. The image
processor keeps the aspect ratio within a budget of 70 soft tokens (the smallest it allows): a
64x64 image is resized to 384x384 px, 8x8 merged patches, 64 soft tokens. No adapter-table row:
the capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Gemma4UnifiedAudioFeatureExtractor,
    Gemma4UnifiedConfig,
    Gemma4UnifiedForConditionalGeneration,
    Gemma4UnifiedImageProcessor,
    Gemma4UnifiedProcessor,
    Gemma4UnifiedVideoProcessor,
)

from .gemma3 import SLIDING_WINDOW, interleaved_layer_types
from .gemma4 import GLOBAL_LAYER_EVERY, IMAGE_TOKEN, MARKERS, PATCH_SIZE, POOLING
from .gemma4 import DESCRIPTION as GEMMA4_DESCRIPTION
from .gemma4 import VIDEO_TOKEN, gemma4_processor
from .parts import TextSizes, instantiate

EMBED_WIDTH = 32
POSITIONS = 64  # rows of the per-axis position table: up to 64 merged patches per side

DESCRIPTION = {
    **GEMMA4_DESCRIPTION,
    "model_class": "Gemma4UnifiedForConditionalGeneration",
    "processor_class": "Gemma4UnifiedProcessor",
    "image_features": (
        "model.get_image_features(pixel_values, image_position_ids) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (embedded, "
        "projected 48-px patches in input-embedding space; padding patches dropped)"
    ),
}


def build_processor() -> Gemma4UnifiedProcessor:
    """Gemma 4 Unified processor (`gemma4.gemma4_processor`): 64 soft tokens for a 64x64 image."""
    return gemma4_processor(Gemma4UnifiedProcessor, Gemma4UnifiedAudioFeatureExtractor, Gemma4UnifiedImageProcessor,
                            Gemma4UnifiedVideoProcessor)


def build_model(processor: Gemma4UnifiedProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Gemma4UnifiedForConditionalGeneration` with `sizes`: every 2nd layer full attention of
    ``global_head_dim = 2 * head_dim``; a patch embedder of width 32; no audio embedder."""
    tokenizer = processor.tokenizer
    config = Gemma4UnifiedConfig(
        text_config=sizes.text_config(
            tokenizer,
            eos_token_id=tokenizer.eos_token_id,
            global_head_dim=2 * sizes.head_dim,
            sliding_window=SLIDING_WINDOW,
            layer_types=interleaved_layer_types(sizes.num_hidden_layers, GLOBAL_LAYER_EVERY),
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1_000_000.0},
            },
        ),
        vision_config={
            "patch_size": PATCH_SIZE,
            "pooling_kernel_size": POOLING,
            "mm_embed_dim": EMBED_WIDTH,
            "output_proj_dims": EMBED_WIDTH,
            "mm_posemb_size": POSITIONS,
        },
        audio_config=None,
        **{name: tokenizer.convert_tokens_to_ids(MARKERS[token]) for name, token in (
            ("image_token_id", "image_token"), ("boi_token_id", "boi_token"), ("eoi_token_id", "eoi_token"),
            ("audio_token_id", "audio_token"), ("boa_token_id", "boa_token"), ("eoa_token_index", "eoa_token"))},
        video_token_id=tokenizer.convert_tokens_to_ids(VIDEO_TOKEN),
    )
    return instantiate(Gemma4UnifiedForConditionalGeneration, config, seed, attn_implementation)
