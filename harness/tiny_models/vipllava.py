"""Tiny ViP-LLaVA (`VipLlavaForConditionalGeneration` + `LlavaProcessor` + `CLIPImageProcessor`), built offline.

Mirrors llava-hf/vip-llava-7b-hf in everything but size: the LLaVA-1.5 parts of `llava_clip`
(CLIP vision tower with its CLS token dropped, Llama language model, BOS added by the tokenizer,
one ``<image>`` per patch) with ViP-LLaVA's projector: the patch features of several vision layers
concatenated (the real five, -2, -5, -8, -11 and 6 of 24 layers, become -2, -3 and 2 of the tiny
tower's embeddings + 2 layers), layer-normed, then a GELU MLP. The real template is
``###Human: <image>\\n... ###Assistant:``; this one keeps that shape with images in place.

The image processor resizes the shortest edge to 32 px and center-crops 32x32 (16-px patches), so
every image, whatever its size, gives 2x2 = 4 visual tokens; a 64x64 image gives 4.
"""

from __future__ import annotations

from transformers import (
    CLIPImageProcessor,
    LlavaConfig,
    LlavaProcessor,
    VipLlavaConfig,
    VipLlavaForConditionalGeneration,
)

from . import llava_clip
from .llava_clip import IMAGE_SIZE, IMAGE_TOKEN, PATCH_SIZE, SPECIAL_TOKENS, clip_llava_config
from .parts import TextSizes, instantiate
from .tokenizer import llama_style_tokenizer

VISION_FEATURE_LAYERS = (-2, -3, 2)

# The real template's structure (system prompt without a prefix, ``###Human: `` / ``###Assistant: ``
# turns), with images in place.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- '###Human: ' }}"
    "{%- elif message['role'] == 'assistant' %}{{- '###Assistant: ' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<image>\\n' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '###Assistant:' }}{%- endif %}"
)

DESCRIPTION = {
    **llava_clip.DESCRIPTION,
    "model_class": "VipLlavaForConditionalGeneration",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE tensor "
        "[num_images, n_patches, hidden_size] (projector output of the concatenated multi-layer patch features)"
    ),
}


def build_processor() -> LlavaProcessor:
    """`LlavaProcessor` with a freshly trained Llama-style tokenizer and the ViP-LLaVA template;
    every image becomes 32x32 px, 4 tokens."""
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=llama_style_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE),
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: LlavaProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `VipLlavaForConditionalGeneration` (CLIP vision, multi-layer projector, Llama text) with `sizes`."""
    llava = clip_llava_config(LlavaConfig, processor.tokenizer, sizes)
    config = VipLlavaConfig(
        text_config=llava.text_config,
        vision_config=llava.vision_config,
        image_token_index=llava.image_token_index,
        vision_feature_layer=list(VISION_FEATURE_LAYERS),
    )
    return instantiate(VipLlavaForConditionalGeneration, config, seed, attn_implementation)
