"""Prefix-shared ablation cells equal one full forward per cell, on every tiny architecture.

The reference is independent of the sharing: the whole prompt runs through the model with the
cell's heads zeroed from the ablation start (`ablate_heads` with a token span); the shared run
prefills the prefix once and runs only the suffix per batch of cells. Last-position logits agree
to 1e-5 (float32) and the greedy answers are identical.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import transformers

from harness.ablation.cells import can_share_prefix, full_forward_cells, prefix_shared_cells
from harness.capture.ablation import ablate_heads
from harness.capture.adapters import image_token_id, language_model, resolve_adapter
from harness.capture.inputs import CaptureRequest, encode_requests
from harness.ablation.cells import _repeated, _suffix_positions
from harness.ablation.shared_prefix import shared_prefix, shared_prefix_supported
from harness.lm_eval_plugin.generation import GreedySettings
from harness.tiny_models import ARCHS, build_tiny, random_images

PROMPT = "<image><image><image>\nFor the image with a cat, is there a dog? Answer Yes or No."
ANCHOR = PROMPT.index("a cat")
CELLS = [(), ("L00H00", "L01H02"), ("L00H01",), ("L01H00", "L01H01", "L00H03"), ("L00H02",)]
SETTINGS = GreedySettings({}, (), 5, ())


@pytest.fixture(autouse=True)
def no_grad():
    with torch.no_grad():
        yield


@pytest.fixture(params=["cpu_flash_merge", "one_masked_sdpa"])
def kernel(request, monkeypatch):
    """Both routes of the shared-prefix kernel: CPU flash + log-sum-exp merge, and the one masked
    sdpa call that other devices take (forced here by hiding the CPU kernel)."""
    import harness.ablation.shared_prefix as shared

    if request.param == "one_masked_sdpa":
        monkeypatch.setattr(shared, "_CPU_FLASH", None)
    elif shared._CPU_FLASH is None:
        pytest.skip("this torch has no CPU flash kernel")
    return request.param


@pytest.fixture(scope="module", params=ARCHS)
def setup(request):
    torch.manual_seed(0)
    model, processor = build_tiny(request.param, seed=1)
    doc = CaptureRequest(PROMPT, random_images(3, seed=2), (ANCHOR, ANCHOR + 1))
    inputs, (layout,) = encode_requests(processor, [doc], image_token_id(model, resolve_adapter(model)))
    return model, processor, inputs, layout


def _full_logits(model, inputs, heads, start):
    with ablate_heads(model, list(heads), (start, None)):
        return model(**inputs).logits[0, -1]


def test_prefix_shared_equals_full_forward(setup, kernel):
    model, processor, inputs, layout = setup
    start = layout.cattok  # the first anchor token
    assert can_share_prefix(layout, start) is None
    shared = prefix_shared_cells(model, processor.tokenizer, inputs, layout, start, CELLS, SETTINGS, batch=3)
    full = full_forward_cells(model, processor.tokenizer, inputs, layout, start, CELLS, SETTINGS)
    assert shared == full
    # and the ablation changes something, so the comparison is not vacuous
    assert len({tuple(t) for t in full}) > 1 or not torch.allclose(
        _full_logits(model, inputs, CELLS[0], start), _full_logits(model, inputs, CELLS[1], start))


def _suffix_logits(model, inputs, start, rows, share):
    """Last-position logits of each row's suffix after a one-row prefix cache (either route)."""
    length = inputs["input_ids"].shape[1]
    cache = transformers.DynamicCache(config=model.config)
    prefix = {k: v[:, :start] if torch.is_tensor(v) and v.dim() == 2 and v.shape[1] == length else v
              for k, v in inputs.items()}
    model(**prefix, cache=cache, use_cache=True)
    positions = _suffix_positions(model, inputs, start, length, len(rows))
    if share:
        own, routing = transformers.DynamicCache(config=model.config), shared_prefix(
            language_model(model, resolve_adapter(model)), cache)
        positions = torch.arange(start, length)[None].expand(len(rows), -1) if positions is None else positions
    else:
        own, routing = _repeated(cache, len(rows)), contextlib.nullcontext()
    suffix = inputs["input_ids"][:, start:].expand(len(rows), -1)
    with routing, ablate_heads(model, rows, (0, None), per_row=True):
        mask = torch.ones(len(rows), length - (start if share else 0), dtype=torch.long)
        return model(input_ids=suffix, attention_mask=mask, position_ids=positions, cache=own,
                     use_cache=True).logits[:, -1]


@pytest.mark.parametrize("share", [True, False], ids=["shared_prefix_kernel", "repeated_cache"])
def test_suffix_logits_match_to_1e5(setup, share, kernel):
    model, _, inputs, layout = setup
    if share and shared_prefix_supported(language_model(model, resolve_adapter(model))) is not None:
        pytest.skip("sliding-window attention or a hybrid decoder: cells repeat the prefix cache instead")
    start = layout.cattok
    rows = [list(h) for h in CELLS]
    logits = _suffix_logits(model, inputs, start, rows, share)
    for row, heads in enumerate(CELLS):
        torch.testing.assert_close(logits[row], _full_logits(model, inputs, heads, start), atol=1e-5, rtol=0)


def test_which_architectures_share_the_prefix_kernel():
    routed = {arch: shared_prefix_supported(language_model(m, resolve_adapter(m)))
              for arch in ARCHS for m in [build_tiny(arch, seed=1)[0]]}
    sliding = ("gemma3", "gemma4", "gemma4_unified", "cohere2_vision", "exaone4_5", "muse_glimmer", "muse_spark",
               "lfm3_vl")
    assert routed == {**dict.fromkeys(ARCHS), **dict.fromkeys(sliding, "sliding-window attention"),
                      **dict.fromkeys(("qwen3_5", "qwen3_5_moe", "lfm2_vl"), "a hybrid decoder: its cache holds "
                                      "recurrent states besides keys"),
                      "kimi_k25": "latent attention: the cache holds compressed latents, not per-head keys"}


def test_images_after_the_ablation_start_need_full_forwards(setup):
    _, _, _, layout = setup
    assert can_share_prefix(layout, layout.image_spans[-1][0]) == "an image span lies after the ablation start"
