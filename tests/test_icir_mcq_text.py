"""Hand-worked cases for category mentions, prompt rendering, passages and sample counts."""

from __future__ import annotations

import pytest

from icir_common import UserInputError
from icir_mcq.mentions import last_mention_span, mentions, plural_forms
from icir_mcq.mmniah import split_passages, truncate_passage
from icir_mcq.prompt import option_line_span, render_mcq_prompt
from icir_mcq.sampling import check_sample_count, n_choices_of, normalise_option


@pytest.mark.parametrize("name, plurals", [
    ("person", ("people", "persons")),
    ("knife", ("knives",)),
    ("mouse", ("mice",)),
    ("bus", ("buses",)),
    ("sheep", ("sheep",)),
    ("wine glass", ("wine glasses",)),
    ("sandwich", ("sandwiches",)),
    ("toothbrush", ("toothbrushes",)),
    ("teddy bear", ("teddy bears",)),
    ("hair drier", ("hair driers",)),
    ("pony", ("ponies",)),
    ("toy", ("toys",)),
    ("Traffic Light", ("traffic lights",)),
])
def test_plural_forms(name, plurals):
    assert plural_forms(name) == plurals


@pytest.mark.parametrize("text, name, expected", [
    ("Two zebras grazing in a field.", "zebra", True),
    ("A ZEBRA stands alone", "zebra", True),
    ("People walking down the street.", "person", True),
    ("A person riding a horse.", "person", True),
    ("A man riding a horse.", "person", False),  # synonyms are not matched (docs/protocol.md)
    ("Knives on a cutting board.", "knife", True),
    ("A computer mouse and keyboard.", "mouse", True),
    ("Three mice.", "mouse", True),
    ("Buses parked in a row.", "bus", True),
    ("A busy street.", "bus", False),
    ("The catalog is open.", "cat", False),
    ("A cat's toy.", "cat", True),
    ("Some traffic\n  lights at night.", "traffic light", True),
    ("A traffic cone.", "traffic light", False),
    ("A small startup.", "star", False),
    ("Hot dogs with mustard.", "hot dog", True),
    ("A dog that is hot.", "hot dog", False),
    ("A table with food.", "dining table", False),
])
def test_mentions(text, name, expected):
    assert mentions(text, name) is expected


def test_last_mention_span_is_the_final_match():
    text = "A zebra. Two zebras. zebra-like"
    assert last_mention_span(text, "zebra") == (21, 26)
    assert last_mention_span("Some zebras", "zebra") == (5, 11)
    assert last_mention_span("no match", "zebra") is None


def test_render_mcq_prompt_layout_and_option_spans():
    prompt = render_mcq_prompt(["P0", "P1", "P2"], "zebra",
                           ["A zebra.", "Two zebras.", "The zebra eats.", "A zebra herd."])
    assert prompt == (
        "P0\n<image>\nP1\n<image>\nP2\n"
        "Which caption best describes the image above that contains zebra? "
        "Answer with a single letter (A, B, C, or D).\n"
        "A) A zebra.\nB) Two zebras.\nC) The zebra eats.\nD) A zebra herd."
    )
    start, end = option_line_span(prompt, "D")
    assert prompt[start:end] == "A zebra herd."
    s, e = last_mention_span(prompt, "zebra")
    assert prompt[s:e] == "zebra" and start <= s < e <= end


def test_split_passages_skips_empty_segments():
    context = "First.\n\nSecond para.\n<image>\n<image>\nThird.\n<image>\n  \n<image>Fourth."
    assert split_passages(context) == ("First.\n\nSecond para.", "Third.", "Fourth.")
    assert split_passages("<image>") == ()


def test_truncate_passage_cuts_at_a_word_boundary():
    assert truncate_passage("one two three", None) == "one two three"
    assert truncate_passage("one two three", 13) == "one two three"
    assert truncate_passage("one two three", 9) == "one two"
    assert truncate_passage("one two three", 7) == "one two"
    assert truncate_passage("one two three", 6) == "one"
    assert truncate_passage("abcdefgh", 3) == "abc"


@pytest.mark.parametrize("config, samples", [("n5", 3000), ("n6", 3000), ("n5", 20), ("n6", 12), ("n2", 4)])
def test_balanceable_sample_counts(config, samples):
    check_sample_count(config, samples)


@pytest.mark.parametrize("config, samples, hint", [
    ("n5", 30, "multiple of 20 = lcm(5 positions, 4 letters); try 20 or 40"),
    ("n6", 3010, "multiple of 12 = lcm(6 positions, 4 letters); try 3000 or 3012"),
    ("n6", 0, "try 12"),
    ("n5", -20, "try 20"),
])
def test_unbalanceable_sample_counts(config, samples, hint):
    with pytest.raises(UserInputError, match="cannot be balanced exactly") as err:
        check_sample_count(config, samples)
    assert hint in str(err.value)


def test_config_names():
    assert n_choices_of("n5") == 5 and n_choices_of("n12") == 12
    for bad in ("5", "n1", "N5", "n5x"):
        with pytest.raises(UserInputError, match="unknown config"):
            n_choices_of(bad)


def test_option_normalisation_treats_case_space_and_period_alike():
    assert normalise_option("A zebra  grazing.") == normalise_option("a Zebra grazing") == "a zebra grazing"
    assert normalise_option("Two zebras.") != normalise_option("A zebra.")
