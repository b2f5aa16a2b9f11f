"""Each attention module's queries and keys before RoPE, read by forward hooks on its projections.

The Eq. 3 proxy scores q_p k_j^T from the query and key projections the model forms before any
rotary embedding, normalisation or caching (``docs/protocol.md``). Where they come from depends on
the attention module (`attention_kind`):

- ``separate``: ``q_proj`` [B, T, H * d] and ``k_proj`` [B, T, KV * d] (Llama, Qwen, Gemma...).
- ``gated``: ``q_proj`` forms each head's query and then its output gate, [B, T, H * 2d]
  (Qwen3.5 / Qwen3-Next: ``torch.chunk(q_proj(x).view(..., -1, 2d), 2, dim=-1)``); the query is
  the first d of each head's 2d.
- ``latent``: multi-head latent attention (DeepSeek-V3, Kimi K2.5): the query is ``q_proj`` (or
  ``q_b_proj`` after the low-rank ``q_a_proj``) [B, T, H * (d_nope + d_rope)]; the key of head h is
  its ``kv_b_proj`` key part [B, T, H, d_nope] (expanded from the normalised latent) followed by
  the rotary part of ``kv_a_proj_with_mqa`` [B, T, d_rope] that all heads share, both before RoPE.
  Head outputs entering ``o_proj`` are ``v_head_dim`` wide.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

ATTENTION_KINDS: tuple[str, ...] = ("separate", "gated", "latent")
LATENT_PROJECTIONS: tuple[str, ...] = ("kv_a_proj_with_mqa", "kv_b_proj")


def is_latent(attention: nn.Module) -> bool:
    """Whether `attention` is multi-head latent attention (it has `LATENT_PROJECTIONS`)."""
    return all(isinstance(getattr(attention, name, None), nn.Module) for name in LATENT_PROJECTIONS)


def query_projection(attention: nn.Module, q_proj: str = "q_proj") -> nn.Module | None:
    """The linear layer whose output is the query: `q_proj`, or a latent module's ``q_b_proj``."""
    found = getattr(attention, q_proj, None)
    if not isinstance(found, nn.Module) and is_latent(attention):
        found = getattr(attention, "q_b_proj", None)
    return found if isinstance(found, nn.Module) else None


def attention_kind(attention: nn.Module, n_heads: int, q_proj: str = "q_proj") -> str:
    """One of `ATTENTION_KINDS` for `attention` with `n_heads` query heads (module docstring)."""
    if is_latent(attention):
        return "latent"
    query = query_projection(attention, q_proj)
    return "gated" if query.out_features == 2 * n_heads * attention.head_dim else "separate"


def head_width(attention: nn.Module) -> int:
    """Width of one head's output entering o_proj: ``v_head_dim`` of latent attention, else ``head_dim``."""
    return int(attention.v_head_dim if is_latent(attention) else attention.head_dim)


def query_width(attention: nn.Module) -> int:
    """Width of one head's query and key: ``qk_head_dim`` of latent attention, else ``head_dim``."""
    return int(attention.qk_head_dim if is_latent(attention) else attention.head_dim)


def hook_queries_and_keys(
    attention: nn.Module,
    n_heads: int,
    reads_keys: bool,
    on_query: Callable[[torch.Tensor], None],
    on_key: Callable[[torch.Tensor], None],
    q_proj: str = "q_proj",
    k_proj: str = "k_proj",
) -> list[torch.utils.hooks.RemovableHandle]:
    """Forward hooks giving `on_query` the queries [B, T, H, d] and `on_key` (with `reads_keys`)
    the keys [B, T, KV, d] of each forward of `attention`, before RoPE (d = `query_width`).

    Returns the hook handles; the caller removes them.
    """
    kind = attention_kind(attention, n_heads, q_proj)
    width = query_width(attention)

    def read_query(_module, _args, output):
        states = output.reshape(*output.shape[:2], n_heads, -1)
        on_query(states[..., :width])  # gated: each head's query, then its gate

    handles = [query_projection(attention, q_proj).register_forward_hook(read_query)]
    if not reads_keys:
        return handles
    if kind != "latent":
        handles.append(getattr(attention, k_proj).register_forward_hook(
            lambda _module, _args, output: on_key(output.reshape(*output.shape[:2], -1, width))))
        return handles
    rotary: list[torch.Tensor] = []  # kv_a_proj_with_mqa runs before kv_b_proj in each forward
    nope = attention.qk_nope_head_dim

    def read_rotary(_module, _args, output):
        rotary[:] = [output[..., attention.kv_lora_rank:]]

    def read_key(_module, _args, output):  # its input is the latent viewed as [B, 1, T, rank]
        k_nope = output.reshape(output.shape[0], -1, n_heads, nope + attention.v_head_dim)[..., :nope]
        k_rot = rotary.pop()[:, :, None, :].expand(-1, -1, n_heads, -1)
        on_key(torch.cat((k_nope, k_rot), dim=-1))

    handles.append(attention.kv_a_proj_with_mqa.register_forward_hook(read_rotary))
    handles.append(attention.kv_b_proj.register_forward_hook(read_key))
    return handles
