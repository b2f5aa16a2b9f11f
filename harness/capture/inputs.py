"""Turn capture requests into one padded model input and each sample's token layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from PIL import Image

from icir_common import UserInputError

from .spans import conversation, image_spans, locate_pieces, query_token, split_prompt, text_token_span

if TYPE_CHECKING:
    from .image_inputs import ImageCall


@dataclasses.dataclass(frozen=True)
class CaptureRequest:
    """One sample to capture: a stored prompt, its images, and the query's character span.

    Attributes:
        prompt: text with one literal ``<image>`` placeholder per image (the dataset's ``prompt``).
        images: one PIL image per placeholder, in order.
        query_char_span: half-open ``(start, end)`` character span of `prompt` whose last character
            defines the cattok; None when only the ``last`` readout position is requested.
        needle_char_span: half-open character span of a text needle in `prompt` (App. K), whose
            attention mass at the last prefill position the capture records; None for none.
    """

    prompt: str
    images: Sequence[Image.Image]
    query_char_span: tuple[int, int] | None = None
    needle_char_span: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class SampleLayout:
    """Where one sample's tokens are in the padded batch.

    Attributes:
        image_spans: N half-open ``(start, end)`` token spans, one per image (`spans.image_spans`).
        image_of_token: [T_batch] long, image index of each image token, -1 elsewhere.
        cattok: token index of the cattok, or None without a query span.
        last: index of the last prefill token (right padding follows it).
        needle_span: half-open token span of the request's text needle, or None.
    """

    image_spans: list[tuple[int, int]]
    image_of_token: torch.Tensor
    cattok: int | None
    last: int
    needle_span: tuple[int, int] | None = None


def render(processor, request: CaptureRequest) -> tuple[str, list[str]]:
    """The chat-template text of `request` (one user turn, generation prompt added) and its prompt pieces."""
    pieces = split_prompt(request.prompt, len(request.images))
    text = processor.apply_chat_template(conversation(pieces), add_generation_prompt=True, tokenize=False)
    return text, pieces


def encode_requests(
    processor, requests: Sequence[CaptureRequest], image_token_id: int, image_inputs: ImageCall | None = None
):
    """Process `requests` into one right-padded batch and the layout of each sample.

    Right padding keeps every sample's real tokens at positions 0..T_i-1 with the same causal
    context as when processed alone; the attention mask hides the padding.

    Args:
        image_inputs: the protocol's per-image inputs (`image_inputs.resolve_image_inputs`): its
            transform is applied to every image, its ``images_kwargs`` go to the processor call,
            and with ``lone_images`` the images are passed as one flat list. None: the
            processor's own defaults (images as given, one list per sample).

    Returns:
        ``(model_inputs, layouts)``: a ``BatchFeature`` of tensors for ``model(**model_inputs)``
        (``input_ids`` [B, T], ``attention_mask`` [B, T], pixel inputs...), and one `SampleLayout`
        per request.

    Raises:
        UserInputError: placeholder/image count mismatch, a query or needle span that maps to no token, a
            processor without a fast tokenizer (no character offsets), image spans that do not
            match the images (see `spans`), or a non-PIL image where `image_inputs` resizes to a
            square.
    """
    if not requests:
        raise UserInputError("no samples to capture")
    rendered = [render(processor, request) for request in requests]
    images = [list(request.images) for request in requests]
    has_images = any(images)
    call_kwargs = {}
    if image_inputs is not None and has_images:
        images = [[image_inputs.transform(image) for image in sample] for sample in images]
        if image_inputs.call_kwargs:
            call_kwargs["images_kwargs"] = image_inputs.images_kwargs()
        if image_inputs.lone_images:
            images = [image for sample in images for image in sample]
    if not getattr(processor.tokenizer, "is_fast", False):
        raise UserInputError("head capture needs a fast tokenizer (character offsets); load it with use_fast=True")
    texts = [text for text, _ in rendered]
    bos = processor.tokenizer.bos_token
    encoded = processor(
        text=texts,
        images=images if has_images else None,
        padding=True,
        padding_side="right",
        # As ProcessorMixin.apply_chat_template: a template that writes the BOS gets no second one.
        add_special_tokens=not (bos and texts[0].startswith(bos)),
        return_offsets_mapping=True,
        return_text_replacement_offsets=True,
        return_tensors="pt",
        **call_kwargs,
    )
    offsets = encoded.pop("offset_mapping")
    replacements = encoded.pop("text_replacement_offsets")
    layouts = []
    for row, (request, (text, pieces)) in enumerate(zip(requests, rendered)):
        spans, image_of_token = image_spans(encoded["input_ids"][row], offsets[row], replacements[row], image_token_id)
        placeholders = [r["span"] for r in replacements[row] if r["type"] == "image"]
        cattok = needle = None
        if request.query_char_span is not None or request.needle_char_span is not None:
            located = locate_pieces(text, pieces, placeholders)
        if request.query_char_span is not None:
            cattok = query_token(request.prompt, request.query_char_span, located, replacements[row], offsets[row])
        if request.needle_char_span is not None:
            needle = text_token_span(request.prompt, request.needle_char_span, located, replacements[row], offsets[row])
        last = int(encoded["attention_mask"][row].sum()) - 1
        layouts.append(SampleLayout(spans, image_of_token, cattok, last, needle))
    return encoded, layouts
