"""Prompt pieces whose text repeats elsewhere in the prompt map to their own place (issue 18).

Gemma 3's chat template trims text items, so the verbatim piece (with its newlines) is not where the
piece was rendered; it may still appear later, inside a passage or question that repeats it. Each
piece must be found at its own place, and the cattok must be the token of the query's own
occurrence. The cattok is checked here without character offsets: the decoded tokens up to and
including it end with the query text and hold as many copies of it as the prompt up to the query.
"""

from __future__ import annotations

import datasets
import pytest

from harness.capture.adapters import image_token_id, resolve_adapter
from harness.capture.inputs import CaptureRequest, encode_requests
from harness.capture.spans import locate_pieces
from harness.cli import main as icir_main
from harness.tiny_models import ARCHS, build_tiny, random_images
from icir_common import UserInputError

QUESTION = "Which caption describes the cross? Answer A or B.\nA) A cross.\nB) A circle."
# The last passage repeats the first: the first piece's verbatim text 'The weather did\n' only
# appears in the last piece once a template trims the first.
LAST_REPEATS_FIRST = f"The weather did\n<image>\nThe numbers\n<image>\nThe weather did\n{QUESTION}"
# A passage repeats a line of the question: '\nA) A cross.\n' appears verbatim in the question.
PASSAGE_REPEATS_QUESTION = f"Intro text\n<image>\nA) A cross.\n<image>\nWhich caption\n<image>\nThe end\n{QUESTION}"


def _span(prompt: str, word: str, occurrence: int) -> tuple[int, int]:
    """Character span of the `occurrence`-th (0-based) `word` in `prompt`."""
    start = -1
    for _ in range(occurrence + 1):
        start = prompt.index(word, start + 1)
    return start, start + len(word)


CASES = [
    # (prompt, query word, which occurrence of it the query is)
    (LAST_REPEATS_FIRST, "cross", 0),  # the question's query word
    (LAST_REPEATS_FIRST, "weather", 0),  # in the first passage
    (LAST_REPEATS_FIRST, "weather", 1),  # in its repeat, the last passage
    (PASSAGE_REPEATS_QUESTION, "cross", 0),  # in the passage that repeats the question's line
    (PASSAGE_REPEATS_QUESTION, "cross", 1),  # in the question
    (PASSAGE_REPEATS_QUESTION, "caption", 1),  # in the question, repeated by a passage before it
    (PASSAGE_REPEATS_QUESTION, "circle", 0),  # the last word of the prompt
]


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request):
    model, processor = build_tiny(request.param)
    return processor, image_token_id(model, resolve_adapter(model))


def assert_cattok_is_query(processor, input_ids, cattok: int, prompt: str, span: tuple[int, int]) -> None:
    """The tokens up to the cattok decode to text ending with the query, at the query's occurrence."""
    query = prompt[span[0]:span[1]]
    decoded = processor.tokenizer.decode(input_ids[: cattok + 1], skip_special_tokens=True)
    assert decoded.endswith(query), (query, decoded[-60:])
    assert decoded.count(query) == prompt[: span[1]].count(query), (query, decoded)
    # The cattok holds the query's last character: the tokens before it do not reach it.
    assert not processor.tokenizer.decode(input_ids[:cattok], skip_special_tokens=True).endswith(query)


@pytest.mark.parametrize(("prompt", "word", "occurrence"), CASES)
def test_repeated_text_maps_to_its_own_occurrence(tiny, prompt, word, occurrence):
    processor, token_id = tiny
    span = _span(prompt, word, occurrence)
    images = random_images(prompt.count("<image>"))
    encoded, (layout,) = encode_requests(processor, [CaptureRequest(prompt, images, span)], token_id)
    assert_cattok_is_query(processor, encoded["input_ids"][0], layout.cattok, prompt, span)


@pytest.mark.slow
def test_every_demo_document_maps_on_tiny_gemma3(tmp_path):
    out = tmp_path / "demo"
    assert icir_main(["demo", "--no-eval", "--out", str(out)]) == 0
    model, processor = build_tiny("gemma3")
    token_id = image_token_id(model, resolve_adapter(model))
    for config in ("n5", "n6"):
        docs = datasets.load_dataset(str(out / "icir_mcq"), config)["test"]
        assert len(docs) == 240
        for index, doc in enumerate(docs):
            span = tuple(doc["cattok_char_span"])
            request = CaptureRequest(doc["prompt"], doc["images"], span)
            try:
                encoded, (layout,) = encode_requests(processor, [request], token_id)
            except UserInputError as error:
                pytest.fail(f"{config} doc {index}: {error}")
            assert_cattok_is_query(processor, encoded["input_ids"][0], layout.cattok, doc["prompt"], span)


# Rendered text of a template that trims text items and writes "<I>" per image, 3 characters each.
PIECES = ["The weather did\n", "\nThe numbers\n", "\nThe weather did\nQuestion?"]


def _placeholders(rendered: str) -> list[tuple[int, int]]:
    starts = [i for i in range(len(rendered)) if rendered.startswith("<I>", i)]
    return [(start, start + 3) for start in starts]


def test_trimmed_pieces_map_to_their_own_place():
    rendered = "<s>The weather did<I>The numbers<I>The weather did\nQuestion?</s>"
    located = locate_pieces(rendered, PIECES, _placeholders(rendered))
    assert [(p.rendered_start, p.length) for p in located] == [(3, 15), (21, 11), (35, 25)]
    assert [p.prompt_start for p in located] == [0, 24, 44]
    # Whitespace the template kept next to a piece stays mapped; trimmed whitespace maps nowhere.
    kept = "<s>The weather did\n<I>The numbers<I>\nThe weather did\nQuestion?</s>"
    located = locate_pieces(kept, PIECES, _placeholders(kept))
    assert [(p.prompt_start, p.rendered_start, p.length) for p in located] == [(0, 3, 16), (24, 22, 11), (43, 36, 26)]


def test_images_before_the_text_still_map():
    rendered = "<s><I><I>The weather did\nThe numbers\nThe weather did\nQuestion?</s>"
    located = locate_pieces(rendered, PIECES, _placeholders(rendered))
    assert [(p.rendered_start, p.length) for p in located] == [(9, 16), (25, 12), (37, 25)]


def test_a_piece_the_template_dropped_still_raises():
    # Piece 1 is not in the rendered text at all.
    rendered = "<s>The weather did<I>Other text<I>The weather did\nQuestion?</s>"
    with pytest.raises(UserInputError, match=r"'\\nThe numbers\\n' \(piece 1 of 3\) does not appear"):
        locate_pieces(rendered, PIECES, _placeholders(rendered))


def test_a_rewritten_piece_raises_through_encode_requests(tiny, monkeypatch):
    processor, token_id = tiny
    render = processor.apply_chat_template

    def rewriting(conversation, **kwargs):  # a template that rewrites a text item
        return render(conversation, **kwargs).replace("The numbers", "The figures")

    monkeypatch.setattr(processor, "apply_chat_template", rewriting)
    prompt = LAST_REPEATS_FIRST
    request = CaptureRequest(prompt, random_images(2), _span(prompt, "cross", 0))
    with pytest.raises(UserInputError, match=r"'\\nThe numbers\\n' \(piece 1 of 3\) does not appear"):
        encode_requests(processor, [request], token_id)
