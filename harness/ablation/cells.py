"""Every cell of one document, prefilled once: the prefix before the ablation start is shared.

Ablation zeroes heads only from the first anchor token on (§6.1), and attention is causal, so the
KV cache of the tokens before it is the same in every cell. `prefix_shared_cells` runs that
prefix once; a batch of cells then runs only the suffix (anchor phrase to the last prefill
position) under each row's heads (`ablate_heads(..., per_row=True)`), attending to the one prefix
cache through `shared_prefix` (or, for sliding-window models, to a copy per row), and decodes
the rows together (`generation.greedy_rows`), the heads still zeroed per row with
`through_generation`. `full_forward_cells` is the reference: one full
forward per cell with the heads zeroed from the ablation start. Both return the same tokens to
float32 rounding (``tests/test_ablation_cells.py``, every tiny architecture).

The prefix cannot be shared when an image span starts at or after the ablation start (the
suffix would need pixel inputs), or when the suffix is a single token (the hook takes a
one-token call for a generation step); `can_share_prefix` says so and the grid falls back to
full forwards.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence

import torch
import transformers

from harness.ablation.shared_prefix import shared_prefix, shared_prefix_supported
from harness.capture.ablation import ablate_heads
from harness.capture.adapters import language_model, resolve_adapter
from harness.capture.inputs import SampleLayout
from harness.lm_eval_plugin.generation import GreedySettings, continue_greedy, greedy_rows

ROPE_INPUTS = ("mm_token_type_ids", "image_grid_thw", "video_grid_thw", "second_per_grid_ts", "attention_mask")


# Cells per suffix forward: rows that read the one prefix cache are cheap, so one document's whole
# N = 10 grid (37 cells) runs as one batch (bench/ablation_grid.py); rows that each hold a copy
# of the prefix cache cost its memory.
SHARED_BATCH, REPEATED_BATCH = 40, 8


def _tokens(inputs, end: int) -> dict:
    """`inputs` with every per-token tensor (``[1, T]``: ids, mask, token types) cut to ``:end``."""
    length = inputs["input_ids"].shape[1]
    return {name: value[:, :end] if torch.is_tensor(value) and value.dim() == 2 and value.shape[1] == length
            else value for name, value in inputs.items()}


def can_share_prefix(layout: SampleLayout, start: int) -> str | None:
    """None when the cells can share the prefix before token `start`, else why not."""
    if any(span_start >= start for span_start, _ in layout.image_spans):
        return "an image span lies after the ablation start"
    if layout.last - start < 1:
        return "the suffix from the ablation start is a single token"
    return None


def _suffix_positions(model, inputs, start: int, end: int, rows: int) -> torch.Tensor | None:
    """Position ids of tokens ``start:end`` for `rows` rows, for models with multimodal RoPE.

    Qwen-VL models place text after images at positions their ``get_rope_index`` computes from
    the whole sequence (M-RoPE, ``[3, B, T]``); a multi-token call on a filled cache does not
    derive them itself, so they are computed from the full input and sliced. Other models take
    ``cache_position``-based positions, which are already right (None).
    """
    rope_index = getattr(getattr(model, "model", None), "get_rope_index", None)
    if rope_index is None:
        return None
    given = {name: inputs[name] for name in ROPE_INPUTS if inputs.get(name) is not None}
    positions, _ = rope_index(inputs["input_ids"], **given)
    return positions[..., start:end].expand(-1, rows, -1)


def _repeated(cache, rows: int):
    """A cache holding `cache`'s positions `rows` times over (batch dimension); `cache` is left as it is.

    The batch operations of a transformers ``DynamicCache`` replace each attention layer's tensors
    rather than writing into them, so a shallow copy of the layers is enough. A hybrid decoder's
    linear-attention layers (``LinearAttentionLayer``: ``conv_states`` / ``recurrent_states``,
    which the model updates in place, and no ``batch_repeat_interleave``) get repeated copies.
    """
    fork = copy.copy(cache)
    fork.layers = [copy.copy(layer) for layer in cache.layers]
    for layer in fork.layers:
        for name in ("conv_states", "recurrent_states"):
            states = getattr(layer, name, None)
            if states is not None:
                setattr(layer, name, {index: None if state is None else state.repeat_interleave(rows, dim=0)
                                      for index, state in states.items()})
        if hasattr(layer, "batch_repeat_interleave"):
            layer.batch_repeat_interleave(rows)
    return fork


def _on_device(model, inputs) -> tuple[torch.device, dict]:
    """The model's device and `inputs` (a processor's ``BatchFeature`` or dict) moved onto it."""
    device = next(model.parameters()).device
    return device, {name: value.to(device) if hasattr(value, "to") else value for name, value in inputs.items()}


@torch.no_grad()
def prefix_shared_cells(model, tokenizer, inputs, layout: SampleLayout, start: int,
                        cells: Sequence[Sequence[str]], settings: GreedySettings, through_generation: bool = False,
                        batch: int | None = None) -> list[list[int]]:
    """Generated token ids of every cell of one document, the prefix before `start` run once.

    Args:
        inputs: the document's encoding (`encode_requests` of one request): ``input_ids`` [1, T]...
        layout: its `SampleLayout` (``last`` is the last prefill token).
        start: the ablation start token (the first anchor token).
        cells: per cell the ``LxxHyy`` heads to zero (empty: the unablated baseline).
        settings: the task's greedy decoding settings.
        through_generation: keep zeroing the heads at every generated token (App. I.1).
        batch: cells run together in one suffix forward; default `SHARED_BATCH` when the rows
            attend to the one prefix cache (their own caches hold only the suffix), else
            `REPEATED_BATCH` (each row then holds a copy of the prefix cache).

    Returns:
        Per cell the generated ids, first token included.
    """
    device, inputs = _on_device(model, inputs)
    end = layout.last + 1
    cache = transformers.DynamicCache(config=model.config)
    model(**_tokens(inputs, start), cache=cache, use_cache=True)
    inputs = _tokens(inputs, end)
    input_ids = inputs["input_ids"]
    decoder = language_model(model, resolve_adapter(model))
    share = shared_prefix_supported(decoder) is None
    batch = batch or (SHARED_BATCH if share else REPEATED_BATCH)
    generated: list[list[int]] = []
    for begin in range(0, len(cells), batch):
        rows = [list(heads) for heads in cells[begin:begin + batch]]
        suffix = input_ids[:, start:].expand(len(rows), -1)
        positions = _suffix_positions(model, inputs, start, end, len(rows))
        if share:  # the rows' cache holds only their own tokens: the kernel reads the prefix itself
            own = transformers.DynamicCache(config=model.config)
            if positions is None:
                positions = torch.arange(start, end, device=device)[None].expand(len(rows), -1)
            routing = shared_prefix(decoder, cache)
        else:
            own = _repeated(cache, len(rows))
            routing = contextlib.nullcontext()
        attention = torch.ones(len(rows), end - (start if share else 0), dtype=torch.long, device=device)
        with routing, ablate_heads(model, rows, (0, None), through_generation, per_row=True):
            out = model(input_ids=suffix, attention_mask=attention, position_ids=positions, cache=own,
                        use_cache=True)
            following = None if positions is None else positions[..., -1:] + 1
            generated += greedy_rows(model, tokenizer, input_ids, own, out.logits[:, -1], settings, following,
                                     start if share else 0)
    return generated


@torch.no_grad()
def full_forward_cells(model, tokenizer, inputs, layout: SampleLayout, start: int, cells: Sequence[Sequence[str]],
                       settings: GreedySettings, through_generation: bool = False) -> list[list[int]]:
    """`prefix_shared_cells` without sharing: one full forward per cell, heads zeroed from `start`."""
    inputs = _tokens(_on_device(model, inputs)[1], layout.last + 1)
    generated = []
    for heads in cells:
        cache = transformers.DynamicCache(config=model.config)
        with ablate_heads(model, list(heads), (start, None), through_generation):
            out = model(**inputs, cache=cache, use_cache=True)
            generated.append(continue_greedy(model, tokenizer, inputs["input_ids"], cache, out.logits[0, -1],
                                             settings))
    return generated
