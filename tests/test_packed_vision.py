"""Packed vision attention (one SDPA call for all images) against transformers' per-image SDPA loop.

Reference: the same tiny Qwen3-VL with its vision tower on plain SDPA, which transformers runs
once per image. Equal-size images take the batched path and must give bit-identical logits and
gradients (the demo model's training relies on it to reproduce the shipped weights); images of
different sizes take the per-block path.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from harness.capture import CaptureRequest
from harness.capture.inputs import encode_requests
from harness.demo_model.packed_vision import PACKED_VISION_ATTENTION, packed_sdpa_attention, packed_vision_attention
from harness.tiny_models import build_tiny, random_images

PROMPT = "A cat <image> a dog <image> a bird <image> Which image shows the dog? Answer with a letter."


@pytest.fixture(scope="module")
def model_and_processor():
    model, processor = build_tiny("qwen3_vl", seed=2)
    return model, processor


def _inputs(model, processor, sizes: list[tuple[int, int]]) -> dict[str, torch.Tensor]:
    """Two prompts of three images each, of `sizes` (width, height) px."""
    requests = [CaptureRequest(PROMPT, [random_images(1, seed=10 * row + k, size=size)[0]
                                        for k, size in enumerate(sizes)], (0, 1)) for row in range(2)]
    inputs, _ = encode_requests(processor, requests, int(model.config.image_token_id))
    return inputs


def _logits_and_grads(model, inputs, packed: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with packed_vision_attention(model) if packed else contextlib.nullcontext():
        logits = model(**inputs).logits
    logits.square().mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return logits.detach(), grads


@pytest.mark.parametrize("sizes", [[(64, 64)] * 3, [(64, 64), (64, 32), (32, 96)]], ids=["equal", "mixed"])
def test_packed_matches_per_image_sdpa_bit_for_bit(model_and_processor, sizes):
    model, processor = model_and_processor
    inputs = _inputs(model, processor, sizes)
    patch_counts = set(inputs["image_grid_thw"].prod(-1).tolist())
    assert (len(patch_counts) == 1) == (len(set(sizes)) == 1)
    reference_logits, reference_grads = _logits_and_grads(model, inputs, packed=False)
    logits, grads = _logits_and_grads(model, inputs, packed=True)
    assert torch.equal(logits, reference_logits)
    assert grads.keys() == reference_grads.keys()
    assert any(name.startswith("model.visual.blocks") for name in grads)
    for name in grads:
        assert torch.equal(grads[name], reference_grads[name]), name


def test_packed_kernel_is_called_once_per_layer_for_equal_images(model_and_processor, monkeypatch):
    model, processor = model_and_processor
    inputs = _inputs(model, processor, [(64, 64)] * 3)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(query, *args, **kwargs):
        calls.append(tuple(query.shape))
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    with torch.no_grad(), packed_vision_attention(model):
        model.model.visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
    vision = model.config.vision_config
    patches = int(inputs["image_grid_thw"][0].prod())
    assert calls == [(6, vision.num_heads, patches, vision.hidden_size // vision.num_heads)] * vision.depth


def test_context_restores_the_kernel_and_refuses_non_sdpa(model_and_processor):
    model, _ = model_and_processor
    config = model.model.visual.config
    with pytest.raises(RuntimeError, match="boom"), packed_vision_attention(model):
        assert config._attn_implementation == PACKED_VISION_ATTENTION
        raise RuntimeError("boom")
    assert config._attn_implementation == "sdpa"
    config._attn_implementation = "eager"
    try:
        with pytest.raises(ValueError, match="vision tower runs 'eager'"), packed_vision_attention(model):
            pass
    finally:
        config._attn_implementation = "sdpa"


def test_packed_kernel_refuses_a_mask():
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(ValueError, match="unmasked"):
        packed_sdpa_attention(None, q, q, q, torch.ones(1, 1, 4, 4, dtype=torch.bool), torch.tensor([0, 4]))
