"""Head ablation (paper §6.1, App. A): zero chosen heads' slices of the o_proj input over a token span."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn

from icir_common import UserInputError, parse_head_name

from .adapters import attention_modules, projection, resolve_adapter
from .projections import head_width

HeadRef = tuple[int, int] | str


def parse_heads(heads: Iterable[HeadRef], n_layers: int, n_heads: int) -> dict[int, list[int]]:
    """Normalise `heads` (``(layer, head)`` pairs or ``LxxHyy`` names) to ``{layer: [heads]}``.

    Raises:
        UserInputError: a malformed name or an index outside ``[0, n_layers) x [0, n_heads)``.
    """
    by_layer: dict[int, list[int]] = {}
    for ref in heads:
        try:
            layer, head = parse_head_name(ref) if isinstance(ref, str) else (int(ref[0]), int(ref[1]))
        except (ValueError, TypeError, IndexError) as err:
            raise UserInputError(
                f"cannot ablate head {ref!r}: {err}; give (layer, head) pairs or LxxHyy names"
            ) from err
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise UserInputError(f"head {ref!r} is outside the model's {n_layers} layers x {n_heads} heads")
        by_layer.setdefault(layer, []).append(head)
    return by_layer


def _zeroed_tokens(token_spans: Sequence[tuple[int, int | None]], batch: int, length: int, device) -> torch.Tensor:
    """[B, T, 1] bool, True at the prefill tokens inside each row's half-open token span."""
    if len(token_spans) == 1:
        token_spans = list(token_spans) * batch
    if len(token_spans) != batch:
        raise UserInputError(f"{len(token_spans)} ablation spans given for a batch of {batch}")
    zeroed = torch.zeros(batch, length, 1, dtype=torch.bool, device=device)
    for row, (start, end) in enumerate(token_spans):
        zeroed[row, start:end] = True
    return zeroed


@contextlib.contextmanager
def ablate_heads(
    model: nn.Module,
    heads: Iterable[HeadRef] | Sequence[Iterable[HeadRef]],
    token_span: tuple[int, int | None] | Sequence[tuple[int, int | None]] = (0, None),
    through_generation: bool = False,
    per_row: bool = False,
) -> Iterator[None]:
    """Zero the selected heads' write to the residual stream while the block runs.

    A forward pre-hook on each affected layer's o_proj sets the heads' ``d_h``-wide slices of its
    input (the value-weighted head outputs, Eq. 4) to zero at the prefill tokens of `token_span`.
    Prefill calls are those with more than one query token; single-token calls are generation
    steps and are zeroed at every token only with `through_generation` (App. I.1). All hooks are
    removed on exit, also on error. No head at all registers nothing (logits stay bit-identical).

    Args:
        model: a supported LVLM (see `adapters.SUPPORTED_ARCHITECTURES`).
        heads: ``(layer, head)`` pairs or ``LxxHyy`` names (0-based); with `per_row`, one such
            collection per batch row (the cells of one document, batched: §6.1 grid).
        token_span: half-open ``(start, end)`` token indices of the prefill, ``end=None`` meaning the
            end of the prefill; or one such span per batch row. Default: the whole prefill. The
            paper's span runs from the first anchor token to the last prefill position (§6.1).
        through_generation: also zero the heads at every generated token.
        per_row: `heads` holds one head collection per batch row.

    Raises:
        UserInputError: unknown heads, unsupported model, or span or head-row count differing from
            the batch.
    """
    adapter = resolve_adapter(model)
    modules = attention_modules(model, adapter)
    n_heads = model.config.get_text_config().num_attention_heads
    rows = [parse_heads(row, len(modules), n_heads) for row in (heads if per_row else [heads])]
    # One span is a pair of token indices (numpy/torch integers too); several are a sequence of pairs.
    spans = list(token_span) if isinstance(token_span[0], (tuple, list)) else [token_span]
    zeroed_heads = torch.zeros(len(rows), len(modules), n_heads, dtype=torch.bool)  # [R, L, H]
    for row, by_layer in enumerate(rows):
        for layer, layer_heads in by_layer.items():
            zeroed_heads[row, layer, layer_heads] = True

    def make_hook(layer: int, head_dim: int):
        def zero_heads(_module, args):
            states = args[0]
            batch, length, _ = states.shape
            if length == 1:
                if not through_generation:
                    return None
                zeroed = torch.ones(batch, 1, 1, dtype=torch.bool, device=states.device)
            else:
                zeroed = _zeroed_tokens(spans, batch, length, states.device)
            chosen = zeroed_heads[:, layer].to(states.device)  # [R, H]
            if chosen.shape[0] == 1:
                chosen = chosen.expand(batch, -1)
            elif chosen.shape[0] != batch:
                raise UserInputError(f"{chosen.shape[0]} head rows given for a batch of {batch}")
            mask = zeroed[:, :, :, None] & chosen[:, None, :, None]  # [B, T, H, 1]
            split = states.reshape(batch, length, n_heads, head_dim)
            return (split.masked_fill(mask, 0).reshape(batch, length, -1), *args[1:])

        return zero_heads

    handles = []
    try:
        for layer in sorted({layer for by_layer in rows for layer in by_layer}):
            attention = modules[layer]
            hook = make_hook(layer, head_width(attention))
            handles.append(projection(attention, adapter, "o_proj").register_forward_pre_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()
