"""Yes/No parsing and the toolkit's correctness and compliance, on hand-worked responses."""

from __future__ import annotations

import pytest

from vhs_adapter.scoring import is_compliant, is_correct, parse_yes_no, word_tokens


@pytest.mark.parametrize(
    "response, expected",
    [
        ("Yes", "yes"),
        ("No.", "no"),
        ("YES, there is a dog.", "yes"),
        ("Yes! The first image shows one.", "yes"),
        ("The answer is: No", "no"),
        ("**Yes**", "yes"),
        ('"No"', "no"),
        ("(no)", "no"),
        ("No. There is a cat in it.", "no"),
        ("There is no dog, so yes.", "no"),  # the first yes/no word is the answer
        ("Yes. No wait, no.", "yes"),
        ("I don't know.", None),
        ("Nothing like that.", None),
        ("Yesterday it rained.", None),
        ("yes/no", None),  # one token, as in nltk
        ("a no-brainer", None),
        ("", None),
    ],
)
def test_parse_yes_no(response, expected):
    assert parse_yes_no(response) == expected


def test_word_tokens_split_punctuation_and_lower_case():
    assert word_tokens("No, there ISN'T.") == ["no", ",", "there", "is", "n't", "."]
    assert word_tokens("Answer: yes.\nNo doubt") == ["answer", ":", "yes", ".", "no", "doubt"]


@pytest.mark.parametrize(
    "response, answer, correct, compliant",
    [
        ("Yes.", "yes", True, True),
        ("Yes.", "no", False, True),
        ("There is no dog, so yes.", "yes", True, True),  # both words: correct for either, as in the toolkit
        ("There is no dog, so yes.", "no", True, True),
        ("I cannot tell.", "no", False, False),
        ("Nope", "no", False, False),
        ("NO", "No", True, True),
    ],
)
def test_toolkit_correctness_and_compliance(response, answer, correct, compliant):
    assert is_correct(response, answer) is correct
    assert is_compliant(response) is compliant
