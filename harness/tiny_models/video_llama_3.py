"""Tiny VideoLLaMA3 (`VideoLlama3ForConditionalGeneration` + `VideoLlama3Processor`), built offline.

Mirrors lkhl/VideoLLaMA3-2B-Image-HF (DAMO-NLP-SG/VideoLLaMA3-2B-Image) in everything but size:
ChatML template (no default system prompt here), each image written as a bare run of
``<|image_pad|>`` followed by a newline (VideoLLaMA3 has no image start/end markers), a SigLIP-based
NaViT vision tower (14-px patches at native resolution, 2-D vision RoPE, no learned positions)
whose image patches are NOT merged (merge size 1: one visual token per 14x14 px; videos merge 2x2),
a two-layer MLP projector, and a Qwen2 decoder with plain 1-D RoPE and q/k/v biases. A 64x64 image
gives 4 visual tokens (resized to 28x28, the pixel budget here, 2x2 patches). No adapter-table row:
the capture derives its adapter from transformers' common layout.
"""

from __future__ import annotations

from transformers import (
    VideoLlama3Config,
    VideoLlama3ForConditionalGeneration,
    VideoLlama3ImageProcessor,
    VideoLlama3Processor,
    VideoLlama3VideoProcessor,
)

from .parts import TINY_VISION_TOWER, TextSizes, chatml_template, instantiate
from .tokenizer import train_bpe_tokenizer

__all__ = ["DESCRIPTION", "IMAGE_TOKEN", "build_model", "build_processor"]

IMAGE_TOKEN = "<|image_pad|>"
VIDEO_TOKEN = "<|video_pad|>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", IMAGE_TOKEN, VIDEO_TOKEN)
PATCH_SIZE = 14
CHAT_TEMPLATE = chatml_template(IMAGE_TOKEN + "\\n")

DESCRIPTION = {
    "model_class": "VideoLlama3ForConditionalGeneration",
    "processor_class": "VideoLlama3Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw, image_merge_sizes) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_tokens_i, hidden_size] tensor per image (projector output, in "
        "input-embedding space, n_tokens_i = prod(image_grid_thw[i]) / image_merge_sizes[i]**2, merge size 1)"
    ),
    "extra_tokens_per_image": "none (a newline follows each run of <|image_pad|>)",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> VideoLlama3Processor:
    """VideoLLaMA3 processor with a freshly trained tokenizer (eos <|im_end|>, pad <|endoftext|>);
    images resized to between 14x14 and 28x28 px (1 to 4 tokens, one per unmerged patch)."""
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS, chat_template=CHAT_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    image_processor = VideoLlama3ImageProcessor(
        size={"shortest_edge": PATCH_SIZE**2, "longest_edge": (2 * PATCH_SIZE) ** 2}, patch_size=PATCH_SIZE
    )
    return VideoLlama3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=VideoLlama3VideoProcessor(patch_size=PATCH_SIZE),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: VideoLlama3Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `VideoLlama3ForConditionalGeneration` with `sizes` and the processor's token ids;
    vision tower of 2 layers of width 32 (2 heads), projected into ``hidden_size``; Qwen2 decoder
    with RoPE base 1e6, input and output embeddings untied as in the checkpoint."""
    tokenizer = processor.tokenizer
    config = VideoLlama3Config(
        text_config=sizes.typed_text_config("qwen2", tokenizer, rope_theta=1_000_000.0),
        vision_config={
            **TINY_VISION_TOWER,
            "patch_size": PATCH_SIZE,
        },
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        video_token_id=tokenizer.convert_tokens_to_ids(VIDEO_TOKEN),
    )
    return instantiate(VideoLlama3ForConditionalGeneration, config, seed, attn_implementation)
