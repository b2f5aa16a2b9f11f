"""VHs question templates, prompt layout and spans (paper §4.3, §6.1), on hand-counted offsets."""

from __future__ import annotations

import pytest

from vhs_adapter.questions import parse_question, render_vhs_prompt

# (question, template, anchor, target, anchor span, target span, cattok span), spans counted by hand
# in the question string: "For the image with a " is 21 characters, "For all images with a " is 22.
CASES = [
    (
        "For the image with a traffic cone, is there a lightning bolt?",
        "single", "traffic cone", "lightning bolt", (21, 33), (46, 60), (29, 33),
    ),
    (
        "For the image with an oval, is there an arrow?",
        "single", "oval", "arrow", (22, 26), (40, 45), (22, 26),
    ),
    (
        "For the image with dog, is there cat?",
        "single", "dog", "cat", (19, 22), (33, 36), (19, 22),
    ),
    (
        "For all images with a hot dog, do all of them contain a dining table?",
        "all", "hot dog", "dining table", (22, 29), (56, 68), (26, 29),
    ),
    (
        "For all images with an umbrella, do any of them contain person?",
        "any", "umbrella", "person", (23, 31), (56, 62), (23, 31),
    ),
]


@pytest.mark.parametrize("question, template, anchor, target, anchor_span, target_span, cattok_span", CASES)
def test_templates_give_hand_counted_spans(question, template, anchor, target, anchor_span, target_span, cattok_span):
    parsed = parse_question(question)
    assert parsed is not None
    assert (parsed.template, parsed.anchor, parsed.target) == (template, anchor, target)
    assert (parsed.anchor_span, parsed.target_span, parsed.cattok_span) == (anchor_span, target_span, cattok_span)
    assert question[slice(*anchor_span)] == anchor
    assert question[slice(*target_span)] == target


@pytest.mark.parametrize("question, template, anchor, target, anchor_span, target_span, cattok_span", CASES)
def test_spans_shifted_into_the_prompt_slice_the_same_words(
    question, template, anchor, target, anchor_span, target_span, cattok_span
):
    prompt, offset = render_vhs_prompt(question, 3)
    assert prompt == (
        "<image><image><image>\nYou are given a set of images. Please answer the following question in Yes or No: "
        + question
    )
    assert offset == prompt.index(question)
    shifted = parse_question(question).shifted(offset)
    assert prompt[slice(*shifted.anchor_span)] == anchor
    assert prompt[slice(*shifted.target_span)] == target
    assert prompt[slice(*shifted.cattok_span)] == anchor.split()[-1]


@pytest.mark.parametrize(
    "question",
    [
        "Is there a dog in the image with a cat?",
        "For the image with a dog is there a cat?",  # no comma
        "For the image with a dog, is there a cat",  # no question mark
        "For all images with a dog, do most of them contain a cat?",
        "for the image with a dog, is there a cat?",  # the templates are capitalised
    ],
)
def test_questions_outside_the_templates_do_not_parse(question):
    assert parse_question(question) is None


def test_surrounding_whitespace_is_kept_out_of_the_spans():
    question = "  For the image with a cup, is there a fork?\n"
    parsed = parse_question(question)
    assert question[slice(*parsed.anchor_span)] == "cup"
    assert question[slice(*parsed.target_span)] == "fork"
