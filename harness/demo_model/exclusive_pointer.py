"""Training-time attention mask that leaves the pointer head as the only way from a prompt to its images.

While a retrieval batch trains (`harness.demo_model.train`), every language-model head but the
designated pointer head is kept from attending image tokens from text positions, and the pointer
head may attend them only from the tokens that name a category. The image a question names then
reaches the answer only through the pointer head at the category's mention, so the head has to
match every category word to its images itself: unmasked, the demo model found one category
(circle, in every seed-0 run measured) through a query that is the same at any content-free
position, the "?" after the mention or the chat template's tokens, and never learned a match for
it at the mention, so the best head stayed at 8 of 9 categories at the cattok (with the Llama-3
RoPE scaling R@1 0.90, circle 0.27).
Trained with the mask on half of the background-retrieval batches, the head finds all nine (R@1
1.00; `harness.demo_model.train`). Image tokens keep their own attention (to earlier images and
text), and the other batches train unmasked, so that at evaluation, unmasked, the other heads
attend images as they learned to there: with the mask on every background-retrieval batch they
never learned to read images from text while the finding formed, and unmasked they disturbed it
(validation retrieval 0.21 instead of 1.00 at step 3,000).

Mirrors transformers' SDPA kernel (`sdpa_attention_forward`), with the block folded into its mask.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

EXCLUSIVE_POINTER_ATTENTION = "sdpa_exclusive_pointer"
_BLOCK = "_exclusive_pointer_block"  # attribute set on each attention module while the mask is on


def exclusive_pointer_blocks(input_ids: torch.Tensor, image_token_id: int, category_ids: torch.Tensor,
                             num_heads: int, pointer_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (query, key) pairs each head may not attend.

    Args:
        input_ids: [B, T] token ids of a batch.
        image_token_id: the image placeholder id (one per visual token).
        category_ids: [C] ids of the tokens that name a category (each name one token).
        num_heads: attention heads per layer.
        pointer_head: the pointer head's index within its layer.

    Returns:
        ``(other_layers [B, 1, T, T], pointer_layer [B, num_heads, T, T])`` bool, True where the
        query row (text) may not attend the key column (an image token): every text row for all
        heads, and for the pointer head only the text rows that are not a category name.
    """
    image = input_ids == image_token_id
    text_to_image = (~image)[:, :, None] & image[:, None, :]
    off_mention = (~image & ~torch.isin(input_ids, category_ids))[:, :, None] & image[:, None, :]
    pointer_layer = text_to_image[:, None].repeat(1, num_heads, 1, 1)
    pointer_layer[:, pointer_head] = off_mention
    return text_to_image[:, None], pointer_layer


def exclusive_pointer_sdpa(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention with the module's block (set by `exclusive_pointer`) masked out.

    Args:
        module: the calling attention module; its block, when set, is ``[B, 1 or heads, T, T]``.
        query, key, value: ``[B, heads, T, head_dim]``.
        attention_mask: transformers' mask for SDPA: None (causal, no padding), bool (True =
            attend) or additive float, ``[B, 1, T, T]``.

    Returns:
        ``(output [B, T, heads, head_dim], None)``, as `sdpa_attention_forward`.
    """
    block = getattr(module, _BLOCK, None)
    length = query.shape[2]
    if block is None or length != block.shape[-1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is None:
        allowed = torch.ones(length, length, dtype=torch.bool, device=query.device).tril()[None, None]
    elif attention_mask.dtype == torch.bool:
        allowed = attention_mask
    else:
        allowed = attention_mask == 0
    kwargs["is_causal"] = False
    return sdpa_attention_forward(module, query, key, value, allowed & ~block, **kwargs)


AttentionInterface.register(EXCLUSIVE_POINTER_ATTENTION, exclusive_pointer_sdpa)


@contextlib.contextmanager
def exclusive_pointer(model: nn.Module, input_ids: torch.Tensor, category_ids: torch.Tensor,
                      pointer_head: tuple[int, int]) -> Iterator[None]:
    """Mask a Qwen3-VL language model's attention as the module docstring says while the block runs.

    Args:
        model: a ``Qwen3VLForConditionalGeneration`` whose language model runs SDPA.
        input_ids: [B, T] the token ids of the batch the block will run.
        category_ids: [C] ids of the tokens that name a category.
        pointer_head: ``(layer, head)`` of the pointer head.

    Raises:
        ValueError: the language model does not run SDPA (the kernel reproduces SDPA only).
    """
    config = model.model.language_model.config
    previous = config._attn_implementation
    if previous != "sdpa":
        raise ValueError(f"the exclusive-pointer mask reproduces SDPA; the language model runs {previous!r}")
    layer, head = pointer_head
    other_layers, pointer_layer = exclusive_pointer_blocks(input_ids, model.config.image_token_id, category_ids,
                                                           config.num_attention_heads, head)
    modules = [decoder.self_attn for decoder in model.model.language_model.layers]
    for index, module in enumerate(modules):
        setattr(module, _BLOCK, pointer_layer if index == layer else other_layers)
    config._attn_implementation = EXCLUSIVE_POINTER_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = previous
        for module in modules:
            delattr(module, _BLOCK)
