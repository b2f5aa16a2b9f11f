"""Attention over one prefix KV cache shared by every row of a batch (``AttentionInterface``).

The cells of a document differ only from the ablation start on, so their prefix keys and values
are the same tensors. `shared_prefix` registers the kernel ``shared_prefix_sdpa`` with
transformers' ``AttentionInterface`` (its masks are sdpa's, `AttentionMaskInterface`) and
routes the language model's attention through it while the block runs: each layer's keys and
values are the prefix's ``[1, KV, P, d]`` (read once, broadcast over the rows, never copied)
followed by the row's own, which the model's cache holds from the ablation start on. Scores are
``q k^T * scaling`` over both parts, the row part masked as the model's mask says (causal over the
rows' own tokens; the prefix is wholly visible), one softmax in float32, then the weighted values:
sdpa's arithmetic, without repeating the prefix for every row and every KV-head group.

The model's cache then counts only the rows' own tokens, so the caller passes absolute
``position_ids``. Models with sliding-window or soft-capped attention are not routed
(`shared_prefix_supported`): their scores depend on distances this kernel does not track.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

NAME = "shared_prefix_sdpa"  # "sdpa" in the name: transformers treats it as the sdpa family
_PREFIX: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer: the prefix's keys and values


def shared_prefix_supported(language_model) -> str | None:
    """None when `language_model` can be routed, else why not (then cells repeat the prefix cache)."""
    config = language_model.config
    if language_model.config._attn_implementation != "sdpa":
        return f"the language model runs {config._attn_implementation}, not sdpa"
    if getattr(config, "sliding_window", None) and any(
            kind != "full_attention" for kind in (getattr(config, "layer_types", None) or ["sliding"])):
        return "sliding-window attention"
    if getattr(config, "attn_logit_softcapping", None):
        return "soft-capped attention scores"
    return None


def shared_prefix_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """sdpa over ``[prefix ; row]`` keys: query [B, H, q, d], key/value [B, KV, s, d] (the rows' own).

    The softmax is taken over both parts at once, as flash attention splits it: one running
    maximum, the exponentials of each part, one normaliser. The prefix part multiplies all rows'
    queries by the one prefix in a single matmul per KV head (no per-row copy).

    Returns ``(output [B, q, H, d], None)`` as transformers' sdpa kernel does.
    """
    prefix_keys, prefix_values = _PREFIX[module.layer_idx]  # [1, KV, P, d]
    batch, heads, length, dim = query.shape
    kv_heads, rows = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else 1.0 / math.sqrt(dim)
    grouped = query.float().reshape(batch, kv_heads, groups, length, dim)
    flat = grouped.permute(1, 0, 2, 3, 4).reshape(kv_heads, batch * groups * length, dim)  # [KV, B*G*q, d]
    on_prefix = torch.bmm(flat, prefix_keys[0].float().transpose(1, 2)).mul_(scale)  # [KV, B*G*q, P]
    on_rows = torch.matmul(grouped, key[:, :, None].float().transpose(-1, -2)).mul_(scale)  # [B, KV, G, q, s]
    if attention_mask is not None:
        mask = (attention_mask[:, :, None] if attention_mask.dim() == 4 else attention_mask)[..., -rows:]
        on_rows = on_rows.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else on_rows + mask
    elif length > 1:
        allowed = torch.ones(length, rows, dtype=torch.bool, device=query.device).tril(rows - length)
        on_rows = on_rows.masked_fill(~allowed, float("-inf"))
    on_rows = on_rows.permute(1, 0, 2, 3, 4).reshape(kv_heads, batch * groups * length, rows)
    top = torch.maximum(on_prefix.amax(-1, keepdim=True), on_rows.amax(-1, keepdim=True))
    on_prefix, on_rows = on_prefix.sub_(top).exp_(), on_rows.sub_(top).exp_()
    norm = on_prefix.sum(-1, keepdim=True) + on_rows.sum(-1, keepdim=True)
    own_values = value.float().permute(1, 0, 2, 3)  # [KV, B, s, d]
    from_rows = torch.matmul(on_rows.reshape(kv_heads, batch, groups * length, rows), own_values)
    output = torch.bmm(on_prefix, prefix_values[0].float()).add_(from_rows.reshape(kv_heads, -1, dim)).div_(norm)
    output = output.reshape(kv_heads, batch, groups, length, dim).permute(1, 0, 2, 3, 4).reshape(batch, heads,
                                                                                                 length, dim)
    return output.to(query.dtype).transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def shared_prefix(language_model, prefix_cache) -> Iterator[None]:
    """Route `language_model`'s attention through `shared_prefix_attention` over `prefix_cache`.

    Args:
        language_model: the decoder ``PreTrainedModel`` (its implementation is restored on exit).
        prefix_cache: a one-row transformers ``DynamicCache`` holding the prefix of every layer.
    """
    if NAME not in ALL_ATTENTION_FUNCTIONS:
        AttentionInterface.register(NAME, shared_prefix_attention)
        AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    base = language_model.config._attn_implementation
    _PREFIX[:] = [(layer.keys, layer.values) for layer in prefix_cache.layers]
    try:
        language_model.set_attn_implementation(NAME)
        yield
    finally:
        language_model.set_attn_implementation(base)
        _PREFIX.clear()
