"""Tiny real-architecture LVLMs: offline build, interleaved 3-image prompts, save/load, determinism."""

from __future__ import annotations

import inspect
import operator

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from harness.tiny_models import ARCHS, build_tiny, describe, random_images, save_tiny
from harness.tiny_models.parts import TextSizes
from icir_common import UserInputError

# Hand-worked per image (64x64 px input): visual tokens the model fills, and tokens of the whole
# image span in input_ids (Pixtral: 4 rows of 4 [IMG] with 3 [IMG_BREAK] between rows; LLaVA-OV
# with several images per prompt: 2x2 base tokens + 1 image_newline; InternVL: 64-px tile, 16-px
# patches, pixel shuffle 0.5; Qwen: 32/28-px merged patches over a 64x64 / 56x56 resize).
TOKENS_PER_IMAGE = {
    "qwen3_vl": (4, 4),
    "qwen2_5_vl": (4, 4),
    "internvl": (4, 4),
    "llava_onevision": (5, 5),
    "llava_pixtral": (16, 19),
    "gemma3": (4, 4),
    "qwen2_vl": (4, 4),
    "idefics3": (4, 4),
    "smolvlm": (4, 4),
    "qwen3_vl_moe": (4, 4),
    "qwen3_5": (4, 4),
    "qwen3_5_moe": (4, 4),
    "kimi_k25": (4, 4),
    "janus": (4, 4),
    "deepseek_vl_hybrid": (4, 4),
    "lighton_ocr": (4, 4),
    "ovis2": (4, 4),
    **dict.fromkeys(("glm46v", "glm4v_moe", "glm_ocr", "glmga"), (4, 4)),
    "cohere2_vision": (20, 25),  # tiled: 2x2 tiles + a thumbnail of 4 <|IMG_PATCH|>; 5 <|IMG_LINE_BREAK|>
    "lfm3_vl": (4, 4),
    "gemma4_unified": (64, 64),
    "granite_docling": (4, 4),
    **dict.fromkeys(("exaone4_5", "cosmos3_omni", "muse_glimmer", "muse_spark"), (4, 4)),
    **dict.fromkeys(("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "paddleocr_vl", "video_llama_3",
                     "ernie4_5_vl_moe"), (4, 4)),
    # 2x2 low-res view + 2x2 crops of a 48x48 canvas pooled to 3x3 = 13 <im_patch>; with the row-closing
    # <im_col> (2 + 3), the <im_end><im_start> between the views and the last <im_end>: 21
    "molmo2": (13, 21),
    "lfm2_vl": (16, 16),
    "hyperclovax_vision_v2": (4, 4),
    "qianfan_ocr": (4, 4),
    **dict.fromkeys(("vipllava", "video_llava", "fast_vlm"), (4, 4)),
    "llava_next_video": (24, 24),
    "aria": (8, 8),  # one 980-px crop of 70-px patches (196), mapped to 8 queries
    "llava_clip": (4, 4),  # 32x32 center crop, 16-px patches, CLS dropped
    "llava_next": (24, 24),  # 2x2 base + 2x2 tiles of 2x2 patches (64x64 fits the 2x2 grid) + 4 row newlines
    "mistral3": (4, 5),  # 4x4 patches merged 2x2: 2 rows of 2 [IMG], one [IMG_BREAK] between
    "glm4v": (4, 4),
    "gemma4": (64, 64),  # resized to 384x384 (70-token budget, 48-px multiples): 24x24 patches pooled 3x3
    "deepseek_vl": (4, 4),  # fit and padded into 32x32 px, 16-px patches
}
# Families whose get_image_features pools one tensor per sample (all its images' tokens), not per image.
FEATURES_PER_SAMPLE = {"idefics3", "smolvlm", "granite_docling"}
# Families that add the image features onto the placeholder tokens' embeddings (Molmo 2) instead of
# writing them in place.
FEATURES_ADDED = {"molmo2"}
# Tokens inside one image's span besides the image token, and the markers right around it.
SPAN_FILLERS = {"llava_pixtral": ("[IMG_BREAK]",), "mistral3": ("[IMG_BREAK]",), "cohere2_vision": ("<|IMG_LINE_BREAK|>",),
                "molmo2": ("<im_col>", "<im_end>", "<im_start>")}
SPAN_MARKERS = {
    "qwen3_vl": ("<|vision_start|>", "<|vision_end|>"),
    "qwen2_5_vl": ("<|vision_start|>", "<|vision_end|>"),
    "internvl": ("<img>", "</img>"),
    "llava_onevision": (None, None),
    "llava_pixtral": (None, "[IMG_END]"),
    "gemma3": ("<start_of_image>", "<end_of_image>"),
    "qwen2_vl": ("<|vision_start|>", "<|vision_end|>"),
    "idefics3": ("<global-img>", "<fake_token_around_image>"),
    "smolvlm": ("<global-img>", "<fake_token_around_image>"),
    "qwen3_vl_moe": ("<|vision_start|>", "<|vision_end|>"),
    "qwen3_5": ("<|vision_start|>", "<|vision_end|>"),
    "qwen3_5_moe": ("<|vision_start|>", "<|vision_end|>"),
    "kimi_k25": ("<|media_content|>", "<|media_end|>"),
    "janus": ("<begin_of_image>", "<end_of_image>"),
    "deepseek_vl_hybrid": (None, None),
    "lighton_ocr": (None, None),
    "ovis2": ("<IMG_START>", "<IMG_GRID>"),
    **dict.fromkeys(("glm46v", "glm4v_moe", "glm_ocr", "glmga"), ("<|begin_of_image|>", "<|end_of_image|>")),
    "cohere2_vision": ("<|START_OF_IMG|>", "<|END_OF_IMG|>"),
    "lfm3_vl": ("<|vision_start|>", "<|vision_end|>"),
    "gemma4_unified": ("<|image>", "<image|>"),
    "granite_docling": ("<row_1_col_1>", "Ċ"),
    **dict.fromkeys(("exaone4_5", "cosmos3_omni"), ("<|vision_start|>", "<|vision_end|>")),
    **dict.fromkeys(("muse_glimmer", "muse_spark"), ("<|image_start|>", "<|image_end|>")),
    "qwen2_5_omni_thinker": ("<|vision_bos|>", "<|vision_eos|>"),
    "qwen3_omni_moe_thinker": ("<|vision_start|>", "<|vision_end|>"),
    "paddleocr_vl": ("<|IMAGE_START|>", "<|IMAGE_END|>"),
    "video_llama_3": (None, None),
    "ernie4_5_vl_moe": ("<|IMAGE_START|>", "<|IMAGE_END|>"),
    "molmo2": ("<low_res_im_start>", None),
    "lfm2_vl": ("<|image_start|>", "<|image_end|>"),
    "hyperclovax_vision_v2": ("<|image_start|>", "<|image_end|>"),
    "qianfan_ocr": ("<img>", "</img>"),
    **dict.fromkeys(("vipllava", "video_llava", "llava_next_video", "fast_vlm"), (None, None)),
    "aria": ("<fim_prefix>", "<fim_suffix>"),
    "llava_clip": (None, None),
    "llava_next": (None, None),
    "mistral3": (None, "[IMG_END]"),
    "glm4v": ("<|begin_of_image|>", "<|end_of_image|>"),
    "gemma4": ("<|image>", "<image|>"),
    "deepseek_vl": (None, None),
}


def _three_image_conversation(images):
    content = [
        {"type": "text", "text": "Here is the first picture: "},
        {"type": "image", "image": images[0]},
        {"type": "text", "text": " then a second one, "},
        {"type": "image", "image": images[1]},
        {"type": "text", "text": " and the third: "},
        {"type": "image", "image": images[2]},
        {"type": "text", "text": " Which image shows the dog? Answer A, B or C."},
    ]
    return [{"role": "user", "content": content}]


def _inputs(processor, images):
    return processor.apply_chat_template(
        _three_image_conversation(images),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )


def _runs(ids: list[int], members: set[int]) -> list[tuple[int, int]]:
    """Half-open [start, end) index ranges of maximal runs of ids in `members`."""
    runs, start = [], None
    for index, token in enumerate([*ids, None]):
        if token in members and start is None:
            start = index
        elif token not in members and start is not None:
            runs.append((start, index))
            start = None
    return runs


@pytest.fixture(scope="module")
def images():
    return random_images(3, seed=7)


@pytest.mark.parametrize("arch", ARCHS)
def test_three_image_prompt_gives_one_image_span_per_image(arch, images):
    model, processor = build_tiny(arch)
    info = describe(arch)
    tokenizer = processor.tokenizer
    assert model.config.image_token_id == info["image_token_id"]
    assert tokenizer.convert_ids_to_tokens(info["image_token_id"]) == info["image_token"]

    ids = _inputs(processor, images)["input_ids"][0].tolist()
    span_ids = {info["image_token_id"], *tokenizer.convert_tokens_to_ids(list(SPAN_FILLERS.get(arch, ())))}
    spans = _runs(ids, span_ids)
    visual, span_length = TOKENS_PER_IMAGE[arch]
    assert [end - start for start, end in spans] == [span_length] * 3
    assert [sum(ids[i] == info["image_token_id"] for i in range(*span)) for span in spans] == [visual] * 3
    before, after = SPAN_MARKERS[arch]
    for start, end in spans:
        if before:
            assert tokenizer.convert_ids_to_tokens(ids[start - 1]) == before
        if after:
            assert tokenizer.convert_ids_to_tokens(ids[end]) == after


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_logits_and_image_features_reach_the_language_model(arch, images):
    """get_image_features (as `describe` says) yields exactly the LM input embeddings at image tokens."""
    model, processor = build_tiny(arch)
    info = describe(arch)
    inputs = _inputs(processor, images)
    language_model = operator.attrgetter(info["decoder_layers"].rsplit(".", 1)[0])(model)
    seen = {}
    handle = language_model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.update(embeds=kwargs["inputs_embeds"]), with_kwargs=True
    )
    with torch.no_grad():
        logits = model(**inputs).logits
        accepted = inspect.signature(model.model.get_image_features).parameters
        features = model.model.get_image_features(**{k: v for k, v in inputs.items() if k in accepted}).pooler_output
    handle.remove()

    seq_len = inputs["input_ids"].shape[1]
    assert logits.shape == (1, seq_len, len(processor.tokenizer))
    assert torch.isfinite(logits).all()
    if isinstance(features, torch.Tensor):
        features = features.reshape(-1, features.shape[-1])
    else:
        assert len(features) == (1 if arch in FEATURES_PER_SAMPLE else 3)
        features = torch.cat(list(features))
    image_positions = inputs["input_ids"][0] == info["image_token_id"]
    assert features.shape == (int(image_positions.sum()), model.config.get_text_config().hidden_size)
    placeholders = model.get_input_embeddings()(inputs["input_ids"])[0, image_positions] if arch in FEATURES_ADDED else 0
    torch.testing.assert_close(seen["embeds"][0, image_positions], placeholders + features, rtol=0, atol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_eager_attention_gives_the_sdpa_logits(arch, images):
    sdpa_model, processor = build_tiny(arch, seed=3)
    eager_model, _ = build_tiny(arch, seed=3, attn_implementation="eager")
    inputs = _inputs(processor, images)
    with torch.no_grad():
        sdpa = sdpa_model(**inputs).logits
        eager = eager_model(**inputs, output_attentions=True)
    assert eager_model.config.get_text_config()._attn_implementation == "eager"
    # one attention map per softmax-attention layer (a hybrid decoder's linear-attention layers give none)
    layers = operator.attrgetter(describe(arch)["decoder_layers"])(eager_model)
    assert len(eager.attentions) == sum(hasattr(layer, "self_attn") for layer in layers) > 0
    assert eager.attentions[0].shape[1] == 4
    torch.testing.assert_close(eager.logits, sdpa, rtol=0, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_save_load_round_trip_gives_identical_logits(arch, images, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, processor = build_tiny(arch, seed=1)
    folder = save_tiny(arch, tmp_path, seed=1)
    with pytest.raises(UserInputError, match="already exists"):
        save_tiny(arch, tmp_path, seed=1)
    loaded = AutoModelForImageTextToText.from_pretrained(folder).eval()
    loaded_processor = AutoProcessor.from_pretrained(folder)
    assert type(loaded) is type(model) and type(loaded_processor) is type(processor)

    inputs, loaded_inputs = _inputs(processor, images), _inputs(loaded_processor, images)
    assert inputs.keys() == loaded_inputs.keys()
    for key in inputs:
        assert torch.equal(inputs[key], loaded_inputs[key]), key
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, loaded(**loaded_inputs).logits)


@pytest.mark.parametrize("arch", ARCHS)
def test_same_seed_same_weights_and_tokenizer(arch):
    first, first_processor = build_tiny(arch, seed=5)
    second, second_processor = build_tiny(arch, seed=5)
    other, _ = build_tiny(arch, seed=6)
    first_state, second_state, other_state = first.state_dict(), second.state_dict(), other.state_dict()
    assert first_state.keys() == second_state.keys()
    assert all(torch.equal(first_state[name], second_state[name]) for name in first_state)
    assert not all(torch.equal(first_state[name], other_state[name]) for name in first_state)
    assert (
        first_processor.tokenizer.backend_tokenizer.to_str() == second_processor.tokenizer.backend_tokenizer.to_str()
    )


@pytest.mark.parametrize(
    ("arch", "size", "expected"),
    [
        # 128x64 px: 2 tiles of 64 px + a 64-px thumbnail, 4 tokens each.
        ("internvl", (128, 64), 12),
        # A prompt's only image goes any-res: 2x2 base + (2x2 tiles x 2x2 tokens) + 4 row newlines.
        ("llava_onevision", (64, 64), 24),
    ],
)
def test_tiled_image_stays_one_span(arch, size, expected):
    model, processor = build_tiny(arch)
    conversation = [
        {
            "role": "user",
            "content": [{"type": "image", "image": random_images(1, size=size)[0]}, {"type": "text", "text": "What?"}],
        }
    ]
    inputs = processor.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    ids = inputs["input_ids"][0].tolist()
    assert [end - start for start, end in _runs(ids, {model.config.image_token_id})] == [expected]
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).logits).all()


def test_building_leaves_the_callers_random_state_alone():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    build_tiny("qwen3_vl", seed=0)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("arch", ARCHS)
def test_tokenizer_offsets_cover_the_rendered_text(arch, images):
    _, processor = build_tiny(arch)
    rendered = processor.apply_chat_template(_three_image_conversation(images), add_generation_prompt=True)
    # The template already writes any BOS; the processor then tokenises without special tokens too.
    encoding = processor.tokenizer(rendered, return_offsets_mapping=True, add_special_tokens=False)
    offsets = encoding["offset_mapping"]
    assert offsets[0][0] == 0 and offsets[-1][1] == len(rendered)
    assert all(prev_end == start for (_, prev_end), (start, _) in zip(offsets, offsets[1:]))
    tokens = processor.tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    special = set(processor.tokenizer.all_special_tokens) | set(processor.tokenizer.get_added_vocab())
    for token, (start, end) in zip(tokens, offsets):
        if token in special:
            assert rendered[start:end] == token
    question = rendered.index("Which image")
    first = next(i for i, (start, end) in enumerate(offsets) if start <= question < end)
    assert processor.tokenizer.decode(encoding["input_ids"][first:]).startswith("Which image")


@pytest.mark.parametrize("arch", ARCHS)
def test_size_overrides_widen_the_language_model(arch, images):
    model, processor = build_tiny(arch, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4)
    info = describe(arch)
    layers = operator.attrgetter(info["decoder_layers"])(model)
    attention_layer = next(layer for layer in layers if hasattr(layer, "self_attn"))  # hybrid: not layer 0
    o_proj = operator.attrgetter(info["o_proj"])(attention_layer)
    assert len(layers) == 8
    assert (o_proj.in_features, o_proj.out_features) == (8 * 16, 128)
    attention = attention_layer.self_attn
    if hasattr(attention, "kv_b_proj"):  # latent attention: every head's keys and values from one latent
        assert attention.kv_b_proj.out_features == 8 * (16 + 16)
    else:
        assert attention.k_proj.out_features == 4 * 16
    with torch.no_grad():
        assert torch.isfinite(model(**_inputs(processor, images)).logits).all()


def test_bad_arguments_raise_user_input_errors():
    with pytest.raises(UserInputError, match="qwen3_vl"):
        build_tiny("qwen3")
    with pytest.raises(UserInputError, match="unknown tiny-model size"):
        build_tiny("qwen3_vl", num_layers=2)
    with pytest.raises(UserInputError, match="multiple"):
        TextSizes.from_overrides(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(UserInputError, match="qwen2_5_vl needs hidden_size"):
        build_tiny("qwen2_5_vl", hidden_size=96)
    model, _ = build_tiny("qwen3_vl", hidden_size=96)
    assert model.model.language_model.layers[0].self_attn.o_proj.weight.shape == (96, 64)
