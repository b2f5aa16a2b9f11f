"""Tiny FastVLM (`FastVlmForConditionalGeneration` + `LlavaProcessor` + `CLIPImageProcessor`), built offline.

Mirrors KamilaMila/FastVLM-0.5B (transformers' conversion of apple/FastVLM-0.5B) in everything but
size: a FastViT-HD vision tower through `TimmWrapperModel` (timm's ``fastvit_mci3``: reparameterised
convolutional stem and RepMixer stages, an attention stage last, a final conv doubling the width,
feature map flattened row-major into tokens, no CLS token), a GELU MLP projector, a Qwen2 language
model, ChatML with the default system prompt "You are a helpful assistant.", and
`LlavaProcessor` counting one ``<image>`` per "patch" of the tower's total stride. The real tower
has 5 stages and stride 64 on 1024-px images (16x16 = 256 tokens); this one has 3 stages of one
block (widths 8, 16, 32; final conv to 64) and stride 16 (stem 4 x two downsamples) on 32-px
images. The image processor resizes the shortest edge to 32 px and center-crops 32x32 (pixels
scaled to [0, 1], no mean/std, as the real one), so every image, whatever its size, gives
2x2 = 4 visual tokens; a 64x64 image gives 4.

One deliberate difference: the real chat template writes ALL images of a message before its text
(``<image>`` then ``\\n`` + each text item); this one keeps them in place, with the same markup.
"""

from __future__ import annotations

from transformers import CLIPImageProcessor, FastVlmConfig, FastVlmForConditionalGeneration, LlavaProcessor

from . import llava_clip
from .parts import TextSizes, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", IMAGE_TOKEN)
IMAGE_SIZE = 32
STRIDE = 16  # convolutional stem 4 x two stride-2 downsampling stages
EMBED_DIMS = (8, 16, 32)
CLS_RATIO = 2  # timm FastViT's final conv widens the last stage by this factor

# The real template's ChatML turns and markup (``<image>`` per image, ``\n`` before each text item),
# with the items in place instead of images first.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<image>' }}"
    "{%- elif item['type'] == 'text' %}{{- '\\n' + item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

DESCRIPTION = {
    **llava_clip.DESCRIPTION,
    "model_class": "FastVlmForConditionalGeneration",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE tensor "
        "[num_images, n_positions, hidden_size] (projector output of the tower's flattened final feature map)"
    ),
    "extra_tokens_per_image": "none: the template writes a newline before each text item",
}


def build_processor() -> LlavaProcessor:
    """`LlavaProcessor` with 32x32 px images (4 tokens each: stride 16, no CLS) and a freshly
    trained Qwen2-style tokenizer (no BOS, eos ``<|im_end|>``, pad ``<|endoftext|>``)."""
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE_SIZE},
        crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=[0.0, 0.0, 0.0],
        image_std=[1.0, 1.0, 1.0],
    )
    tokenizer = train_bpe_tokenizer(
        SPECIAL_TOKENS, chat_template=CHAT_TEMPLATE, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    return LlavaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, patch_size=STRIDE, chat_template=CHAT_TEMPLATE
    )


def build_model(processor: LlavaProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `FastVlmForConditionalGeneration` (tiny timm FastViT + Qwen2 text) with `sizes`."""
    tokenizer = processor.tokenizer
    vision_config = {
        "model_type": "timm_wrapper",
        "architecture": "fastvit_mci3",
        "hidden_size": EMBED_DIMS[-1] * CLS_RATIO,
        "do_pooling": True,
        "global_pool": "avg",
        "model_args": {
            "inference_mode": True,
            "layers": [1] * len(EMBED_DIMS),
            "embed_dims": list(EMBED_DIMS),
            "mlp_ratios": [4] * len(EMBED_DIMS),
            "se_downsamples": [False] * len(EMBED_DIMS),
            "downsamples": [False, True, True],
            "pos_embs": [None] * len(EMBED_DIMS),
            "token_mixers": ["repmixer", "repmixer", "attention"],
            "cls_ratio": CLS_RATIO,
        },
    }
    config = FastVlmConfig(
        text_config=sizes.typed_text_config("qwen2", tokenizer, rope_theta=1_000_000.0),
        vision_config=vision_config,
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(FastVlmForConditionalGeneration, config, seed, attn_implementation)
