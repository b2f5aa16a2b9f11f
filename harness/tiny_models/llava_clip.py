"""Tiny LLaVA-1.5 (`LlavaForConditionalGeneration` + `LlavaProcessor` + `CLIPImageProcessor`), built offline.

Mirrors llava-hf/llava-1.5-7b-hf in everything but size: CLIP vision tower (CLS token dropped,
feature strategy "default", features of the second-to-last layer), GELU MLP projector, Llama
language model, BOS added by the tokenizer, ``USER: ... ASSISTANT:`` template writing
``<image>\\n`` per image. The image processor resizes the shortest edge to 32 px and center-crops
32x32 (16-px patches), so every image, whatever its size or aspect ratio, gives 2x2 = 4 visual
tokens; a 64x64 image gives 4.

One deliberate difference: the real checkpoint's chat template writes ALL images of a message
before its text; this one keeps images in place, which the benchmarks need.

The tokenizer, template and vision tower are shared with the LLaVA-NeXT builder (`llava_next`),
whose llava-hf/llava-v1.6-vicuna-7b-hf checkpoint uses the same ones.
"""

from __future__ import annotations

from transformers import CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

from .parts import TINY_VISION_TOWER, TextSizes, instantiate
from .tokenizer import llama_style_tokenizer

IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>", IMAGE_TOKEN)
IMAGE_SIZE = 32
PATCH_SIZE = 16

# The real template's structure (role prefixes, text items followed by a space, the system message
# without a prefix), with images in place instead of first.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] != 'system' %}{{- message['role'].upper() + ': ' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] + ' ' }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<image>\\n' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] + ' ' }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'ASSISTANT:' }}{%- endif %}"
)

DESCRIPTION = {
    "model_class": "LlavaForConditionalGeneration",
    "processor_class": "LlavaProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE "
        "tensor [num_images, n_patches, hidden_size] (projector output of the patch tokens, CLS dropped)"
    ),
    "extra_tokens_per_image": "none: the template writes a newline after each run of <image>",
    "image_span": "one contiguous run of the image token per image",
}


def clip_processor(processor_class: type, image_processor):
    """`processor_class` (`LlavaProcessor`, `LlavaNextProcessor`) around `image_processor`, with a
    freshly trained Llama-style tokenizer (``<s>`` added in front of every text), `CHAT_TEMPLATE`,
    and one ``<image>`` per 16-px patch of a 32x32 px tile (CLIP's CLS token counted, then dropped:
    strategy "default")."""
    tokenizer = llama_style_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE)
    return processor_class(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )


def clip_llava_config(config_class: type, tokenizer, sizes: TextSizes, **extra):
    """`config_class` (`LlavaConfig`, `LlavaNextConfig`) of a Llama language model with `sizes` and
    a tiny CLIP vision tower (2 layers of width 32, 2 heads, 32-px input, 16-px patches), features
    of its second-to-last layer without the CLS token, as LLaVA-1.5 and LLaVA-NeXT; plus `extra`."""
    return config_class(
        text_config={
            "model_type": "llama",
            **sizes.text_config(tokenizer, rope_parameters={"rope_type": "default", "rope_theta": 10_000.0}),
        },
        vision_config={
            "model_type": "clip_vision_model",
            **TINY_VISION_TOWER,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
            "projection_dim": 32,
        },
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        **extra,
    )


def build_processor() -> LlavaProcessor:
    """LLaVA-1.5 processor with a freshly trained tokenizer; every image becomes 32x32 px, 4 tokens."""
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
    )
    return clip_processor(LlavaProcessor, image_processor)


def build_model(processor: LlavaProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `LlavaForConditionalGeneration` (CLIP vision + Llama text) with `sizes`."""
    config = clip_llava_config(LlavaConfig, processor.tokenizer, sizes, projector_hidden_act="gelu")
    return instantiate(LlavaForConditionalGeneration, config, seed, attn_implementation)
