"""Render an ICIR-MCQ prompt: passages interleaved with ``<image>``, the question, options A-D.

Layout (§3.2, App. B.1), one piece per line::

    passage_0
    <image>
    passage_1
    ...
    <image>
    passage_N
    Which caption best describes the image above that contains {category}? Answer with ...
    A) option_0
    B) option_1
    C) option_2
    D) option_3
"""

from __future__ import annotations

from icir_common import IMAGE_PLACEHOLDER
from icir_mcq.mentions import last_mention_span

LETTERS = ("A", "B", "C", "D")
QUESTION = (
    "Which caption best describes the image above that contains {category}? "
    "Answer with a single letter (A, B, C, or D)."
)


def render_mcq_prompt(passages: list[str], category: str, options: list[str]) -> str:
    """The stored prompt of one sample: ``len(passages) - 1`` images, question, four options."""
    lines = [passages[0]]
    for passage in passages[1:]:
        lines += [IMAGE_PLACEHOLDER, passage]
    lines.append(QUESTION.format(category=category))
    lines += option_lines(options)
    return "\n".join(lines)


def option_lines(options: list[str]) -> list[str]:
    """The answer-option lines ``"A) <option>"``, ``"B) ..."`` of a prompt, one per option (at most four;
    the ICIR-MCQ prompt layout of paper App. B, which `option_line_span` reads back)."""
    return [f"{letter}) {option}" for letter, option in zip(LETTERS, options)]


def option_line_span(prompt: str, letter: str) -> tuple[int, int]:
    """Character span ``[start, end)`` of option ``letter``'s text (after ``"X) "``) in ``prompt``.

    Options are the prompt's last four lines, so the search runs from the end.
    """
    start = prompt.rindex(f"\n{letter}) ") + len(f"\n{letter}) ")
    end = prompt.find("\n", start)
    return start, len(prompt) if end == -1 else end


def cattok_char_span(prompt: str, category: str) -> tuple[int, int] | None:
    """Span of the cattok mention (§3.2): the last mention of ``category`` in ``prompt``.

    Every option names the category, so this mention lies in option D; None if there is none.
    """
    return last_mention_span(prompt, category)
