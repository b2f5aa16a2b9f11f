"""One SDPA call per layer for all images of a batch in Qwen3-VL's vision tower.

Qwen3-VL's vision tower packs the patches of every image of a batch into one sequence and attends
within each image (the ``cu_seqlens`` boundaries). With any kernel but flash attention it splits
the sequence and calls the kernel once per image: a batch of 32 five-image prompts makes 160 SDPA
calls per vision layer, forward and backward. The toy images are all 64x64 px, so the per-image
blocks have one length and stack into a single batched SDPA call with the same numbers
(bit-identical on CPU: `tests/test_packed_vision.py`). A training step of the demo model then
runs 1.11-1.14x faster on such batches and 1.06-1.17x faster on VHs N=5 batches on this
project's 2-core machine (`bench/demo_training_step.py`, four runs).

transformers hands the ``cu_seqlens`` of a packed sequence only to kernels whose name contains
"flash" (`transformers.utils.generic.is_flash_attention_requested`), and
``set_attn_implementation`` would then try to load the flash-attention package; so
`packed_vision_attention` sets the vision config's implementation directly, for the duration of
a block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from transformers import AttentionInterface

# "flash" in the name: transformers passes `cu_seqlens` only to such kernels (module docstring).
PACKED_VISION_ATTENTION = "packed_sdpa_flash_varlen"


def packed_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cu_seq_lens_q: torch.Tensor,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention within each block of a packed sequence, one SDPA call when the blocks are equal.

    Mirrors the variable-length flash-attention call of transformers' vision towers (keyword
    ``cu_seq_lens_q``; no mask, no causality, no dropout: the vision towers pass dropout 0).

    Args:
        module: the calling attention module (unused; part of the AttentionInterface signature).
        query, key, value: ``[1, heads, total_patches, head_dim]``, blocks contiguous along dim 2.
        attention_mask: must be None (the packed path has no mask).
        cu_seq_lens_q: ``[blocks + 1]`` int, cumulative block boundaries (0 first, total last).
        scaling: softmax scale (default ``head_dim ** -0.5``, as SDPA's).

    Returns:
        ``(output [1, total_patches, heads, head_dim], None)``: the layout transformers' kernels
        return, so the caller reshapes it to ``[total_patches, heads * head_dim]``.

    Raises:
        ValueError: a mask was passed (this kernel serves only unmasked packed attention).
    """
    if attention_mask is not None:
        raise ValueError(f"{PACKED_VISION_ATTENTION} serves unmasked packed vision attention; got an attention mask")
    lengths = (cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]).tolist()
    _, heads, _, head_dim = query.shape
    if len(set(lengths)) == 1:
        blocks, length = len(lengths), lengths[0]

        def stacked(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.view(heads, blocks, length, head_dim).transpose(0, 1)

        output = nn.functional.scaled_dot_product_attention(stacked(query), stacked(key), stacked(value), scale=scaling)
        return output.permute(0, 2, 1, 3).reshape(1, blocks * length, heads, head_dim), None
    outputs = [
        nn.functional.scaled_dot_product_attention(q, k, v, scale=scaling)
        for q, k, v in zip(*(torch.split(t, lengths, dim=2) for t in (query, key, value)))
    ]
    return torch.cat(outputs, dim=2).transpose(1, 2), None


AttentionInterface.register(PACKED_VISION_ATTENTION, packed_sdpa_attention)


@contextlib.contextmanager
def packed_vision_attention(model: nn.Module) -> Iterator[None]:
    """Run `model`'s vision tower with `packed_sdpa_attention` while the block runs.

    Args:
        model: a ``Qwen3VLForConditionalGeneration`` (its ``model.visual`` tower is switched; the
            language model keeps its kernel). Restored on exit, also on error.

    Raises:
        ValueError: the vision tower does not run SDPA (the packed kernel reproduces SDPA only).
    """
    config = model.model.visual.config
    previous = config._attn_implementation
    if previous != "sdpa":
        raise ValueError(f"packed vision attention reproduces SDPA; the vision tower runs {previous!r}")
    config._attn_implementation = PACKED_VISION_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = previous
