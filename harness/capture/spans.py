"""From the stored prompt to token positions: rendered text, character spans and image spans.

A dataset prompt holds one literal ``<image>`` placeholder per image. It is rendered as one user
message whose content interleaves text items and image items, through the processor's chat
template. The processor then replaces each image placeholder of the rendered text with the
model's own image tokens (its ``text_replacement_offsets`` say where) and tokenises the expanded
text (its ``offset_mapping`` says which characters each token covers). A character of the stored
prompt therefore reaches a token in three steps: prompt -> rendered text (`TextPiece`), rendered ->
expanded text (`rendered_to_expanded`), expanded text -> token (`token_at`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from icir_common import UserInputError
from icir_mcq.prompt import IMAGE_PLACEHOLDER


@dataclasses.dataclass(frozen=True)
class TextPiece:
    """Where the kept text of one prompt piece (text between ``<image>`` placeholders) landed.

    Characters ``[prompt_start, prompt_start + length)`` of the stored prompt are characters
    ``[rendered_start, rendered_start + length)`` of the rendered chat-template text. A template
    that trims whitespace keeps fewer characters than the piece has; the trimmed ones map nowhere.
    """

    prompt_start: int
    rendered_start: int
    length: int

    def to_rendered(self, char: int) -> int | None:
        """The rendered-text offset of prompt character `char`, or None when outside this piece."""
        if self.prompt_start <= char < self.prompt_start + self.length:
            return self.rendered_start + char - self.prompt_start
        return None


def split_prompt(prompt: str, n_images: int) -> list[str]:
    """The text pieces of `prompt` around its ``<image>`` placeholders (``n_images + 1`` pieces).

    Raises:
        UserInputError: the number of placeholders differs from `n_images`.
    """
    pieces = prompt.split(IMAGE_PLACEHOLDER)
    if len(pieces) - 1 != n_images:
        raise UserInputError(
            f"the prompt holds {len(pieces) - 1} {IMAGE_PLACEHOLDER} placeholder(s) but {n_images} image(s) "
            f"were given; pass one image per placeholder (prompt starts {prompt[:80]!r})"
        )
    return pieces


def conversation(pieces: Sequence[str]) -> list[dict]:
    """One user message interleaving the text `pieces` with an image item between consecutive pieces."""
    content: list[dict] = []
    for index, text in enumerate(pieces):
        if index > 0:
            content.append({"type": "image"})
        if text:
            content.append({"type": "text", "text": text})
    return [{"role": "user", "content": content}]


def _match(rendered: str, text: str, cursor: int) -> tuple[int, int, int] | None:
    """The first occurrence of piece `text` in `rendered` at or after `cursor`, trimmed or not.

    The piece's stripped text is searched (its first occurrence is the piece: everything after
    `cursor` that precedes it is template text), then widened over the piece's leading and
    trailing whitespace wherever the template kept it right next to that occurrence. Searching the
    verbatim piece first would be wrong for templates that trim: a later copy of the piece with its
    whitespace (a passage that the question or a later passage repeats) would match instead.

    Returns:
        ``(lead, rendered_start, length)``: the piece's kept characters are
        ``text[lead:lead + length]`` at ``rendered[rendered_start:]``; None when absent.
    """
    kept = text.strip()
    found = rendered.find(kept, cursor)
    if found < 0:
        return None
    lead = len(text) - len(text.lstrip())
    trail = len(text) - len(text.rstrip())
    stop = found + len(kept)
    if lead and found - lead >= cursor and rendered[found - lead:found] == text[:lead]:
        found, lead = found - lead, 0
    if trail and rendered[stop:stop + trail] == text[len(text) - trail:]:
        stop += trail
    return lead, found, stop - found


def locate_pieces(
    rendered: str, pieces: Sequence[str], placeholder_spans: Sequence[tuple[int, int]]
) -> list[TextPiece]:
    """Find each prompt piece in the rendered chat-template text.

    Piece k (k >= 1) follows image k-1 in the prompt, so it is searched after both the previous
    piece and the image's placeholder in the rendered text (`placeholder_spans`, one
    ``(start, end)`` per image in rendered-text offsets). This holds for templates that keep the
    interleaving and for templates that render all images before the text. Its first occurrence
    there is taken, with the surrounding whitespace the template kept (`_match`; templates that
    ``trim`` text items keep none), so a later copy of its text (a passage repeated further on, or
    repeated by the question) is never taken for it. Whitespace-only pieces are skipped: they carry
    no query.

    Returns:
        One `TextPiece` per located piece, in prompt order.

    Raises:
        UserInputError: a piece is not in the rendered text (the template rewrites text items).
    """
    located: list[TextPiece] = []
    cursor = 0
    prompt_start = 0
    for index, text in enumerate(pieces):
        if index > 0:
            cursor = max(cursor, placeholder_spans[index - 1][1])
        if text.strip():
            match = _match(rendered, text, cursor)
            if match is None:
                raise UserInputError(
                    f"prompt text {text[:60]!r} (piece {index} of {len(pieces)}) does not appear in the "
                    f"chat-template output after character {cursor}; the template changes text items, so "
                    f"character spans cannot be mapped"
                )
            lead, found, length = match
            located.append(TextPiece(prompt_start + lead, found, length))
            cursor = found + length
        prompt_start += len(text) + len(IMAGE_PLACEHOLDER)
    return located


def rendered_to_expanded(char: int, replacements: Sequence[dict]) -> int:
    """Offset in the processor's expanded text of rendered-text offset `char` (outside placeholders).

    `replacements` is one sample's ``text_replacement_offsets`` from the processor: dicts with
    ``span`` (placeholder in the rendered text) and ``new_span`` (its expansion).
    """
    shift = 0
    for replacement in replacements:
        start, end = replacement["span"]
        if end <= char:
            new_start, new_end = replacement["new_span"]
            shift += (new_end - new_start) - (end - start)
    return char + shift


def token_at(char: int, offsets: torch.Tensor) -> int | None:
    """Index of the token whose half-open character span ``offsets[i]`` contains `char`, else None.

    `offsets` is one sample's ``offset_mapping`` [T, 2] (padding tokens have ``(0, 0)``).
    """
    hits = ((offsets[:, 0] <= char) & (char < offsets[:, 1])).nonzero()
    return int(hits[0, 0]) if len(hits) else None


def query_token(
    prompt: str,
    query_char_span: tuple[int, int],
    pieces: Sequence[TextPiece],
    replacements: Sequence[dict],
    offsets: torch.Tensor,
) -> int:
    """The cattok: index of the token holding the last character of `query_char_span` (§3.2).

    Args:
        prompt: the stored prompt (with ``<image>`` placeholders) that `query_char_span` indexes.
        query_char_span: half-open ``(start, end)`` character span of `prompt`.
        pieces: `locate_pieces` output for this prompt.
        replacements, offsets: the processor's ``text_replacement_offsets`` and ``offset_mapping`` [T, 2]
            for this sample.

    Raises:
        UserInputError: the span is empty or outside the prompt, or its last character reaches no
            token (inside an ``<image>`` placeholder, or whitespace the template dropped); the message
            names the span and the text around it.
    """
    start, end = query_char_span
    context = f"{prompt[max(0, start - 40):start]!r} [{prompt[start:end]!r}] {prompt[end:end + 40]!r}"
    if not 0 <= start < end <= len(prompt):
        raise UserInputError(
            f"query_char_span {query_char_span} is not a non-empty span of the {len(prompt)}-character prompt"
        )
    last_char = end - 1
    rendered = next((r for piece in pieces if (r := piece.to_rendered(last_char)) is not None), None)
    token = None if rendered is None else token_at(rendered_to_expanded(rendered, replacements), offsets)
    if token is None:
        raise UserInputError(
            f"query_char_span {query_char_span} does not map to a token after the chat template: its last "
            f"character is not text the template kept (text around it: {context})"
        )
    return token


def text_token_span(
    prompt: str,
    char_span: tuple[int, int],
    pieces: Sequence[TextPiece],
    replacements: Sequence[dict],
    offsets: torch.Tensor,
) -> tuple[int, int]:
    """Half-open token span ``[first, last + 1)`` of the tokens holding the first and the last
    character of `char_span` (a text span of `prompt`, e.g. the App. K needle sentence).

    Raises:
        UserInputError: as `query_token`, for either end of the span.
    """
    last = query_token(prompt, char_span, pieces, replacements, offsets)  # first: it refuses an empty span
    first = query_token(prompt, (char_span[0], char_span[0] + 1), pieces, replacements, offsets)
    return first, last + 1


def image_spans(
    input_ids: torch.Tensor,
    offsets: torch.Tensor,
    replacements: Sequence[dict],
    image_token_id: int,
) -> tuple[list[tuple[int, int]], torch.Tensor]:
    """One token span per image, from the runs of the model's own image token in `input_ids`.

    Each image token is assigned to the image whose placeholder expansion (``new_span`` of
    `replacements`) contains its characters. An image's span runs from its first to its last
    image token, half-open: ``(first, last + 1)``. Models that split one image into several runs
    (row-break tokens of Pixtral, tiles, pan-and-scan crops) thus get one span that also covers the
    markers between the runs; the tokens outside the runs (start/end markers) are not in the span.

    Args:
        input_ids: [T] one sample's token ids.
        offsets: [T, 2] its ``offset_mapping`` into the expanded text.
        replacements: its ``text_replacement_offsets`` (image entries, in image order).
        image_token_id: the model's image-placeholder token id.

    Returns:
        ``(spans, image_of_token)``: N half-open ``(start, end)`` spans, and [T] long tensor giving
        the image index of each image token, -1 elsewhere.

    Raises:
        UserInputError: the number of images with image tokens differs from the number of images,
            or image tokens lie outside every image's expansion (the prompt text contains the
            model's image token).
    """
    expansions = [r["new_span"] for r in replacements if r["type"] == "image"]
    is_image = input_ids == image_token_id
    image_of_token = torch.full_like(input_ids, -1)
    for index, (new_start, new_end) in enumerate(expansions):
        inside = is_image & (offsets[:, 0] >= new_start) & (offsets[:, 1] <= new_end)
        image_of_token[inside] = index
    spans = []
    for index in range(len(expansions)):
        positions = (image_of_token == index).nonzero()
        if len(positions):
            spans.append((int(positions[0, 0]), int(positions[-1, 0]) + 1))
    stray = int((is_image & (image_of_token < 0)).sum())
    if len(spans) != len(expansions) or stray:
        raise UserInputError(
            f"found image-token spans for {len(spans)} of {len(expansions)} image(s) in input_ids "
            f"(image token id {image_token_id}, {stray} image token(s) outside any image); "
            f"the prompt text must not contain the model's image token"
        )
    return spans, image_of_token
