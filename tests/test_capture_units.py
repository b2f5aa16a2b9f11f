"""The parts of harness.capture on hand-worked inputs, and the errors users see."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn
from transformers.masking_utils import and_masks, causal_mask_function, sdpa_mask, sliding_window_overlay

from harness.capture import answer_token_ids, capture_heads
from harness.capture.adapters import language_model, resolve_adapter
from harness.capture.attention import attention_rows, routed_attention
from harness.capture.readout import readout_indices, validate_positions
from harness.capture.spans import (
    TextPiece,
    image_spans,
    locate_pieces,
    query_token,
    rendered_to_expanded,
    split_prompt,
)
from harness.tiny_models import build_tiny, random_images
from icir_common import UserInputError


def test_locate_pieces_follows_interleaved_trimmed_and_images_first_templates():
    pieces = split_prompt("Look: <image> the cat <image>  sits here ", 2)
    assert pieces == ["Look: ", " the cat ", "  sits here "]
    interleaved = "<u>Look: <I> the cat <I>  sits here </u>"
    placeholders = [(9, 12), (21, 24)]
    located = locate_pieces(interleaved, pieces, placeholders)
    assert located == [TextPiece(0, 3, 6), TextPiece(13, 12, 9), TextPiece(29, 24, 12)]
    trimmed = "<u>Look:<I>the cat<I>sits here</u>"  # a template that trims text items
    located = locate_pieces(trimmed, pieces, [(8, 11), (18, 21)])
    assert located == [TextPiece(0, 3, 5), TextPiece(14, 11, 7), TextPiece(31, 21, 9)]
    assert located[1].to_rendered(14) == 11 and located[1].to_rendered(13) is None
    images_first = "<u><I><I>Look:  the cat   sits here </u>"
    located = locate_pieces(images_first, pieces, [(3, 6), (6, 9)])
    assert [images_first[p.rendered_start : p.rendered_start + p.length] for p in located] == pieces


def test_locate_pieces_rejects_a_template_that_rewrites_text():
    with pytest.raises(UserInputError, match="does not appear"):
        locate_pieces("<u>LOOK: <I></u>", ["Look: ", ""], [(9, 12)])


def test_query_token_maps_prompt_chars_through_rendering_and_expansion():
    prompt = "ab <image> zebra!"
    # Rendered: "[U]ab <I> zebra![E]"; the placeholder <I> (6..9) expands to "<I><I><I>" (6..15).
    pieces = [TextPiece(0, 3, 3), TextPiece(10, 9, 7)]
    replacements = [{"type": "image", "span": (6, 9), "new_span": (6, 15)}]
    assert rendered_to_expanded(4, replacements) == 4
    assert rendered_to_expanded(9, replacements) == 15
    # Tokens of the expanded text "[U]ab <I><I><I> zebra![E]".
    offsets = torch.tensor([[0, 3], [3, 5], [5, 6], [6, 9], [9, 12], [12, 15], [15, 21], [21, 22], [22, 25], [0, 0]])
    zebra = (prompt.index("zebra"), prompt.index("zebra") + 5)
    assert query_token(prompt, zebra, pieces, replacements, offsets) == 6
    assert query_token(prompt, (0, 1), pieces, replacements, offsets) == 1
    assert query_token(prompt, (10, 17), pieces, replacements, offsets) == 7
    with pytest.raises(UserInputError, match=r"\(3, 8\).*'<imag'"):
        query_token(prompt, (3, 8), pieces, replacements, offsets)
    with pytest.raises(UserInputError, match="not a non-empty span"):
        query_token(prompt, (5, 40), pieces, replacements, offsets)


def test_image_spans_merge_runs_of_one_image_and_reject_mismatches():
    image, brk = 7, 8
    # Text 1 | image 0: 7 7 8 7 7 | text | image 1: 7 7 | text
    ids = torch.tensor([1, image, image, brk, image, image, 2, image, image, 3])
    offsets = torch.tensor([[i, i + 1] for i in range(10)])
    replacements = [
        {"type": "image", "span": (1, 2), "new_span": (1, 6)},
        {"type": "image", "span": (3, 4), "new_span": (7, 9)},
    ]
    spans, image_of_token = image_spans(ids, offsets, replacements, image)
    assert spans == [(1, 6), (7, 9)]
    assert image_of_token.tolist() == [-1, 0, 0, -1, 0, 0, -1, 1, 1, -1]
    stray = ids.clone()
    stray[9] = image  # an image token in the text
    with pytest.raises(UserInputError, match="2 of 2 image.*1 image token"):
        image_spans(stray, offsets, replacements, image)
    missing = ids.clone()
    missing[7:9] = 4  # image 1 has no image tokens
    with pytest.raises(UserInputError, match="1 of 2 image"):
        image_spans(missing, offsets, replacements, image)


def test_readout_positions():
    assert readout_indices(("cattok", "+1", "+4", "mid", "last"), cattok=10, last=21) == [10, 11, 14, 15, 21]
    assert readout_indices(("last",), cattok=None, last=7) == [7]
    with pytest.raises(UserInputError, match="past the last"):
        readout_indices(("+4",), cattok=19, last=21)
    with pytest.raises(UserInputError, match="need a query_char_span"):
        readout_indices(("mid",), cattok=None, last=21)
    with pytest.raises(UserInputError, match="unknown readout"):
        validate_positions(("cattok", "+5"))
    with pytest.raises(UserInputError, match="repeat"):
        validate_positions(("last", "last"))


def _full_attention(query, key, allowed, scaling):
    """Brute force: the whole T x T attention with repeated KV heads, then masked softmax."""
    expanded = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    scores = (query @ expanded.transpose(-1, -2)) * scaling
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)


@pytest.mark.parametrize("window", [None, 3])
def test_attention_rows_equal_brute_force_rows_with_and_without_a_materialised_mask(window):
    torch.manual_seed(0)
    batch, heads, kv_heads, length, d_h = 2, 4, 2, 9, 8
    query = torch.randn(batch, heads, length, d_h)
    key = torch.randn(batch, kv_heads, length, d_h)
    rows = torch.tensor([[8, 3], [5, 6]])
    q_idx, kv_idx = torch.arange(length)[:, None], torch.arange(length)[None, :]
    allowed = (kv_idx <= q_idx) & ((kv_idx > q_idx - window) if window else True)
    padding = torch.ones(batch, length, dtype=torch.bool)
    padding[1, 7:] = False  # right padding of the second sample
    full = _full_attention(query, key, allowed & padding[:, None, None, :], 0.3)
    expected = torch.stack([full[b][:, rows[b]] for b in range(batch)])
    rebuilt = attention_rows(query, key, padding, rows, 0.3, is_causal=True, sliding_window=window)
    torch.testing.assert_close(rebuilt, expected, atol=1e-6, rtol=0)
    mask_4d = (allowed & padding[:, None, :])[:, None]  # as sdpa receives it
    read = attention_rows(query, key, mask_4d, rows, 0.3)
    torch.testing.assert_close(read, expected, atol=1e-6, rtol=0)
    function = and_masks(causal_mask_function, sliding_window_overlay(window)) if window else causal_mask_function
    built = sdpa_mask(batch, length, length, mask_function=function, attention_mask=padding, allow_is_causal_skip=False)
    torch.testing.assert_close(attention_rows(query, key, built, rows, 0.3), expected, atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def qwen():
    return build_tiny("qwen3_vl", seed=4)


def test_answer_token_ids(qwen):
    _, processor = qwen
    ids = answer_token_ids(processor, ["A", "B", "C"])
    assert ids == [processor.tokenizer.convert_tokens_to_ids(t) for t in ("A", "B", "C")]
    with pytest.raises(UserInputError, match="not a single token"):
        answer_token_ids(processor, ["zebra crossing"])
    with pytest.raises(UserInputError, match="share token ids"):
        answer_token_ids(processor, ["A", "A"])


def test_user_errors_of_capture_heads(qwen):
    model, processor = qwen
    prompt = "First <image> then <image> which shows a zebra?"
    images = random_images(2)
    with pytest.raises(UserInputError, match="2 <image> placeholder.*1 image"):
        capture_heads(model, processor, prompt, images[:1], (0, 5))
    inside_placeholder = (prompt.index("<image>") + 1, prompt.index("<image>") + 3)
    with pytest.raises(UserInputError, match=r"query_char_span \(7, 9\).*'First <' \['im'\]"):
        capture_heads(model, processor, prompt, images, inside_placeholder)
    with pytest.raises(UserInputError, match="unknown capture mode"):
        capture_heads(model, processor, prompt, images, (0, 5), mode="approx")
    with pytest.raises(UserInputError, match="head capture needs a transformers model; got a Linear without a config"):
        capture_heads(nn.Linear(2, 2), processor, prompt, images, (0, 5))
    text_only = language_model(model, resolve_adapter(model))  # a decoder alone is no LVLM: refused with the reason
    with pytest.raises(UserInputError, match=r"cannot measure Qwen3VLTextModel \(model_type='qwen3_vl_text'\): "
                                             "a text-only model"):
        resolve_adapter(text_only)


def test_capture_restores_the_model_after_an_error(qwen):
    model, processor = qwen
    decoder = language_model(model, resolve_adapter(model))

    def fail(*_):
        raise RuntimeError("layer failed")

    breaker = decoder.layers[2].register_forward_hook(fail)
    try:
        with pytest.raises(RuntimeError, match="layer failed"):
            capture_heads(model, processor, "a <image> zebra", random_images(1), (10, 15))
    finally:
        breaker.remove()
    assert decoder.config._attn_implementation == "sdpa"
    hooked = [m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks]
    assert hooked == []


def test_exact_capture_refuses_kernels_whose_masks_it_cannot_read():
    flex_model = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flex_attention"))
    with pytest.raises(UserInputError, match="not 'flex_attention'.*attn_implementation='sdpa'"):
        with routed_attention(flex_model, []):
            pass
