"""What the model class reads from lm-eval requests: one document's prompt, images and cattok span.

lm-eval sends several `Instance` objects per document (one per option letter of a multiple-choice
task); each carries ``task_name``, ``doc_id`` and the document itself. The model captures each
document once, so requests are grouped by ``(task_name, doc_id)`` here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image

from icir_common import UserInputError

QUERY_SPAN_FIELD = "cattok_char_span"
NEEDLE_SPAN_FIELD = "needle_char_span"  # the App. K text needle task's needle sentence
PROMPT_FIELD = "prompt"
# Record fields the analysis stage reads back from the store (targets, writer split, gold answer):
# ICIR-MCQ ``target_position``, ``probe_split``, ``target_image_id``, ``answer_index``; VHs
# ``needle_positions``, ``answer``. They are copied as the builders wrote them, never re-derived.
HEAD_FIELDS = ("target_position", "probe_split", "target_image_id", "answer_index", "needle_positions", "answer")


@dataclass(frozen=True)
class DocInput:
    """One document as the capture engine takes it.

    Attributes:
        task: lm-eval task name; doc_id: document index in the task (together: the store key).
        prompt: the stored prompt, one ``<image>`` placeholder per image.
        images: the document's images, context order.
        query_char_span: half-open character span of `prompt` whose last token is the cattok.
        fingerprint: hex digest of prompt, spans and image pixels (detects a changed dataset on resume).
        fields: the document's `HEAD_FIELDS` that it has, JSON values as stored.
        needle_char_span: the text needle's character span (``needle_char_span``), or None.
    """

    task: str
    doc_id: int
    prompt: str
    images: Sequence[Image.Image]
    query_char_span: tuple[int, int]
    fingerprint: str
    fields: dict
    needle_char_span: tuple[int, int] | None = None


def fingerprint(prompt: str, span: Sequence[int], images: Sequence[Image.Image],
                needle_span: Sequence[int] | None = None) -> str:
    """BLAKE2b (128-bit, hex) of the prompt, the span (and needle span, when given) and every
    image's mode, size and pixels."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(prompt.encode())
    digest.update(json.dumps([int(x) for x in span]).encode())
    if needle_span is not None:
        digest.update(json.dumps({"needle": [int(x) for x in needle_span]}).encode())
    for image in images:
        digest.update(f"{image.mode}:{image.size}".encode())
        digest.update(image.tobytes())
    return digest.hexdigest()


def doc_input(request) -> DocInput:
    """The `DocInput` of an lm-eval multimodal request (arguments ``(context, ..., {"visual": images})``).

    Raises:
        UserInputError: a request without images, a document without a ``cattok_char_span``, or a
            context that is not the stored prompt (a chat template, few-shot examples or a system
            instruction were added by lm-eval; this model renders the prompt itself).
    """
    args = request.args
    if len(args) < 3 or not isinstance(args[-1], dict) or "visual" not in args[-1]:
        raise UserInputError(
            f"task {request.task_name}: hf-multimodal-heads needs multimodal requests (a task with doc_to_image)"
        )
    doc = request.doc
    if QUERY_SPAN_FIELD not in doc or PROMPT_FIELD not in doc:
        raise UserInputError(
            f"task {request.task_name}: documents need '{PROMPT_FIELD}' and '{QUERY_SPAN_FIELD}' fields "
            f"(the icir_mcq_* and vhs_* tasks have them)"
        )
    context, prompt = args[0], doc[PROMPT_FIELD]
    if context != prompt:
        raise UserInputError(
            f"task {request.task_name} doc {request.doc_id}: the request context is not the stored prompt; "
            f"do not pass --apply_chat_template, --num_fewshot or --system_instruction with hf-multimodal-heads "
            f"(it renders the prompt with the model's own chat template)"
        )
    images = list(args[-1]["visual"])
    span = tuple(int(x) for x in doc[QUERY_SPAN_FIELD])
    needle = tuple(int(x) for x in doc[NEEDLE_SPAN_FIELD]) if doc.get(NEEDLE_SPAN_FIELD) is not None else None
    return DocInput(
        task=request.task_name,
        doc_id=int(request.doc_id),
        prompt=prompt,
        images=images,
        query_char_span=span,
        fingerprint=fingerprint(prompt, span, images, needle),
        fields={name: _plain(doc[name]) for name in HEAD_FIELDS if name in doc},
        needle_char_span=needle,
    )


def _plain(value):
    """A record value as JSON reads it back (numpy scalars and tuples to Python ints and lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value.item() if hasattr(value, "item") else value


def group_by_doc(requests: Sequence) -> dict[tuple[str, int], list[int]]:
    """Request indices per ``(task_name, doc_id)``, documents in first-seen order."""
    groups: dict[tuple[str, int], list[int]] = {}
    for index, request in enumerate(requests):
        groups.setdefault((request.task_name, int(request.doc_id)), []).append(index)
    return groups
