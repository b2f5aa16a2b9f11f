"""The protocol's per-image inputs (paper App. A, App. J.1): one adapter row per family.

On the six tiny architectures, images of three aspect ratios (640x480, 480x640 and 500x500
scaled by 1/10) get the same number of visual tokens per image for InternVL, LLaVA-OneVision,
Pixtral and Gemma 3, in multi-image and single-image prompts alike, and the model accepts them;
Qwen's count follows the pixel budget exactly as its smart-resize arithmetic (recomputed here)
says. With the real checkpoints' processor sizes, the counts are the paper's: ~192 (Qwen3-VL),
256 (InternVL), 1,485 (LLaVA-OneVision), 784 (Pixtral at 448 px) and 256 (Gemma 3). The old
default call is shown to differ where the protocol matters (InternVL tiles, LLaVA-OneVision's
multi-image path, Pixtral's aspect ratio).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from PIL import Image

from harness.analysis import unequal_tokens_note
from harness.capture.adapters import (
    ADAPTERS,
    ModelAdapter,
    image_token_id,
    resolve_adapter,
)
from harness.capture.image_inputs import (
    processor_side,
    resolve_image_inputs,
    square_resize,
    token_count_summary,
    visual_token_counts,
)
from harness.capture.inputs import CaptureRequest, encode_requests
from harness.tiny_models import ARCHS, TABLE_ARCHS, build_tiny, random_images
from icir_common import UserInputError

ASPECTS = ((640, 480), (480, 640), (500, 500))  # (width, height) px of the real-size checks
TINY_ASPECTS = tuple((w // 10, h // 10) for w, h in ASPECTS)
WIDE = (160, 48)  # 1600x480 / 10
EQUAL_COUNT_ARCHS = ("internvl", "llava_onevision", "llava_pixtral", "gemma3")
QWEN_ARCHS = ("qwen3_vl", "qwen2_5_vl")


@functools.cache
def tiny(arch: str):
    model, processor = build_tiny(arch, seed=0)
    return model, processor, resolve_adapter(model)


def row(name: str) -> ModelAdapter:
    return next(adapter for adapter in ADAPTERS if adapter.name == name)


def aspect_images(sizes, seed: int = 0) -> list[Image.Image]:
    return [random_images(1, seed + index, size=size)[0] for index, size in enumerate(sizes)]


def requests(sizes) -> list[CaptureRequest]:
    """A prompt with one image of each size, and a prompt holding only the first image."""
    images = aspect_images(sizes)
    prompt = " ".join(f"image {k}: <image>" for k in range(len(images))) + " Which one?"
    return [CaptureRequest(prompt, images), CaptureRequest("<image> Alone.", images[:1])]


def encode(arch: str, reqs, side=None, protocol: bool = True, processor=None):
    model, tiny_processor, adapter = tiny(arch)
    processor = processor or tiny_processor
    call = resolve_image_inputs(processor, adapter, side) if protocol else None
    inputs, layouts = encode_requests(processor, reqs, image_token_id(model, adapter), call)
    return inputs, layouts, call


def forward_accepts(arch: str, inputs) -> None:
    model = tiny(arch)[0]
    with torch.no_grad():  # raises when image features and image tokens disagree
        logits = model(**inputs).logits
    assert logits.shape[:2] == inputs["input_ids"].shape


def expected_equal_count(arch: str, side: int | None) -> int:
    model, processor, _ = tiny(arch)
    if arch == "internvl":
        return processor.image_seq_length  # one tile
    if arch == "llava_onevision":  # base tile + one crop of p x p tokens + p newline tokens
        p = model.config.vision_config.image_size // model.config.vision_config.patch_size
        return 2 * p * p + p
    if arch == "llava_pixtral":
        return math.ceil(side / model.config.vision_config.patch_size) ** 2
    return model.config.mm_tokens_per_image  # gemma3


# --------------------------------------------------------------------------- the adapter table


def test_every_row_declares_how_its_processor_is_called():
    images = {adapter.name: adapter.images for adapter in ADAPTERS}
    assert set(images) == set(TABLE_ARCHS)
    assert {name for name, spec in images.items() if spec.user_side} == {"qwen3_vl", "qwen2_5_vl", "llava_pixtral"}
    assert {name for name, spec in images.items() if spec.square} == {"internvl", "llava_onevision", "llava_pixtral"}
    assert {name for name, spec in images.items() if spec.lone_images} == {"llava_onevision"}
    assert images["qwen3_vl"].side == images["qwen2_5_vl"].side == images["llava_pixtral"].side == 448
    assert all(images[name].side is None for name in ("internvl", "llava_onevision", "gemma3"))
    assert all(spec.source for spec in images.values())
    assert len(set(ADAPTERS)) == len(ADAPTERS)  # rows stay hashable


@pytest.mark.parametrize("arch", TABLE_ARCHS)
def test_protocol_record_is_json(arch):
    _, processor, adapter = tiny(arch)
    record = resolve_image_inputs(processor, adapter).record
    assert json.loads(json.dumps(record)) == record
    side = processor.image_processor.size["height"] if adapter.images.side is None else 448
    assert record["family"] == arch and record["side"] == side
    expected_kwargs = {
        "qwen3_vl": {"size": {"shortest_edge": 448 * 448, "longest_edge": 448 * 448}},
        "qwen2_5_vl": {"size": {"shortest_edge": 448 * 448, "longest_edge": 448 * 448}},
        "internvl": {"crop_to_patches": False},
        "llava_onevision": {},
        "llava_pixtral": {"size": {"longest_edge": 448}},
        "gemma3": {"do_pan_and_scan": False},
    }[arch]
    assert record["call_kwargs"] == expected_kwargs
    assert record["side_source"] == ("processor" if adapter.images.side is None else "protocol")
    assert record["square_resize"] == ("BICUBIC" if adapter.images.square else None)


# --------------------------------------------------------------------------- equal counts


@pytest.mark.parametrize("arch", EQUAL_COUNT_ARCHS)
def test_every_image_gets_the_same_visual_token_count(arch):
    side = 48 if arch == "llava_pixtral" else None  # Pixtral at 448 px works too, but is 784 tokens
    inputs, layouts, _ = encode(arch, requests(TINY_ASPECTS + (WIDE,)), side)
    counts = visual_token_counts(layouts)
    expected = expected_equal_count(arch, side)
    assert counts == [[expected] * 4, [expected]]
    forward_accepts(arch, inputs)


@pytest.mark.parametrize("arch", ["llava_onevision", "llava_pixtral"])
def test_the_default_call_gives_images_different_counts(arch):
    _, layouts, _ = encode(arch, requests(TINY_ASPECTS), protocol=False)
    counts = [n for sample in visual_token_counts(layouts) for n in sample]
    assert len(set(counts)) > 1, counts


def test_llava_onevision_gives_every_image_its_base_tile_and_one_crop():
    inputs, _, call = encode("llava_onevision", requests(TINY_ASPECTS))
    tile = tiny("llava_onevision")[1].image_processor.size["height"]
    assert call.side == tile and call.lone_images
    assert tuple(inputs["pixel_values"].shape) == (4, 2, 3, tile, tile)  # 4 images x (base + 1 crop)
    assert inputs["batch_num_images"].tolist() == [1, 1, 1, 1]
    assert inputs["image_sizes"].tolist() == [[tile, tile]] * 4
    _, default_layouts, _ = encode("llava_onevision", requests(TINY_ASPECTS), protocol=False)
    assert visual_token_counts(default_layouts) == [[5, 5, 5], [24]]  # base tile only vs any-res


# --------------------------------------------------------------------------- InternVL tiles


def test_internvl_is_called_with_one_tile_per_image(monkeypatch):
    image_processor = tiny("internvl")[1].image_processor
    seen = []
    original = type(image_processor)._preprocess

    def recording(self, images, *args, **kwargs):
        seen.append(kwargs.get("crop_to_patches"))
        return original(self, images, *args, **kwargs)

    monkeypatch.setattr(type(image_processor), "_preprocess", recording)
    inputs, layouts, _ = encode("internvl", requests(TINY_ASPECTS + (WIDE,)))
    assert seen == [False]
    assert inputs["pixel_values"].shape[0] == 5  # 4 + 1 images, one tile each
    assert visual_token_counts(layouts) == [[4, 4, 4, 4], [4]]


def test_internvl_default_call_tiles_a_wide_image():
    reqs = [CaptureRequest("<image> Wide.", aspect_images([WIDE]))]
    inputs, layouts, _ = encode("internvl", reqs, protocol=False)
    assert inputs["pixel_values"].shape[0] == 4  # 3 x 1 tiles + thumbnail
    assert visual_token_counts(layouts) == [[16]]
    image_processor = tiny("internvl")[1].image_processor
    image_processor.crop_to_patches = False  # the attribute loses to the processor's call default
    try:
        inputs, _, _ = encode("internvl", reqs, protocol=False)
    finally:
        image_processor.crop_to_patches = True
    assert inputs["pixel_values"].shape[0] == 4
    inputs, layouts, _ = encode("internvl", reqs)
    assert inputs["pixel_values"].shape[0] == 1 and visual_token_counts(layouts) == [[4]]


# --------------------------------------------------------------------------- Qwen pixel budget


def smart_resize_tokens(width: int, height: int, pixels: int, factor: int) -> int:
    """Qwen2-VL's smart resize with min_pixels = max_pixels = `pixels`, recomputed: tokens."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > pixels:
        beta = math.sqrt(height * width / pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < pixels:
        beta = math.sqrt(pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return (h_bar // factor) * (w_bar // factor)


@pytest.mark.parametrize("arch", QWEN_ARCHS)
def test_qwen_tokens_follow_the_pixel_budget(arch):
    image_processor = tiny(arch)[1].image_processor
    factor, merge = image_processor.patch_size * image_processor.merge_size, image_processor.merge_size
    totals = []
    for side in (64, 96):
        inputs, layouts, call = encode(arch, requests(TINY_ASPECTS), side)
        assert call.record["side_source"] == "user"
        counts = visual_token_counts(layouts)
        expected = [smart_resize_tokens(w, h, side * side, factor) for w, h in TINY_ASPECTS]
        assert counts == [expected, expected[:1]]
        grid = inputs["image_grid_thw"]
        assert (grid.prod(-1) // merge**2).tolist() == expected + expected[:1]
        totals.append(sum(expected))
        forward_accepts(arch, inputs)
    assert totals[1] > totals[0]


# --------------------------------------------------------------------------- real processor sizes

REAL_IMAGE_PROCESSORS = {
    "qwen3_vl": (lambda: transformers.Qwen2VLImageProcessor(patch_size=16, merge_size=2), {}),
    "qwen2_5_vl": (lambda: transformers.Qwen2VLImageProcessor(patch_size=14, merge_size=2), {}),
    "internvl": (
        lambda: transformers.GotOcr2ImageProcessor(
            size={"height": 448, "width": 448}, crop_to_patches=True, max_patches=12
        ),
        {"image_seq_length": 256},
    ),
    "llava_onevision": (
        transformers.LlavaOnevisionImageProcessor,  # its defaults: 384 px, pinpoints 384..2304
        {"num_image_tokens": 729, "vision_feature_select_strategy": "full"},
    ),
    "llava_pixtral": (transformers.PixtralImageProcessor, {"patch_size": 16, "spatial_merge_size": 1}),
    "gemma3": (
        lambda: transformers.Gemma3ImageProcessor(size={"height": 896, "width": 896}),
        {"image_seq_length": 256},
    ),
}
# App. A: ~192 (Qwen3-VL), 256 (InternVL); App. J.2: ~1,485 (LLaVA-OneVision); Pixtral (448/16)^2.
REAL_COUNTS = {
    "qwen3_vl": [192, 192, 196],
    "qwen2_5_vl": [234, 234, 256],
    "internvl": [256] * 3,
    "llava_onevision": [1485] * 3,
    "llava_pixtral": [784] * 3,
    "gemma3": [256] * 3,
}


def real_sized_processor(arch: str):
    """The tiny processor's class and tokenizer with the real checkpoint's image processor sizes."""
    tiny_processor = tiny(arch)[1]
    make, extra = REAL_IMAGE_PROCESSORS[arch]
    parts = {
        "image_processor": make(),
        "tokenizer": tiny_processor.tokenizer,
        "chat_template": tiny_processor.chat_template,
    }
    if getattr(tiny_processor, "video_processor", None) is not None:
        parts["video_processor"] = tiny_processor.video_processor
    return type(tiny_processor)(**parts, **extra)


@pytest.mark.parametrize("arch", TABLE_ARCHS)
def test_real_processor_sizes_give_the_papers_token_counts(arch):
    processor = real_sized_processor(arch)
    _, layouts, call = encode(arch, requests(ASPECTS), processor=processor)
    assert visual_token_counts(layouts) == [REAL_COUNTS[arch], REAL_COUNTS[arch][:1]]
    assert call.side == {"internvl": 448, "llava_onevision": 384, "gemma3": 896}.get(arch, 448)
    if arch in QWEN_ARCHS:
        factor = processor.image_processor.patch_size * processor.image_processor.merge_size
        assert REAL_COUNTS[arch] == [smart_resize_tokens(w, h, 448 * 448, factor) for w, h in ASPECTS]


def test_real_internvl_default_call_makes_13_tiles_of_a_640x480_image():
    processor = real_sized_processor("internvl")
    reqs = [CaptureRequest("<image>", aspect_images(ASPECTS[:1]))]
    inputs, layouts, _ = encode("internvl", reqs, protocol=False, processor=processor)
    assert inputs["pixel_values"].shape[0] == 13 and visual_token_counts(layouts) == [[13 * 256]]
    inputs, layouts, _ = encode("internvl", reqs, processor=processor)
    assert inputs["pixel_values"].shape[0] == 1 and visual_token_counts(layouts) == [[256]]


def test_gemma_pan_and_scan_stays_off():
    processor = real_sized_processor("gemma3")
    processor.image_processor.do_pan_and_scan = True  # a checkpoint configured for it
    model, _, adapter = tiny("gemma3")
    reqs = [CaptureRequest("<image>", aspect_images([(1600, 480)]))]
    call = resolve_image_inputs(processor, adapter)
    assert call.call_kwargs == {"do_pan_and_scan": False}
    _, layouts = encode_requests(processor, reqs, image_token_id(model, adapter), call)
    assert visual_token_counts(layouts) == [[256]]
    panned = dataclasses.replace(call, call_kwargs={"do_pan_and_scan": True})
    _, layouts = encode_requests(processor, reqs, image_token_id(model, adapter), panned)
    assert visual_token_counts(layouts)[0][0] > 256  # the crops pan-and-scan would add


# --------------------------------------------------------------------------- overrides and errors


@pytest.mark.parametrize("arch", ["internvl", "llava_onevision", "gemma3"])
def test_a_fixed_tile_takes_no_other_side(arch):
    _, processor, adapter = tiny(arch)
    own = processor.image_processor.size["height"]
    assert resolve_image_inputs(processor, adapter, own).side == own  # its own side is accepted
    with pytest.raises(UserInputError, match=rf"{arch} images are fixed at {own}x{own} px"):
        resolve_image_inputs(processor, adapter, own + 16)


@pytest.mark.parametrize("side", [0, -448, True, 4.5, "448"])
def test_a_side_must_be_a_positive_integer(side):
    _, processor, adapter = tiny("qwen3_vl")
    with pytest.raises(UserInputError, match="positive number of pixels"):
        resolve_image_inputs(processor, adapter, side)


def test_overridable_sides_reach_the_call():
    _, processor, adapter = tiny("llava_pixtral")
    call = resolve_image_inputs(processor, adapter, np.int64(80))
    assert call.side == 80 and call.call_kwargs == {"size": {"longest_edge": 80}}
    assert call.transform(random_images(1, size=(64, 48))[0]).size == (80, 80)
    assert call.images_kwargs() == call.call_kwargs and call.images_kwargs() is not call.call_kwargs


# --------------------------------------------------------------------------- helpers


def test_square_resize_is_pil_bicubic_on_rgb():
    image = random_images(1, seed=3, size=(64, 48))[0]
    out = square_resize(image, 40)
    assert out.size == (40, 40) and out.mode == "RGB"
    assert np.array_equal(np.asarray(out), np.asarray(image.resize((40, 40), Image.Resampling.BICUBIC)))
    rgba = Image.new("RGBA", (10, 20), (0, 0, 0, 0))  # transparent -> white, as do_convert_rgb
    assert np.asarray(square_resize(rgba, 10)).min() == 255
    assert square_resize(out, 40) is out
    with pytest.raises(UserInputError, match="needs PIL images"):
        square_resize(np.zeros((4, 4, 3), dtype=np.uint8), 4)


def test_visual_token_counts_skip_markers_and_summarise():
    _, layouts, _ = encode("llava_pixtral", requests(TINY_ASPECTS), 48)
    counts = visual_token_counts(layouts)
    assert counts == [[9, 9, 9], [9]]
    span_lengths = [end - start for start, end in layouts[0].image_spans]
    assert span_lengths == [11, 11, 11]  # 3 rows of 3 [IMG] with 2 [IMG_BREAK] between them
    assert token_count_summary(counts) == {"images": 4, "min": 9, "mean": 9.0, "max": 9}
    assert token_count_summary([3, 5]) == {"images": 2, "min": 3, "mean": 4.0, "max": 5}
    assert token_count_summary([]) == {"images": 0, "min": None, "mean": None, "max": None}


@pytest.mark.parametrize("arch", ["internvl", "llava_onevision"])
def test_no_image_inputs_keeps_the_processor_defaults(arch):
    model, processor, adapter = tiny(arch)
    reqs = requests(TINY_ASPECTS)
    old, _ = encode_requests(processor, reqs, image_token_id(model, adapter))
    same, _ = encode_requests(processor, reqs, image_token_id(model, adapter), None)
    assert torch.equal(old["input_ids"], same["input_ids"])
    assert torch.equal(old["pixel_values"], same["pixel_values"])
    text_only = [CaptureRequest("No image here.", [])]
    inputs, layouts = encode_requests(
        processor, text_only, image_token_id(model, adapter), resolve_image_inputs(processor, adapter)
    )
    assert "pixel_values" not in inputs and visual_token_counts(layouts) == [[]]


@pytest.mark.parametrize("arch", EQUAL_COUNT_ARCHS)
def test_capture_heads_takes_the_protocol_inputs(arch):
    """The library entry point feeds images as the model class does when given the image call."""
    from harness.capture import capture_heads

    model, processor, adapter = tiny(arch)
    side = 48 if arch == "llava_pixtral" else None
    call = resolve_image_inputs(processor, adapter, side)
    prompt = "<image> one <image> two <image> three: where is the zebra?"
    start = prompt.index("zebra")
    capture = capture_heads(model, processor, prompt, aspect_images(TINY_ASPECTS), (start, start + 5),
                            image_inputs=call)
    tokens = [end - start for start, end in capture.image_spans]
    assert len(set(tokens)) == 1 and capture.pointer.shape[-1] == 3


# --------------------------------------------------------------------------- families outside the table

# Visual tokens of the TINY_ASPECTS images and WIDE under the processor's own input, worked by hand:
# LLaVA-1.5 crops every image to 32x32 px (2x2 patches); LLaVA-NeXT adds to its 2x2 base tile the
# any-res grid that fits best (2x2 tiles for the first three: 4x4 features + 4 row newlines; 1x3
# tiles for 160x48: 2x6 + 2); Mistral 3 fits the longest edge into 64 px, rounds both sides up to
# 32 px and merges 2x2 patches (160x48 -> 64x19 -> 64x32: one row of 2 [IMG]).
# Qwen2-VL, Qwen3-VL-MoE and GLM-4.1V keep the aspect ratio within a pixel budget of 2x2 merged
# patches (56 / 64 / 56 px square; GLM counts both temporal copies): each side rounds to a multiple
# of 28 / 32 / 28 px (the first three to 2x2 tokens), and 160x48 px, over budget, shrinks by
# sqrt(160*48 / budget) and rounds down to 1x3 tokens.
DERIVED_COUNTS = {
    "llava_clip": [4, 4, 4, 4],
    "llava_next": [24, 24, 24, 18],
    "mistral3": [4, 4, 4, 2],
    "qwen2_vl": [4, 4, 4, 3],
    "qwen3_vl_moe": [4, 4, 4, 3],
    "qwen3_5": [4, 4, 4, 3],
    "qwen3_5_moe": [4, 4, 4, 3],
    "glm4v": [4, 4, 4, 3],
    # Gemma 4: each side scaled to fill 70 soft tokens of 48-px (3x3 pooled 16-px patches), rounded
    # down: 64x48 -> 432x336 (9x7), 50x50 -> 384x384 (8x8), 160x48 -> 720x192 (15x4).
    "gemma4": [63, 63, 64, 60],
    "deepseek_vl": [4, 4, 4, 4],  # longest side fit into 32 px, padded to a 32x32 square: 2x2 patches
    # Kimi K2.5: within 16 patches of 16 px nothing shrinks; sides pad up to 32 px (2x2 merged):
    # 64x48, 48x64, 50x50 -> 64x64 (2x2); 160x48 (30 patches) -> x sqrt(16/30) = 116x35 -> 128x64 (4x2).
    "kimi_k25": [4, 4, 4, 8],
    # Janus / DeepSeek-VL-Hybrid: longest side fit into 32 px, padded square (2x2 patches; the
    # hybrid's SAM tower sees a 64-px square its convolutions bring to the same 2x2 grid).
    "janus": [4, 4, 4, 4],
    "deepseek_vl_hybrid": [4, 4, 4, 4],
    # LightOnOCR: Mistral 3's rule (longest edge into 64 px, sides up to 32-px multiples, 2x2 merge).
    "lighton_ocr": [4, 4, 4, 2],
    # GLM-4.6V, GLM-4.5V, GLM-OCR and GLM-GA: GLM-4.1V's rule (above).
    **dict.fromkeys(("glm46v", "glm4v_moe", "glm_ocr", "glmga"), [4, 4, 4, 3]),
    # Qwen-style pixel budgets (28-px sides within 784..3,136 px, or 32-px within 1,024..4,096):
    # 64x48, 48x64, 50x50 -> 2x2 tokens; 160x48, over budget, shrinks and floors to 3x1.
    **dict.fromkeys(("lfm3_vl", "exaone4_5", "cosmos3_omni", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker",
                     "paddleocr_vl", "ernie4_5_vl_moe", "hyperclovax_vision_v2"), [4, 4, 4, 3]),
    # VideoLLaMA3: unmerged 14-px patches within 196..784 px: 64x48 -> 42x70, over, /1.979 -> 14x28 (2);
    # 50x50 -> 28x28 (4); 160x48 -> 42x154, over, /3.13 -> 14x42 (3).
    "video_llama_3": [2, 2, 4, 3],
    # Gemma 4's 70-soft-token budget (above).
    "gemma4_unified": [63, 63, 64, 60],
    # Muse: the grid of 28-px blocks whose aspect is closest to the image's, within 4 tokens:
    # 64x48 -> 1x2, 48x64 -> 2x2, 50x50 -> 1x1 (ties broken by the processor's order), 160x48 -> 1x3.
    **dict.fromkeys(("muse_glimmer", "muse_spark"), [2, 4, 1, 3]),
    # Molmo 2: 32-px crops with a 16-px window, 2x2 pooling, at most 8 crops, + a 2x2 low-res view:
    # 64x48 -> 2x3 crops, 48x64 canvas, 3x4 + 4 = 16; 50x50 -> 2x2, 3x3 + 4 = 13; 160x48 -> 1x5, 2x6 + 4 = 16.
    "molmo2": [16, 16, 13, 16],
    # CLIP-style center crops to 2x2 patches (ViP-LLaVA, Video-LLaVA, FastVLM's stride-16 tower).
    **dict.fromkeys(("vipllava", "video_llava", "fast_vlm"), [4, 4, 4, 4]),
    "llava_next_video": [24, 24, 24, 18],  # LLaVA-NeXT's any-res (above)
    "aria": [8, 8, 8, 8],  # one 980-px crop of 196 patches -> 8 queries, whatever the image
}
# The summary's note on unequal counts: tokens per image span (Mistral 3: 2 rows of 2 [IMG] and one
# [IMG_BREAK], or one row of 2).
UNEQUAL_SPANS = {"llava_clip": None, "llava_next": "18 to 24", "mistral3": "2 to 5", "gemma4": "60 to 64",
                 "deepseek_vl": None, "kimi_k25": "4 to 8", "janus": None, "deepseek_vl_hybrid": None,
                 "lighton_ocr": "2 to 4", "video_llama_3": "2 to 4", "gemma4_unified": "60 to 64",
                 "muse_glimmer": "1 to 4", "muse_spark": "1 to 4", "molmo2": "19 to 23", "llava_next_video": "18 to 24",
                 **dict.fromkeys(("vipllava", "video_llava", "fast_vlm", "aria"), None),
                 **dict.fromkeys(("lfm3_vl", "exaone4_5", "cosmos3_omni", "qwen2_5_omni_thinker",
                                  "qwen3_omni_moe_thinker", "paddleocr_vl", "ernie4_5_vl_moe",
                                  "hyperclovax_vision_v2"), "3 to 4"),
                 **dict.fromkeys(("qwen2_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "glm4v", "glm46v", "glm4v_moe",
                                  "glm_ocr", "glmga"), "3 to 4")}


@pytest.mark.parametrize("arch", sorted(DERIVED_COUNTS))
def test_a_derived_family_takes_its_processors_own_input(arch):
    """No tiling switch to turn off; any-res (LLaVA-NeXT) and native aspect ratios (Mistral 3) still
    give images different counts, and the run summary's note says so."""
    model, processor, adapter = tiny(arch)
    call = resolve_image_inputs(processor, adapter)
    assert call.record["derived"] and call.record["family"] == model.config.model_type
    assert call.call_kwargs == {} and json.loads(json.dumps(call.record)) == call.record
    inputs, layouts, _ = encode(arch, requests(TINY_ASPECTS + (WIDE,)))
    assert visual_token_counts(layouts) == [DERIVED_COUNTS[arch], DERIVED_COUNTS[arch][:1]]
    forward_accepts(arch, inputs)
    note = unequal_tokens_note([SimpleNamespace(records=[{"image_spans": layout.image_spans} for layout in layouts])])
    spans = UNEQUAL_SPANS[arch]
    assert note is None if spans is None else f"images got different visual-token counts ({spans} tokens" in note


@pytest.mark.parametrize("arch", ["qwen2_vl", "glm4v"])
def test_a_pixel_budget_is_not_read_as_a_side(arch):
    """Qwen2-VL-style processors keep min/max pixels in size's shortest/longest edge (tiny Qwen2-VL:
    784 and 3,136): a derived family's record names no side rather than a pixel count."""
    _, processor, adapter = tiny(arch)
    assert processor.image_processor.size["longest_edge"] == 4 * processor.image_processor.size["shortest_edge"]
    assert resolve_image_inputs(processor, adapter).record["side"] is None
    with pytest.raises(UserInputError, match="not one square input"):
        processor_side(processor)


# Idefics3 / SmolVLM with image splitting on (the real checkpoints' default) fit the longest edge to
# 256 px (4 x the 64-px tile, as 4 x 364 / 4 x 512 px for real), round each side up to whole tiles
# and add one global tile, 4 tokens each: 64x48 -> 256x192 -> 4x3 + 1 tiles = 52 tokens, 50x50 ->
# 4x4 + 1 = 68, 160x48 -> 256x76 -> 256x128 -> 4x2 + 1 = 36.
SPLIT_COUNTS = {"idefics3": [52, 52, 68, 36], "smolvlm": [52, 52, 68, 36]}


@pytest.mark.parametrize("arch", sorted(SPLIT_COUNTS))
def test_a_derived_familys_tiling_switch_is_turned_off(arch):
    """A processor that splits images gets ``do_image_splitting=False``: one global tile per image."""
    model, processor, adapter = tiny(arch)
    splitting = copy.deepcopy(processor)
    splitting.image_processor.do_image_splitting = True
    call = resolve_image_inputs(splitting, adapter)
    assert call.call_kwargs == {"do_image_splitting": False} and call.record["derived"]
    reqs = requests(TINY_ASPECTS + (WIDE,))
    split_inputs, split_layouts, _ = encode(arch, reqs, protocol=False, processor=splitting)
    assert visual_token_counts(split_layouts) == [SPLIT_COUNTS[arch], SPLIT_COUNTS[arch][:1]]
    forward_accepts(arch, split_inputs)
    inputs, layouts, _ = encode(arch, reqs, processor=splitting)
    assert visual_token_counts(layouts) == [[processor.image_seq_len] * 4, [processor.image_seq_len]]
    forward_accepts(arch, inputs)


# Families whose processor tiles by default (``crop_to_patches``), hand-worked with tiling on and
# off (the capture's call), for 64x48, 48x64, 50x50 and 160x48 px:
# - Ovis2: up to 4 tiles of 64 px + the whole image; 160x48 px makes a 1x3 grid plus the whole
#   image, 4 runs of 4 tokens = 16; off: one 64-px tile (4x4 patches merged 2x2) = 4 each.
# - Cohere2-Vision (Command A Vision): 64x48, 48x64 and 50x50 px make 2x2 tiles of 32 px plus a
#   thumbnail (5 tiles of 4 = 20), 160x48 px a 5x2 grid plus a thumbnail (44); off: one 32-px tile
#   (4x4 patches of 8 px, pixel-shuffled 2x2) = 4 each.
TILED_COUNTS = {"ovis2": ([4, 4, 4, 16], 4), "cohere2_vision": ([20, 20, 20, 44], 20)}


@pytest.mark.parametrize("arch", sorted(TILED_COUNTS))
def test_a_tiling_processors_crops_are_turned_off(arch):
    model, processor, adapter = tiny(arch)
    assert processor.image_processor.crop_to_patches
    call = resolve_image_inputs(processor, adapter)
    assert call.call_kwargs == {"crop_to_patches": False} and call.record["derived"]
    reqs = requests(TINY_ASPECTS + (WIDE,))
    tiled_inputs, tiled, _ = encode(arch, reqs, protocol=False)
    counts, alone = TILED_COUNTS[arch]
    assert visual_token_counts(tiled) == [counts, [alone]]
    forward_accepts(arch, tiled_inputs)
    inputs, layouts, _ = encode(arch, reqs)
    assert visual_token_counts(layouts) == [[4, 4, 4, 4], [4]]
    forward_accepts(arch, inputs)
