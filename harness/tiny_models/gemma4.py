"""Tiny Gemma 4 (`Gemma4ForConditionalGeneration` + `Gemma4Processor`), built offline.

Mirrors google/gemma-4-E2B-it in everything but size: Gemma 4 vision tower (learned 2-D patch
positions, 16-px patches average-pooled 3x3 into soft tokens, aspect ratio kept within a budget of
70 soft tokens, the smallest the processor allows), an RMS-normed projection, and a Gemma 4
language model whose layers differ by kind: sliding-window layers (window 32 tokens here, so it
binds in short test prompts) of ``head_dim`` interleaved with full-attention layers of twice that
width (``global_head_dim``, as the real 256 / 512) and proportional RoPE on a quarter of it;
per-layer input embeddings (PLE) added after every layer; the second half of the layers reusing
the keys and values of the last earlier layer of their kind (KV sharing, no k_proj of their own);
final-logit soft-capping. Vision tokens attend bidirectionally within their image
(``use_bidirectional_attention="vision"``, which transformers leaves off for the smaller
checkpoints; set here so the capture reads such a mask too). The chat template writes turns
``<|turn>user\\n ... <turn|>\\n`` with text items trimmed and ``<|image|>`` per image, which the
processor expands to ``<|image>`` + ``<|image|>`` x soft tokens + ``<image|>``. A 64x64 image is
resized to 384x384 px: 24x24 patches, 64 soft tokens. No adapter-table row: the capture derives
its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Gemma4AudioFeatureExtractor,
    Gemma4Config,
    Gemma4ForConditionalGeneration,
    Gemma4ImageProcessor,
    Gemma4Processor,
    Gemma4VideoProcessor,
)

from .gemma3 import SLIDING_WINDOW, gemma_tokenizer, interleaved_layer_types
from .parts import TextSizes, instantiate

IMAGE_TOKEN = "<|image|>"
MARKERS = {
    "image_token": IMAGE_TOKEN,
    "boi_token": "<|image>",
    "eoi_token": "<image|>",
    "audio_token": "<|audio|>",
    "boa_token": "<|audio>",
    "eoa_token": "<audio|>",
}
VIDEO_TOKEN = "<|video|>"
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>", *MARKERS.values(), VIDEO_TOKEN)
PATCH_SIZE = 16
POOLING = 3
SOFT_TOKEN_BUDGET = 70
GLOBAL_LAYER_EVERY = 2  # with KV sharing over the second half, both kinds must occur in the first
PER_LAYER_INPUT = 8

CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|turn>system\\n' }}"
    "{%- if messages[0]['content'] is string -%}{{- messages[0]['content'] | trim }}"
    "{%- else -%}{{- messages[0]['content'][0]['text'] | trim }}{%- endif -%}"
    "{{- '<turn|>\\n' }}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<|turn>' + role + '\\n' }}"
    "{%- if message['content'] is string -%}{{- message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{- '<|image|>' }}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<turn|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' }}{%- endif -%}"
)

DESCRIPTION = {
    "model_class": "Gemma4ForConditionalGeneration",
    "processor_class": "Gemma4Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_position_ids) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (pooled, normed, "
        "projected soft tokens in input-embedding space; padding patches dropped)"
    ),
    "extra_tokens_per_image": "<|image> before and <image|> after each run of <|image|>",
    "image_span": "one contiguous run of the image token per image",
}


def gemma4_processor(processor_class, feature_extractor_class, image_processor_class, video_processor_class):
    """`processor_class` (Gemma 4 or Gemma 4 Unified) from its parts' classes, a freshly trained
    Gemma 4 tokenizer, and images resized (aspect ratio kept) to at most `SOFT_TOKEN_BUDGET` soft
    tokens of `POOLING` x `POOLING` pooled `PATCH_SIZE`-px patches."""
    tokenizer = gemma_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE, MARKERS, eos_token="<turn|>")
    sizes = {"patch_size": PATCH_SIZE, "max_soft_tokens": SOFT_TOKEN_BUDGET, "pooling_kernel_size": POOLING}
    return processor_class(
        feature_extractor=feature_extractor_class(),
        image_processor=image_processor_class(**sizes),
        tokenizer=tokenizer,
        video_processor=video_processor_class(**sizes),
        chat_template=CHAT_TEMPLATE,
        image_seq_length=SOFT_TOKEN_BUDGET,
    )


def build_processor() -> Gemma4Processor:
    """Gemma 4 processor (`gemma4_processor`): 64 soft tokens for a 64x64 image."""
    return gemma4_processor(Gemma4Processor, Gemma4AudioFeatureExtractor, Gemma4ImageProcessor, Gemma4VideoProcessor)


def build_model(processor: Gemma4Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Gemma4ForConditionalGeneration` with `sizes`: every 2nd layer full attention of
    ``global_head_dim = 2 * head_dim``, the last half of the layers KV-shared, PLE of width 8; a
    vision tower of 1 layer of width 32 (2 heads)."""
    tokenizer = processor.tokenizer
    layers = sizes.num_hidden_layers
    config = Gemma4Config(
        text_config=sizes.text_config(
            tokenizer,
            eos_token_id=tokenizer.eos_token_id,
            global_head_dim=2 * sizes.head_dim,
            sliding_window=SLIDING_WINDOW,
            layer_types=interleaved_layer_types(layers, GLOBAL_LAYER_EVERY),
            num_kv_shared_layers=layers // 2,
            hidden_size_per_layer_input=PER_LAYER_INPUT,
            vocab_size_per_layer_input=len(tokenizer),
            final_logit_softcapping=30.0,
            use_bidirectional_attention="vision",
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1_000_000.0},
            },
        ),
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "patch_size": PATCH_SIZE,
            "pooling_kernel_size": POOLING,
            "position_embedding_size": 256,
        },
        audio_config=None,
        **{name: tokenizer.convert_tokens_to_ids(MARKERS[token]) for name, token in (
            ("image_token_id", "image_token"), ("boi_token_id", "boi_token"), ("eoi_token_id", "eoi_token"),
            ("audio_token_id", "audio_token"), ("boa_token_id", "boa_token"), ("eoa_token_index", "eoa_token"))},
        video_token_id=tokenizer.convert_tokens_to_ids(VIDEO_TOKEN),
    )
    return instantiate(Gemma4ForConditionalGeneration, config, seed, attn_implementation)
