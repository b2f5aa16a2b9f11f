"""ablate_heads against zeroing the o_proj input by hand, on a tiny Qwen3-VL."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.capture import CaptureRequest, ablate_heads
from harness.capture.adapters import attention_modules, resolve_adapter
from harness.capture.inputs import encode_requests
from harness.tiny_models import build_tiny, random_images
from icir_common import UserInputError

PROMPT = "A cat sleeps. <image> A dog barks. <image> For the image with a dog, is there a ball? Yes or No."


@pytest.fixture(scope="module")
def setup():
    model, processor = build_tiny("qwen3_vl", seed=2)
    request = CaptureRequest(PROMPT, random_images(2, seed=5), None)
    inputs, _ = encode_requests(processor, [request], int(model.config.image_token_id))
    return model, inputs, attention_modules(model, resolve_adapter(model))


def _logits(model, inputs):
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits


def _o_proj_inputs(model, inputs, modules):
    seen = {}
    handles = [
        m.o_proj.register_forward_pre_hook(lambda mod, args, l=l: seen.__setitem__(l, args[0].clone()))
        for l, m in enumerate(modules)
    ]
    try:
        logits = _logits(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
    return seen, logits


def test_ablating_every_head_of_a_layer_equals_zeroing_its_o_proj_input(setup):
    model, inputs, modules = setup
    start, end = 20, inputs["input_ids"].shape[1]

    def zero_by_hand(_module, args):
        states = args[0].clone()
        states[:, start:end] = 0
        return (states,)

    handle = modules[1].o_proj.register_forward_pre_hook(zero_by_hand)
    try:
        expected = _logits(model, inputs)
    finally:
        handle.remove()
    heads = [(1, h) for h in range(model.config.text_config.num_attention_heads)]
    with ablate_heads(model, heads, (start, None)):
        ablated = _logits(model, inputs)
    assert torch.equal(ablated, expected)
    assert not torch.allclose(ablated, _logits(model, inputs))


def test_ablating_one_head_zeroes_only_its_slice_inside_the_span(setup):
    model, inputs, modules = setup
    plain, _ = _o_proj_inputs(model, inputs, modules)
    d_h = modules[0].head_dim
    with ablate_heads(model, ["L02H01"], (10, 30)):
        ablated, _ = _o_proj_inputs(model, inputs, modules)
    for layer in (0, 1):
        assert torch.equal(ablated[layer], plain[layer])  # upstream layers are untouched
    head = ablated[2][0, :, d_h : 2 * d_h]
    assert torch.all(head[10:30] == 0) and torch.equal(head[:10], plain[2][0, :10, d_h : 2 * d_h])
    assert head[30:].abs().sum() > 0
    others = torch.cat([ablated[2][0, :, :d_h], ablated[2][0, :, 2 * d_h :]], dim=1)
    expected_others = torch.cat([plain[2][0, :, :d_h], plain[2][0, :, 2 * d_h :]], dim=1)
    assert torch.equal(others, expected_others)
    assert not torch.equal(ablated[3], plain[3])  # downstream layers see the change


def test_empty_ablation_leaves_logits_bit_identical_and_hooks_are_removed(setup):
    model, inputs, modules = setup
    plain = _logits(model, inputs)
    with ablate_heads(model, []):
        assert torch.equal(_logits(model, inputs), plain)
    with pytest.raises(RuntimeError, match="boom"):
        with ablate_heads(model, [(0, 0), "L03H03"]):
            raise RuntimeError("boom")
    assert all(not m.o_proj._forward_pre_hooks for m in modules)
    assert torch.equal(_logits(model, inputs), plain)


@pytest.mark.parametrize("through_generation", [False, True])
def test_ablation_through_generation_zeroes_decode_steps_only_when_asked(setup, through_generation):
    model, inputs, modules = setup
    d_h = modules[0].head_dim
    seen = []
    with ablate_heads(model, [(2, 0)], (0, None), through_generation=through_generation):
        # Registered after the ablation hook, so it sees the ablated o_proj input of the last token.
        late = modules[2].o_proj.register_forward_pre_hook(lambda m, a: seen.append(a[0][0, -1, :d_h].clone()))
        try:
            with torch.no_grad():
                model.generate(**inputs, max_new_tokens=3, min_new_tokens=3, do_sample=False)
        finally:
            late.remove()
    assert len(seen) == 3
    assert torch.all(seen[0] == 0)  # prefill always ablated
    assert all(bool(torch.all(step == 0)) == through_generation for step in seen[1:])


def test_one_span_per_batch_row_equals_ablating_each_row_alone(setup):
    model, _, _ = setup
    processor = build_tiny("qwen3_vl", seed=2)[1]
    requests = [CaptureRequest(PROMPT, random_images(2, seed=seed), None) for seed in (5, 6)]
    batch, _ = encode_requests(processor, requests, int(model.config.image_token_id))
    spans = [(20, None), (np.int64(10), np.int64(30))]
    with ablate_heads(model, ["L01H00", (2, 3)], spans):
        together = _logits(model, batch)
    for row, span in enumerate(spans):
        alone_inputs, _ = encode_requests(processor, requests[row : row + 1], int(model.config.image_token_id))
        with ablate_heads(model, ["L01H00", (2, 3)], span):
            alone = _logits(model, alone_inputs)
        torch.testing.assert_close(together[row], alone[0], atol=1e-5, rtol=0)
        assert not torch.allclose(alone, _logits(model, alone_inputs))
    with pytest.raises(UserInputError, match="3 ablation spans given for a batch of 2"):
        with ablate_heads(model, [(0, 0)], [(0, None)] * 3):
            _logits(model, batch)


def test_bad_heads_are_user_errors(setup):
    model, _, _ = setup
    with pytest.raises(UserInputError, match="outside"):
        with ablate_heads(model, [(9, 0)]):
            pass
    with pytest.raises(UserInputError, match="LxxHyy"):
        with ablate_heads(model, ["layer2head1"]):
            pass
    with pytest.raises(UserInputError, match=r"cannot ablate head \(2,\)"):
        with ablate_heads(model, [(2,)]):
            pass
