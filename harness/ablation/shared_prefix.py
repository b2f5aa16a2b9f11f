"""Attention over one prefix KV cache shared by every row of a batch (``AttentionInterface``).

The cells of a document differ only from the ablation start on, so their prefix keys and values
are the same tensors. `shared_prefix` registers the kernel ``shared_prefix_sdpa`` with
transformers' ``AttentionInterface`` (its masks are sdpa's, `AttentionMaskInterface`) and
routes the language model's attention through it while the block runs: each layer's keys and
values are the prefix's ``[1, KV, P, d]`` (read once for all rows, never repeated per row)
followed by the row's own, which the model's cache holds from the ablation start on. All rows'
queries of a layer attend together, through torch's own attention kernels: the prefix wholly
visible, the rows' own keys masked as the model's mask says (causal over the rows' own tokens),
other rows' keys hidden (`shared_prefix_attention`).

The model's cache then counts only the rows' own tokens, so the caller passes absolute
``position_ids``. Models with sliding-window or soft-capped attention are not routed
(`shared_prefix_supported`): their scores depend on distances this kernel does not track.
"""

from __future__ import annotations

import contextlib
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
    if getattr(config, "kv_lora_rank", None):
        return "latent attention: the cache holds compressed latents, not per-head keys"
    if any(kind != "full_attention" and "sliding" not in kind for kind in (getattr(config, "layer_types", None) or [])):
        return "a hybrid decoder: its cache holds recurrent states besides keys"
    return None


# aten's CPU flash kernel, the one sdpa dispatches to on CPU, called directly for the log-sum-exp
# of each query row that it returns beside the output (None if this torch build lacks it).
_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _own_mask(attention_mask, batch: int, length: int, rows: int, device) -> torch.Tensor:
    """``[B, q, s]`` mask of each row's queries over its own keys: the model's mask (``[B, 1, q, >= s]``
    or ``[B, q, >= s]``, its last s columns the rows' own tokens; boolean, True to attend, or
    additive), or causal without one."""
    if attention_mask is None:
        return torch.ones(length, rows, dtype=torch.bool, device=device).tril(rows - length).expand(batch, length, rows)
    own = attention_mask[:, 0] if attention_mask.dim() == 4 else attention_mask
    return own[..., -rows:].expand(batch, length, rows)


def _own_scores(query, key, attention_mask, scale: float):
    """``[B, KV, G, q, s]`` scaled scores of each row's queries on its own keys, masked by `_own_mask`."""
    batch, heads, length, dim = query.shape
    kv_heads, rows = key.shape[1], key.shape[2]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, length, dim)
    scores = torch.matmul(grouped, key[:, :, None].transpose(-1, -2)) * scale
    mask = _own_mask(attention_mask, batch, length, rows, query.device)[:, None, None]  # [B, 1, 1, q, s]
    return scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask


def _merged_attention(queries, prefix_keys, prefix_values, query, key, value, attention_mask, scale: float):
    """CPU: the prefix part by the flash kernel (all rows' queries as one sequence, the prefix wholly
    visible), the own part by hand, merged by their log-sum-exps: ``[B, H, q, d]``."""
    batch, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    on_prefix, prefix_lse = _CPU_FLASH(queries, prefix_keys, prefix_values, 0.0, False, attn_mask=None,
                                       scale=scale)[:2]  # [1, KV, B*G*q, d], [1, KV, B*G*q]
    own = _own_scores(query, key, attention_mask, scale)  # [B, KV, G, q, s]
    own_lse = torch.logsumexp(own, dim=-1, keepdim=True)
    on_own = torch.matmul(torch.exp(own - own_lse), value[:, :, None])  # [B, KV, G, q, d]

    def per_row(tensor, width):  # [1, KV, B*G*q, width] -> [B, KV, G, q, width]
        return tensor.reshape(kv_heads, batch, heads // kv_heads, length, width).transpose(0, 1)

    prefix_lse = per_row(prefix_lse[..., None], 1)
    total = torch.logaddexp(prefix_lse, own_lse)
    output = per_row(on_prefix, dim) * torch.exp(prefix_lse - total) + on_own * torch.exp(own_lse - total)
    return output.reshape(batch, heads, length, dim)


def _row_mask(attention_mask, batch: int, groups: int, length: int, rows: int, prefix: int, device) -> torch.Tensor:
    """``[B*G*q, P + B*s]`` mask of the flattened rows over ``[prefix ; every row's own keys]``:
    row ``(b, g, t)`` sees the whole prefix and, of the own keys, only row b's, as the model's
    mask says (`_own_mask`). Boolean masks stay boolean (True: attend), additive ones additive."""
    own = _own_mask(attention_mask, batch, length, rows, device)  # [B, q, s]
    same = torch.eye(batch, dtype=torch.bool, device=device)[:, None, None, :, None]  # [B, 1, 1, B, 1]
    if own.dtype == torch.bool:
        block = same & own[:, None, :, None, :]
        visible = torch.ones(1, prefix, dtype=torch.bool, device=device)
    else:
        block = torch.where(same, own[:, None, :, None, :], torch.finfo(own.dtype).min)
        visible = torch.zeros(1, prefix, dtype=own.dtype, device=device)
    block = block.expand(batch, groups, length, batch, rows).reshape(batch * groups * length, batch * rows)
    return torch.cat([visible.expand(block.shape[0], prefix), block], dim=1)


def shared_prefix_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """sdpa over ``[prefix ; row]`` keys: query [B, H, q, d], key/value [B, KV, s, d] (the rows' own).

    Every row's queries of one KV head are laid end to end as one sequence of ``B*G*q`` queries
    (G query heads per KV head), so the one prefix is read once for all rows and KV-head groups
    and never repeated. On CPU, aten's flash kernel attends that sequence to the prefix and
    returns each query's log-sum-exp, the rows' own keys are scored by hand, and the two parts
    are merged as flash attention merges its blocks (`_merged_attention`). Elsewhere, one
    ``scaled_dot_product_attention`` call attends it to ``[prefix ; all rows' own keys]`` with
    `_row_mask` hiding the other rows' keys. Either way the softmax runs over the prefix and the
    row's own keys together.

    Returns ``(output [B, q, H, d], None)`` as transformers' sdpa kernel does.
    """
    prefix_keys, prefix_values = _PREFIX[module.layer_idx]  # [1, KV, P, d]
    batch, heads, length, dim = query.shape
    kv_heads, rows = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim ** -0.5

    def lay_out(states, per_row):  # [B, KV, ..., n, d] -> [1, KV, B*...*n, d]
        return states.transpose(0, 1).reshape(1, kv_heads, batch * per_row, dim)

    queries = lay_out(query.reshape(batch, kv_heads, groups, length, dim), groups * length)
    if query.device.type == "cpu" and _CPU_FLASH is not None:
        output = _merged_attention(queries, prefix_keys, prefix_values, query, key, value, attention_mask, scale)
    else:
        keys = torch.cat([prefix_keys, lay_out(key, rows)], dim=2)
        values = torch.cat([prefix_values, lay_out(value, rows)], dim=2)
        mask = _row_mask(attention_mask, batch, groups, length, rows, prefix_keys.shape[2], query.device)
        output = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=scale)
        output = output.reshape(kv_heads, batch, groups, length, dim).transpose(0, 1).reshape(batch, heads, length,
                                                                                                dim)
    return output.transpose(1, 2).contiguous(), None


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
