"""Attention rows at readout positions, computed beside the model's own attention kernel.

`routed_attention` registers, with transformers' ``AttentionInterface``, one wrapper per base
kernel (``head_capture_<base>``, e.g. ``head_capture_sdpa``). The wrapper returns the base
kernel's output unchanged and, for the language-model attention modules it was given, also hands
the already normalised and rotated query/key and the layer's mask to a callback. `attention_rows`
turns those into the post-softmax rows A[p, :] for the readout positions p only: nothing of size
T x T is built beyond what the model's own mask already is.

`proxy_rows` is the paper's Eq. 3 proxy from the direct q_proj/k_proj outputs.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import (
    ALL_MASK_ATTENTION_FUNCTIONS,
    AttentionMaskInterface,
    and_masks,
    causal_mask_function,
    sliding_window_overlay,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from icir_common import UserInputError

RowCallback = Callable[[nn.Module, torch.Tensor, torch.Tensor, "torch.Tensor | None", dict], None]

# Attention module -> callback receiving (module, query, key, attention_mask, kernel kwargs).
_ROW_CALLBACKS: dict[nn.Module, RowCallback] = {}
_PREFIX = "head_capture_"
# Kernels whose masks are tensors (4-D, 2-D padding, or None) that `row_mask` can read.
SUPPORTED_KERNELS = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flash_attention_4")


def _masked_value() -> float:
    return torch.finfo(torch.float32).min


def _gather_rows(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``tensor[b, :, rows[b], :]`` for each b: [B, C, T, D] -> [B, C, P, D] (batch dim may be 1)."""
    batch = torch.arange(rows.shape[0], device=tensor.device) if tensor.shape[0] > 1 else torch.zeros(
        rows.shape[0], dtype=torch.long, device=tensor.device
    )
    return tensor[batch[:, None], :, rows].permute(0, 2, 1, 3)


def row_mask(
    attention_mask: torch.Tensor | None,
    rows: torch.Tensor,
    key_length: int,
    is_causal: bool,
    sliding_window: int | None,
) -> torch.Tensor:
    """Additive float32 mask of the readout rows, [B, 1 or H, P, S], as the kernel applies it.

    A 4-D mask (sdpa's boolean or eager's additive mask, already holding causality, padding,
    sliding window and any bidirectional image blocks) is read at the rows. Without one (sdpa's
    causal skip, flash kernels' 2-D padding mask) the row is rebuilt from transformers' own mask
    functions: causal, sliding-window overlay, and the 2-D padding mask.
    """
    if attention_mask is not None and attention_mask.dim() == 4:
        picked = _gather_rows(attention_mask, rows)
        if picked.dtype == torch.bool:
            return torch.zeros(picked.shape, device=picked.device).masked_fill(~picked, _masked_value())
        return picked.float()
    keys = torch.arange(key_length, device=rows.device)[None, None, :]
    queries = rows[:, :, None]
    functions = []
    if is_causal:
        functions.append(causal_mask_function)
        if sliding_window:
            functions.append(sliding_window_overlay(sliding_window))
    allowed = and_masks(*functions)(None, None, queries, keys) if functions else torch.ones((), dtype=torch.bool)
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, :]
    allowed = allowed.expand(rows.shape[0], rows.shape[1], key_length)
    return torch.zeros(allowed.shape, device=rows.device).masked_fill(~allowed, _masked_value())[:, None]


def attention_rows(
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    rows: torch.Tensor,
    scaling: float,
    *,
    is_causal: bool = True,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Post-softmax attention rows at readout positions: the `exact` pointer's A[p, :] (Eq. 1).

    Mirrors transformers' eager attention (``softmax(q k^T * scaling [softcap] + mask)`` in float32)
    with GQA: query head h reads key head ``h // (H / H_kv)``, as ``repeat_kv`` expands them, here
    without materialising the expanded keys.

    Args:
        query: [B, H, T, d_h] as the kernel receives it (normalised, rotated).
        key: [B, H_kv, S, d_h] likewise, not yet repeated for GQA.
        attention_mask: the mask the kernel receives (4-D, 2-D padding, or None), see `row_mask`.
        rows: [B, P] long, readout token indices per sample.
        scaling: the kernel's score scale (usually ``d_h ** -0.5``).
        is_causal, sliding_window: used only when `attention_mask` is not 4-D.
        softcap: tanh soft-capping of the scores, if the model uses it.

    Returns:
        [B, H, P, S] float32 probabilities (each row sums to 1 over the allowed keys).
    """
    batch, heads, _, head_dim = query.shape
    kv_heads, key_length = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    picked = _gather_rows(query, rows)  # [B, H, P, d]
    points = rows.shape[1]
    grouped = picked.reshape(batch, kv_heads, groups * points, head_dim)
    scores = torch.matmul(grouped, key.transpose(-1, -2)) * scaling
    scores = scores.reshape(batch, heads, points, key_length)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.float() + row_mask(attention_mask, rows, key_length, is_causal, sliding_window)
    return torch.softmax(scores, dim=-1)


def proxy_rows(
    query_rows: torch.Tensor,
    keys: torch.Tensor,
    key_padding: torch.Tensor,
    rows: torch.Tensor,
    causal: bool,
) -> torch.Tensor:
    """The paper's Eq. 3 proxy Ã[p, :] from the direct projection outputs (no q/k norm, no RoPE).

    ``softmax_j(q_p . k_j / sqrt(d_h))`` over all prefill positions j of the sample (padding
    excluded), read literally as in §4.1 (``docs/protocol.md``); with `causal`, over j <= p only.
    GQA key heads are shared by their query-head group as in the model.

    Args:
        query_rows: [B, P, H, d_h] q_proj outputs at the readout rows.
        keys: [B, S, H_kv, d_h] k_proj outputs at every position.
        key_padding: [B, S] bool, True for real (non-padding) tokens.
        rows: [B, P] long readout indices (used by the causal variant).
        causal: restrict to j <= p (mode ``proxy_causal``).

    Returns:
        [B, H, P, S] float32 probabilities.
    """
    batch, points, heads, head_dim = query_rows.shape
    key_length, kv_heads = keys.shape[1], keys.shape[2]
    grouped = query_rows.permute(0, 2, 1, 3).reshape(batch, kv_heads, heads // kv_heads * points, head_dim)
    scores = torch.matmul(grouped.float(), keys.permute(0, 2, 3, 1).float()) / math.sqrt(head_dim)
    scores = scores.reshape(batch, heads, points, key_length)
    allowed = key_padding.bool()[:, None, None, :]
    if causal:
        allowed = allowed & (torch.arange(key_length, device=rows.device)[None, None, None, :] <= rows[:, None, :, None])
    return torch.softmax(scores.masked_fill(~allowed, _masked_value()), dim=-1)


def _base_kernel(base: str, module: nn.Module) -> Callable:
    if base == "eager":
        # "eager" is not in the interface: each model file defines its own eager_attention_forward.
        return sys.modules[type(module).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[base]


def capture_implementation(base: str) -> str:
    """Register (once) and return the name of the capture wrapper around kernel `base`.

    The name keeps the base name inside (``head_capture_sdpa``, ``head_capture_flash_attention_2``)
    so transformers' checks that look for "sdpa"/"flash" in the name treat it like its base, and its
    mask function is the base kernel's, so the model builds exactly the masks it would build.
    """
    name = _PREFIX + base

    def head_capture_attention(module, query, key, value, attention_mask, **kwargs):
        output = _base_kernel(base, module)(module, query, key, value, attention_mask, **kwargs)
        callback = _ROW_CALLBACKS.get(module)
        if callback is not None and getattr(module, "layer_idx", None) is not None:
            callback(module, query, key, attention_mask, kwargs)
        return output

    if name not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(name, head_capture_attention)
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    return name


@contextlib.contextmanager
def routed_attention(
    language_model: nn.Module, callbacks: Sequence[tuple[nn.Module, RowCallback]]
) -> Iterator[None]:
    """Route `language_model`'s attention through the capture wrapper while the block runs.

    Args:
        language_model: the decoder ``PreTrainedModel``; only its attention implementation is
            switched (the vision tower keeps its own), and restored on exit, also on error.
        callbacks: ``(attention module, callback)`` pairs; the callback gets
            ``(module, query [B,H,T,d], key [B,H_kv,S,d], attention_mask, kernel kwargs)`` on each call.

    Raises:
        UserInputError: the language model runs a kernel outside `SUPPORTED_KERNELS` (e.g. flex attention).
        RuntimeError: the attention is already routed (nested captures).
    """
    base = language_model.config._attn_implementation
    if base.startswith(_PREFIX):
        raise RuntimeError(f"attention is already routed through {base}: captures cannot be nested")
    if base not in SUPPORTED_KERNELS:
        raise UserInputError(
            f"exact capture reads the attention kernels {', '.join(SUPPORTED_KERNELS)}, not {base!r}; load the "
            f"model with attn_implementation='sdpa'"
        )
    _ROW_CALLBACKS.update(dict(callbacks))
    try:
        language_model.set_attn_implementation(capture_implementation(base))
        yield
    finally:
        language_model.set_attn_implementation(base)
        for module, _ in callbacks:
            _ROW_CALLBACKS.pop(module, None)
