"""`capture_heads`: every language-model head of an LVLM at the readout positions, in one prefill.

One forward pass on the model's own attention kernel records, for every layer l and head h at each
readout position p (paper §3.1, §4.1, §5, App. A, App. G):

- the pointer scores s_i = sum_{j in span_i} A[p, j] per image span (Eq. 1/3);
- the head output entering o_proj (Eq. 4), via a forward pre-hook on o_proj;
- each image's mean projected visual token in the language model's input space (§5.1);
- the next-token logits of the answer tokens at the last prefill position;
- for a request with a text needle (App. K), each head's attention mass on the needle's tokens at
  the last prefill position, where the answer is generated (both scores).

Both pointer scores come from the same prefill: ``pointer`` (Eq. 1) reads the attention the model
computes, through the `attention.routed_attention` wrapper; ``pointer_eq3`` is the paper's Eq. 3
proxy read literally from the query and key projections before RoPE (q_proj/k_proj outputs; a
gated or latent attention module's as `projections` forms them; softmax over all prefill positions),
or, in mode ``proxy_causal``, the same restricted to j <= p. The mode (``exact``, ``proxy`` or
``proxy_causal``) names the score a run ranks heads by; both are always recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections.abc import Iterator, Sequence

import torch
from PIL import Image
from torch import nn

from icir_common import UserInputError

from .adapters import (
    ModelAdapter,
    attention_modules,
    decoder_layers,
    image_token_id,
    key_sources,
    language_model,
    projection,
    resolve_adapter,
)
from .attention import attention_rows, proxy_rows, routed_attention
from .projections import head_width, hook_queries_and_keys
from .inputs import CaptureRequest, SampleLayout, encode_requests
from .readout import readout_indices, validate_positions

MODES: tuple[str, ...] = ("exact", "proxy", "proxy_causal")


@dataclasses.dataclass
class HeadCapture:
    """What one prefill of one sample recorded (all tensors float32 on the CPU).

    Attributes:
        pointer: [P, L, H, N] attention mass of head (l, h) at readout position p on image i's
            token span (Eq. 1: the model's own attention rows).
        pointer_eq3: [P, L, H, N] the same mass under the Eq. 3 proxy (causal in mode
            ``proxy_causal``).
        head_output: [P, L, H, d_h] value-weighted head output entering o_proj (Eq. 4); where
            layers differ in head width (Gemma 4: 256 in sliding-window layers, 512 in global
            ones), d_h is the widest and layer l's heads fill their first ``head_dims[l]``
            entries, the rest zero (a linear writer probe of the padded vector is one of the
            unpadded one).
        image_embeds: [N, d_model] mean of each image's projected visual tokens at the input of
            the first decoder layer (§5.1; Qwen3-VL DeepStack features excluded).
        answer_logits: [A] next-token logits at the last prefill position for the requested answer
            token ids, or None when none were requested.
        image_spans: N half-open ``(start, end)`` token spans, first to last image token of each image.
        readout_indices: P token indices of the readout positions.
        positions: P readout position names (App. G).
        n_layers, n_heads, head_dim: L, H and d_h of the language model; L counts its attention
            layers (`adapters.attention_layers`: a hybrid decoder's linear-attention layers hold no
            heads), grid row l being the l-th of them.
        mode: ``exact``, ``proxy`` or ``proxy_causal``.
        head_dims: L head widths, one per layer (each d_h unless layers differ).
        needle_mass, needle_mass_eq3: [L, H] attention mass of each head at the last prefill
            position on the request's needle tokens (App. K), from the model's attention rows and
            under the Eq. 3 proxy; None for a request without a needle.
    """

    pointer: torch.Tensor
    pointer_eq3: torch.Tensor
    head_output: torch.Tensor
    image_embeds: torch.Tensor
    answer_logits: torch.Tensor | None
    image_spans: list[tuple[int, int]]
    readout_indices: list[int]
    positions: tuple[str, ...]
    n_layers: int
    n_heads: int
    head_dim: int
    mode: str
    head_dims: tuple[int, ...]
    needle_mass: torch.Tensor | None = None
    needle_mass_eq3: torch.Tensor | None = None


def _per_image_weights(layouts: Sequence[SampleLayout], length: int, device,
                       needles: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, T, N] 1 on each image's span, [B, T, N] 1/count on each image's image tokens).

    With `needles`, the span weights get one more column, N_max: 1 on each sample's needle
    tokens, so the span masses read the needle's mass with the images'.
    """
    n_max = max((len(layout.image_spans) for layout in layouts), default=0)
    spans = torch.zeros(len(layouts), length, n_max + int(needles))
    tokens = torch.zeros(len(layouts), length, n_max)
    for row, layout in enumerate(layouts):
        for index, (start, end) in enumerate(layout.image_spans):
            spans[row, start:end, index] = 1
            tokens[row, :, index] = layout.image_of_token == index
        if needles and layout.needle_span is not None:
            spans[row, layout.needle_span[0]:layout.needle_span[1], n_max] = 1
    tokens = tokens / tokens.sum(dim=1, keepdim=True).clamp(min=1)
    return spans.to(device), tokens.to(device)


def _rows_of(states: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``states[b, rows[b]]`` for each b: [B, T, ...] -> [B, P, ...]."""
    return states[torch.arange(rows.shape[0], device=rows.device)[:, None], rows]


class _Recorder:
    """The hooks of one capture and the tensors they fill ([B, ...] on the model's device)."""

    def __init__(self, model: nn.Module, adapter: ModelAdapter, mode: str, rows, span_weights, token_weights, padding):
        self.model, self.adapter, self.mode = model, adapter, mode
        self.modules = attention_modules(model, adapter)
        self.rows, self.span_weights, self.token_weights, self.padding = rows, span_weights, token_weights, padding
        self.heads = model.config.get_text_config().num_attention_heads
        self.head_dims = tuple(head_width(module) for module in self.modules)
        self._index = {module: index for index, module in enumerate(self.modules)}  # grid row of each module
        self.head_dim = max(self.head_dims)
        # Eq. 3 keys: each layer's own k_proj, or the earlier one a KV-shared layer reuses; only
        # keys a later layer still needs outlive their own layer's proxy.
        self.key_sources = key_sources(model, adapter)
        self._reused = {source for layer, source in enumerate(self.key_sources) if source != layer}
        batch, points = rows.shape
        shape = (batch, points, len(self.modules), self.heads)
        self.pointer = torch.zeros(*shape, span_weights.shape[-1], device=rows.device)
        self.pointer_eq3 = torch.zeros_like(self.pointer)
        self.head_output = torch.zeros(*shape, self.head_dim, device=rows.device)
        self.image_embeds: torch.Tensor | None = None
        self._queries: dict[int, torch.Tensor] = {}
        self._keys: dict[int, torch.Tensor] = {}

    def _span_mass(self, probs: torch.Tensor) -> torch.Tensor:
        """[B, H, P, S] attention rows -> [B, P, H, N] mass on each image span."""
        return torch.einsum("bhps,bsn->bphn", probs, self.span_weights)

    def _read_image_embeds(self, _module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        self.image_embeds = torch.einsum("btn,btd->bnd", self.token_weights, hidden.float())

    def _read_head_output(self, layer: int, _module, args):
        picked = _rows_of(args[0], self.rows)
        width = self.head_dims[layer]
        self.head_output[:, :, layer, :, :width] = picked.reshape(*picked.shape[:2], self.heads, width).float()

    def _read_attention(self, module, query, key, attention_mask, kwargs):
        # Same fallbacks as the kernels: kwargs first, then the module's attributes.
        is_causal = kwargs.get("is_causal")
        probs = attention_rows(
            query,
            key,
            attention_mask,
            self.rows,
            kwargs.get("scaling") or module.scaling,
            is_causal=getattr(module, "is_causal", True) if is_causal is None else is_causal,
            sliding_window=kwargs.get("sliding_window", getattr(module, "sliding_window", None)),
            softcap=kwargs.get("softcap"),
        )
        self.pointer[:, :, self._index[module]] = self._span_mass(probs)

    def _read_projection(self, layer: int, which: str, states: torch.Tensor):
        if which == "key":
            self._keys[layer] = states
        else:
            self._queries[layer] = _rows_of(states, self.rows)
        source = self.key_sources[layer]
        if layer in self._queries and source in self._keys:
            probs = proxy_rows(self._queries.pop(layer), self._keys[source], self.padding, self.rows,
                               self.mode == "proxy_causal")
            self.pointer_eq3[:, :, layer] = self._span_mass(probs)
            if source == layer and layer not in self._reused:
                del self._keys[layer]

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Install every hook and the attention routing; remove all on exit (also on error)."""
        handles = [
            decoder_layers(self.model, self.adapter)[0].register_forward_pre_hook(
                self._read_image_embeds, with_kwargs=True
            )
        ]
        try:
            for layer, module in enumerate(self.modules):
                o_proj = projection(module, self.adapter, "o_proj")
                handles.append(o_proj.register_forward_pre_hook(functools.partial(self._read_head_output, layer)))
                handles += hook_queries_and_keys(
                    module, self.heads, self.key_sources[layer] == layer,
                    functools.partial(self._read_projection, layer, "query"),
                    functools.partial(self._read_projection, layer, "key"), self.adapter.q_proj, self.adapter.k_proj)
            callbacks = [(module, self._read_attention) for module in self.modules]
            with routed_attention(language_model(self.model, self.adapter), callbacks):
                yield
        finally:
            for handle in handles:
                handle.remove()


def _last_logits(model: nn.Module, inputs, last: torch.Tensor, cache) -> torch.Tensor:
    """[B, V] next-token logits at each row's last prefill position (`last`: [B, 1] indices), with
    ``logits_to_keep`` where the model's forward takes it (as ``GenerationMixin`` checks), else
    gathered from the full logits (Qwen2.5-Omni / Qwen3-Omni thinkers, VideoLLaMA3)."""
    keep = "logits_to_keep" in inspect.signature(model.forward).parameters
    kwargs = {"logits_to_keep": last} if keep else {}
    logits = model(**inputs, use_cache=cache is not None, cache=cache, **kwargs).logits
    return logits[:, 0] if keep else _rows_of(logits, last)[:, 0]


def capture_encoded(
    model: nn.Module,
    inputs,
    layouts: Sequence[SampleLayout],
    positions: Sequence[str] = ("cattok",),
    mode: str = "exact",
    answer_tokens: Sequence[int] | None = None,
    cache=None,
) -> list[HeadCapture]:
    """The forward pass of `capture_heads_batch`, on inputs already made by `inputs.encode_requests`.

    Args:
        model: a supported LVLM.
        inputs: the ``BatchFeature`` of `encode_requests` (right-padded batch).
        layouts: its `SampleLayout` list.
        positions, mode, answer_tokens: as in `capture_heads`.
        cache: a transformers ``Cache`` (e.g. ``DynamicCache``) that the prefill fills with every
            layer's keys and values, so generation can continue from it without a second
            prefill (`harness.lm_eval_plugin.generation`); None runs without a cache.

    Returns:
        One `HeadCapture` per layout.

    Raises:
        UserInputError: unsupported model, unknown mode or position, or a readout position past the prompt.
    """
    adapter = resolve_adapter(model)
    positions = validate_positions(positions)
    if mode not in MODES:
        raise UserInputError(f"unknown capture mode {mode!r}; choose one of {', '.join(MODES)}")
    device = next(model.parameters()).device
    inputs = inputs.to(device=device, dtype=model.dtype)
    needles = any(layout.needle_span is not None for layout in layouts)
    # The needle mass is read at the last prefill position (App. K): one more row when needed.
    rows = torch.tensor([readout_indices(positions, lay.cattok, lay.last) + [lay.last] * needles for lay in layouts],
                        device=device)
    last = torch.tensor([[lay.last] for lay in layouts], device=device)
    span_weights, token_weights = _per_image_weights(layouts, inputs["input_ids"].shape[1], device, needles)
    recorder = _Recorder(model, adapter, mode, rows, span_weights, token_weights, inputs["attention_mask"].bool())
    with torch.no_grad(), recorder.recording():
        logits = _last_logits(model, inputs, last, cache)
    answer_ids = None if answer_tokens is None else torch.tensor(list(answer_tokens), device=device)
    captures = []
    n_points = len(positions)
    for row, layout in enumerate(layouts):
        n_images = len(layout.image_spans)
        needle = {}
        if layout.needle_span is not None:
            needle = {"needle_mass": recorder.pointer[row, n_points, :, :, -1].cpu(),
                      "needle_mass_eq3": recorder.pointer_eq3[row, n_points, :, :, -1].cpu()}
        captures.append(
            HeadCapture(
                pointer=recorder.pointer[row, :n_points, ..., :n_images].cpu(),
                pointer_eq3=recorder.pointer_eq3[row, :n_points, ..., :n_images].cpu(),
                head_output=recorder.head_output[row, :n_points].cpu(),
                image_embeds=recorder.image_embeds[row, :n_images].cpu(),
                answer_logits=None if answer_ids is None else logits[row, answer_ids].float().cpu(),
                image_spans=layout.image_spans,
                readout_indices=rows[row, :n_points].tolist(),
                positions=positions,
                n_layers=len(recorder.modules),
                n_heads=recorder.heads,
                head_dim=recorder.head_dim,
                mode=mode,
                head_dims=recorder.head_dims,
                **needle,
            )
        )
    return captures


def capture_heads_batch(
    model: nn.Module,
    processor,
    samples: Sequence[CaptureRequest],
    positions: Sequence[str] = ("cattok",),
    mode: str = "exact",
    answer_tokens: Sequence[int] | None = None,
    image_inputs=None,
) -> list[HeadCapture]:
    """`capture_heads` for several samples in one right-padded forward pass.

    Gives the same numbers as capturing each sample alone (padding is masked and follows every
    sample's real tokens, so causal context and positions are unchanged).

    Args:
        model: a supported LVLM ``...ForConditionalGeneration`` (`adapters.SUPPORTED_ARCHITECTURES`).
        processor: its processor (fast tokenizer, chat template).
        samples: `CaptureRequest` objects.
        positions, mode, answer_tokens: as in `capture_heads`.
        image_inputs: the protocol's per-image inputs (`image_inputs.resolve_image_inputs`), or
            None for the processor's own defaults.

    Returns:
        One `HeadCapture` per sample, in order.

    Raises:
        UserInputError: see `capture_heads`.
    """
    inputs, layouts = encode_requests(processor, samples, image_token_id(model, resolve_adapter(model)), image_inputs)
    return capture_encoded(model, inputs, layouts, positions, mode, answer_tokens)


def capture_heads(
    model: nn.Module,
    processor,
    prompt: str,
    images: Sequence[Image.Image],
    query_char_span: tuple[int, int] | None,
    positions: Sequence[str] = ("cattok",),
    mode: str = "exact",
    answer_tokens: Sequence[int] | None = None,
    image_inputs=None,
    needle_char_span: tuple[int, int] | None = None,
) -> HeadCapture:
    """Capture every language-model head of `model` at the readout positions, in one prefill forward.

    The prompt is rendered as one user message interleaving its text with `images` through the
    processor's chat template (generation prompt added), processed, and run once on the model's
    own attention kernel; the attention implementation and all hooks are restored afterwards.

    Args:
        model: a supported LVLM ``...ForConditionalGeneration`` (`adapters.SUPPORTED_ARCHITECTURES`).
        processor: its processor (fast tokenizer, chat template).
        prompt: the stored prompt with one ``<image>`` placeholder per image.
        images: one PIL image per placeholder.
        query_char_span: half-open character span of `prompt`; the cattok is the token holding its
            last character. None allowed when `positions` is only ``("last",)``.
        positions: readout positions from `readout.READOUT_POSITIONS` (App. G).
        mode: the score the run ranks heads by: ``exact`` (the model's attention), ``proxy`` (Eq. 3
            literally) or ``proxy_causal`` (Eq. 3 over j <= p, which also makes ``pointer_eq3`` causal).
        answer_tokens: token ids whose next-token logits to return (see `answers.answer_token_ids`).
        image_inputs: the protocol's per-image inputs (`image_inputs.resolve_image_inputs(processor,
            resolve_adapter(model))`), or None for the processor's own defaults.
        needle_char_span: half-open character span of a text needle in `prompt` (App. K), or None.

    Returns:
        A `HeadCapture` (pointer and pointer_eq3 [P, L, H, N], head_output [P, L, H, d_h],
        image_embeds [N, d_model]; needle_mass and needle_mass_eq3 [L, H] with a needle).

    Raises:
        UserInputError: unsupported model (lists the supported ones), unknown mode or position,
            placeholder/image count mismatch, image spans not matching the images, or a query or
            needle span that maps to no token (names the span and the text around it).
    """
    request = CaptureRequest(prompt, images, query_char_span, needle_char_span)
    return capture_heads_batch(model, processor, [request], positions, mode, answer_tokens, image_inputs)[0]
