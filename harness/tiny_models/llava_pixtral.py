"""Tiny Llava with a Pixtral vision tower (`LlavaForConditionalGeneration` + `PixtralProcessor`).

Mirrors mistral-community/pixtral-12b in everything but size: Pixtral vision encoder (2-D RoPE,
native aspect ratio, 16-px patches, no spatial merge), GELU MLP projector, Mistral language
model, Mistral ``<s>[INST]...[/INST]`` template writing ``[IMG]`` per image, which the processor
expands row by row: ``[IMG]`` x columns then ``[IMG_BREAK]``, the last row ending in
``[IMG_END]`` instead. A 64x64 image gives 4 rows x 4 ``[IMG]`` = 16 visual tokens (+3 breaks
+1 end).
"""

from __future__ import annotations

from transformers import LlavaConfig, LlavaForConditionalGeneration, PixtralImageProcessor, PixtralProcessor

from .parts import TINY_VISION_TOWER, TextSizes, instantiate
from .tokenizer import llama_style_tokenizer

IMAGE_TOKEN = "[IMG]"
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", IMAGE_TOKEN, "[IMG_BREAK]", "[IMG_END]")
PATCH_SIZE = 16
MAX_IMAGE_SIZE = 64

# The real template's structure (system prompt folded into the last user turn, assistant turns
# closed by eos), without its role-alternation checks.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- bos_token }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if loop.last and system_message is defined %}{{- '[INST]' + system_message + '\\n\\n' }}"
    "{%- else %}{{- '[INST]' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'text' %}{{- item['text'] }}"
    "{%- elif item['type'] == 'image' %}{{- '[IMG]' }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '[/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{%- if message['content'] is string %}{{- message['content'] + eos_token }}"
    "{%- else %}{{- message['content'][0]['text'] + eos_token }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
)

DESCRIPTION = {
    "model_class": "LlavaForConditionalGeneration",
    "processor_class": "PixtralProcessor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_sizes=image_sizes) -> BaseModelOutputWithPooling; "
        ".pooler_output is a tuple with one [n_img_tokens_i, hidden_size] tensor per image (projector "
        "output for the [IMG] positions only, row-major; [IMG_BREAK]/[IMG_END] are ordinary text tokens)"
    ),
    "extra_tokens_per_image": (
        "[IMG_BREAK] after every row of [IMG] but the last, [IMG_END] after the last row; no start marker"
    ),
    "image_span": (
        "rows: the [IMG] runs are split by [IMG_BREAK]; one image = the maximal stretch of [IMG] and "
        "[IMG_BREAK] tokens ending at its [IMG_END] (count [IMG_END] tokens to count images)"
    ),
}


def build_processor(spatial_merge_size: int = 1) -> PixtralProcessor:
    """Pixtral processor with a freshly trained tokenizer; images fit in 64x64 px (16-px patches),
    one ``[IMG]`` per `spatial_merge_size` x `spatial_merge_size` patches (Mistral 3 merges 2x2)."""
    tokenizer = llama_style_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE)
    image_processor = PixtralImageProcessor(
        size={"longest_edge": MAX_IMAGE_SIZE}, patch_size={"height": PATCH_SIZE, "width": PATCH_SIZE}
    )
    return PixtralProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH_SIZE,
        spatial_merge_size=spatial_merge_size,
        chat_template=CHAT_TEMPLATE,
    )


def pixtral_config(config_class: type, tokenizer, sizes: TextSizes, **extra):
    """`config_class` (`LlavaConfig`, `Mistral3Config`) of a Mistral language model with `sizes`
    (RoPE theta 1e9, no sliding window, as Pixtral-12B and Mistral Small 3.1) and a tiny Pixtral
    vision encoder (2 layers of width 32, 2 heads, images up to 64 px a side in 16-px patches),
    features of its last layer; plus `extra`."""
    return config_class(
        text_config={
            "model_type": "mistral",
            **sizes.text_config(
                tokenizer, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000_000.0}, sliding_window=None
            ),
        },
        vision_config={
            "model_type": "pixtral",
            **TINY_VISION_TOWER,
            "image_size": MAX_IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
        },
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_layer=-1,
        **extra,
    )


def build_model(processor: PixtralProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `LlavaForConditionalGeneration` (Pixtral vision + Mistral text) with `sizes`."""
    config = pixtral_config(
        LlavaConfig, processor.tokenizer, sizes, vision_feature_select_strategy="full", projector_hidden_act="gelu"
    )
    return instantiate(LlavaForConditionalGeneration, config, seed, attn_implementation)
