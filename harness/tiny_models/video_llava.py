"""Tiny Video-LLaVA (`VideoLlavaForConditionalGeneration` + `VideoLlavaProcessor`), built offline.

Mirrors LanguageBind/Video-LLaVA-7B-hf in everything but size: a CLIP image tower (CLS token
dropped, features of the second-to-last layer) and a separate CLIP video tower, a GELU MLP
projector, a Llama language model, BOS added by the tokenizer, ``<image>`` and ``<video>``
placeholders after the learned vocabulary, and the ``USER: ... ASSISTANT:`` template of
`llava_clip`, with images in place. The real 14-px patches are kept (224 px, 16x16 patches, shrink
to 28 px, 2x2): `VideoLlavaImageProcessor` resizes the shortest edge to 28 px and center-crops
28x28, so every image, whatever its size, gives 2x2 = 4 visual tokens; a 64x64 image gives 4.
The image processor still returns its legacy ``pixel_values_images`` key by default, which the
model takes as ``pixel_values``.
"""

from __future__ import annotations

from transformers import (
    VideoLlavaConfig,
    VideoLlavaForConditionalGeneration,
    VideoLlavaImageProcessor,
    VideoLlavaProcessor,
    VideoLlavaVideoProcessor,
)

from . import llava_clip
from .llava_clip import CHAT_TEMPLATE, IMAGE_TOKEN, clip_llava_config
from .parts import TextSizes, instantiate
from .tokenizer import llama_style_tokenizer

VIDEO_TOKEN = "<video>"
IMAGE_SIZE = 28
PATCH_SIZE = 14
# As in the real tokenizer: ``<image>``, ``<video>``, then ``<pad>`` after the learned vocabulary.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", IMAGE_TOKEN, VIDEO_TOKEN, "<pad>")

DESCRIPTION = {
    **llava_clip.DESCRIPTION,
    "model_class": "VideoLlavaForConditionalGeneration",
    "processor_class": "VideoLlavaProcessor",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE tensor "
        "[num_images, n_patches, hidden_size] (projector output of the image tower's patch tokens, CLS dropped)"
    ),
}


def build_processor() -> VideoLlavaProcessor:
    """`VideoLlavaProcessor` with 28x28 px image and video frames (4 tokens per image) and a freshly
    trained Llama-style tokenizer holding ``<image>`` and ``<video>``."""
    tiny = {"size": {"shortest_edge": IMAGE_SIZE}, "crop_size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE}}
    return VideoLlavaProcessor(
        image_processor=VideoLlavaImageProcessor(**tiny),
        video_processor=VideoLlavaVideoProcessor(**tiny),
        tokenizer=llama_style_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE),
        patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: VideoLlavaProcessor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `VideoLlavaForConditionalGeneration` (CLIP image and video towers, 28-px input of
    14-px patches, + Llama text) with `sizes`."""
    tokenizer = processor.tokenizer
    config = clip_llava_config(
        VideoLlavaConfig, tokenizer, sizes, video_token_index=tokenizer.convert_tokens_to_ids(VIDEO_TOKEN)
    )
    config.vision_config.image_size, config.vision_config.patch_size = IMAGE_SIZE, PATCH_SIZE
    return instantiate(VideoLlavaForConditionalGeneration, config, seed, attn_implementation)
