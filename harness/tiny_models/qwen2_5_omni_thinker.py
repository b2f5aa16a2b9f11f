"""Tiny Qwen2.5-Omni Thinker (`Qwen2_5OmniThinkerForConditionalGeneration` + `Qwen2_5OmniProcessor`),
built offline.

Mirrors the thinker (the text-generating half) of Qwen/Qwen2.5-Omni-7B in everything but size:
ChatML template with the default system prompt "You are a helpful assistant.", images written as
``<|vision_bos|><|IMAGE|><|vision_eos|>`` (Omni's own token names), Qwen2.5-VL's vision tower
(14-px patches merged 2x2, one visual token per 28x28 px, windowed attention with a full-attention
block), a Whisper-style audio tower (1 layer of width 32 here; unused by image prompts, but part of
the model and its processor), and Qwen2's decoder with (non-interleaved) M-RoPE 16:24:24 and q/k/v
biases. The talker and token2wav halves of the full Omni model are not built. A 64x64 image gives 4
visual tokens (resized to 56x56, 4x4 patches, 2x2 after the merge). No adapter-table row: the
capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    Qwen2_5OmniProcessor,
    Qwen2_5OmniThinkerConfig,
    Qwen2_5OmniThinkerForConditionalGeneration,
    Qwen2VLVideoProcessor,
    WhisperFeatureExtractor,
)

from .parts import TextSizes, chatml_template, instantiate
from .qwen2_5_vl import DESCRIPTION as QWEN2_5_VL_DESCRIPTION
from .qwen2_5_vl import PATCH_SIZE, qwen2_text_config
from .qwen3_vl import MERGE_SIZE, qwen_image_processor, qwen_vision_config
from .tokenizer import train_bpe_tokenizer

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

IMAGE_TOKEN = "<|IMAGE|>"
# Attribute names the Omni processors read from the tokenizer, and Omni's tokens for them.
OMNI_TOKENS = {
    "image_token": IMAGE_TOKEN,
    "audio_token": "<|AUDIO|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
VISION_MARKUP = "<|vision_bos|>" + IMAGE_TOKEN + "<|vision_eos|>"
CHAT_TEMPLATE = chatml_template(VISION_MARKUP, default_system="You are a helpful assistant.")
NUM_MEL_BINS = 128

DESCRIPTION = {
    **QWEN2_5_VL_DESCRIPTION,
    "model_class": "Qwen2_5OmniThinkerForConditionalGeneration",
    "processor_class": "Qwen2_5OmniProcessor",
    "image_token": IMAGE_TOKEN,
    "extra_tokens_per_image": "<|vision_bos|> before and <|vision_eos|> after each run of <|IMAGE|>",
}


def omni_tokenizer(omni_tokens: dict[str, str], chat_template: str):
    """Qwen-Omni tokenizer: ChatML tokens, then `omni_tokens` (`OMNI_TOKENS`' attribute names, the
    family's tokens for them) exposed as the attributes the Omni processors read; eos <|im_end|>,
    pad <|endoftext|>."""
    return train_bpe_tokenizer(
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *omni_tokens.values()),
        chat_template=chat_template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=omni_tokens,
    )


def omni_processor(processor_class, patch_size: int, tokenizer):
    """`processor_class` (Qwen2.5-Omni / Qwen3-Omni) from `tokenizer`, a Qwen2-VL image processor of
    1 to 4 visual tokens per image, a video processor and a 128-mel Whisper feature extractor."""
    return processor_class(
        image_processor=qwen_image_processor(patch_size),
        video_processor=Qwen2VLVideoProcessor(patch_size=patch_size, merge_size=MERGE_SIZE),
        feature_extractor=WhisperFeatureExtractor(feature_size=NUM_MEL_BINS),
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
    )


def omni_token_ids(tokenizer) -> dict[str, int]:
    """Thinker-config keyword arguments naming the Omni special-token ids of `tokenizer` (an
    `omni_tokenizer`)."""
    names = {"image_token": "image_token_id", "video_token": "video_token_id", "audio_token": "audio_token_id",
             "vision_bos_token": "vision_start_token_id", "vision_eos_token": "vision_end_token_id",
             "audio_bos_token": "audio_start_token_id", "audio_eos_token": "audio_end_token_id"}
    return {key: tokenizer.convert_tokens_to_ids(getattr(tokenizer, name)) for name, key in names.items()}


def omni_audio_config(output_dim: int, **extra) -> dict:
    """Tiny Omni audio tower: 1 layer of width 32 (2 heads) on 128 mel bins, projecting into
    `output_dim`; `extra` further audio-config keys."""
    return {
        "num_mel_bins": NUM_MEL_BINS,
        "encoder_layers": 1,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "d_model": 32,
        "output_dim": output_dim,
        **extra,
    }


def build_processor() -> Qwen2_5OmniProcessor:
    """Qwen2.5-Omni processor with a freshly trained tokenizer; images capped at 56x56 px (4 tokens)."""
    return omni_processor(Qwen2_5OmniProcessor, PATCH_SIZE, omni_tokenizer(OMNI_TOKENS, CHAT_TEMPLATE))


def build_model(processor: Qwen2_5OmniProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Qwen2_5OmniThinkerForConditionalGeneration` with `sizes` and the processor's token
    ids; vision tower as the tiny Qwen2.5-VL's, audio tower of 1 layer of width 32 (2 heads), both
    projecting into ``hidden_size`` (`UserInputError` as `qwen2_5_vl.qwen2_text_config` raises it)."""
    config = Qwen2_5OmniThinkerConfig(
        text_config=qwen2_text_config("qwen2_5_omni_thinker", processor, sizes),
        vision_config=qwen_vision_config(
            PATCH_SIZE, sizes.hidden_size, window_size=2 * PATCH_SIZE * MERGE_SIZE, fullatt_block_indexes=[1]
        ),
        audio_config=omni_audio_config(sizes.hidden_size),
        **omni_token_ids(processor.tokenizer),
    )
    return instantiate(Qwen2_5OmniThinkerForConditionalGeneration, config, seed, attn_implementation)
