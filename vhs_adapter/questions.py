"""Visual Haystacks question templates, the toolkit prompt, and the character spans inside it.

VHs asks one of three templated Yes/No questions (Wu et al., ICLR 2025; toolkit README):

- single needle: ``For the image with a truck, is there a dog?``
- multi needle, all: ``For all images with a truck, do all of them contain a dog?``
- multi needle, any: ``For all images with a truck, do any of them contain a dog?``

The article before each object ("a"/"an") is optional. The exact patterns, matched against the
whole question with leading/trailing whitespace allowed:

- single: ``For the image with (?:(?:a|an) )?(?P<anchor>[^,?]+?), is there (?:(?:a|an) )?(?P<target>[^?]+?)\\?``
- multi:  ``For all images with (?:(?:a|an) )?(?P<anchor>[^,?]+?), do (?P<quantifier>all|any) of them contain (?:(?:a|an) )?(?P<target>[^?]+?)\\?``

The *anchor object* (the phrase that identifies the needle image) and the *target object* (whose
presence is asked) are stored without their article, as the external retrievers of App. A insert
the anchor noun. Paper §4.3 reads the pointer score at the last token of the anchor-object phrase
(the cattok), and §6.1 starts the ablation span at "the first token of the anchor object": here the
anchor phrase is the object name itself, so the ablation starts at its first character and the
article (a format token shared by every question) stays outside. The cattok span is the last
whitespace-separated word of the anchor ("cone" in "traffic cone"); the harness maps it to the
token holding its last character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from icir_mcq.prompt import IMAGE_PLACEHOLDER

# The reference toolkit's instruction (vhs_benchmark solvers/base_solver.py), verbatim.
TOOLKIT_PREFIX = "You are given a set of images. Please answer the following question in Yes or No: "

_ARTICLE = r"(?:(?:a|an) )?"
SINGLE_NEEDLE_PATTERN = re.compile(
    rf"\s*For the image with {_ARTICLE}(?P<anchor>[^,?]+?), is there {_ARTICLE}(?P<target>[^?]+?)\?\s*"
)
MULTI_NEEDLE_PATTERN = re.compile(
    rf"\s*For all images with {_ARTICLE}(?P<anchor>[^,?]+?), "
    rf"do (?P<quantifier>all|any) of them contain {_ARTICLE}(?P<target>[^?]+?)\?\s*"
)

Span = tuple[int, int]


@dataclass(frozen=True)
class ParsedQuestion:
    """A VHs question split into its parts; spans are half-open ``[start, end)`` into the question.

    ``template`` is ``"single"``, ``"all"`` or ``"any"``.
    """

    template: str
    anchor: str
    target: str
    anchor_span: Span
    target_span: Span

    @property
    def cattok_span(self) -> Span:
        """Span of the anchor phrase's last word: the cattok of paper §4.3."""
        start, end = self.anchor_span
        last_space = self.anchor.rfind(" ")
        return (start + last_space + 1, end)

    def shifted(self, offset: int) -> "ParsedQuestion":
        """The same parse with every span moved by ``offset`` characters (question -> prompt)."""
        return ParsedQuestion(
            self.template,
            self.anchor,
            self.target,
            (self.anchor_span[0] + offset, self.anchor_span[1] + offset),
            (self.target_span[0] + offset, self.target_span[1] + offset),
        )


def parse_question(question: str) -> ParsedQuestion | None:
    """Match ``question`` against the three VHs templates; ``None`` when none matches.

    Source: the templates quoted in the Visual Haystacks toolkit README (module docstring).
    """
    match = SINGLE_NEEDLE_PATTERN.fullmatch(question)
    template = "single"
    if match is None:
        match = MULTI_NEEDLE_PATTERN.fullmatch(question)
        if match is None:
            return None
        template = match.group("quantifier")
    return ParsedQuestion(
        template=template,
        anchor=match.group("anchor"),
        target=match.group("target"),
        anchor_span=match.span("anchor"),
        target_span=match.span("target"),
    )


def render_vhs_prompt(question: str, n_images: int) -> tuple[str, int]:
    """The stored prompt and the offset at which ``question`` starts inside it.

    One ``<image>`` placeholder per haystack image, in haystack order, then a newline and the
    toolkit text ``TOOLKIT_PREFIX + question`` (the layout of the VHs authors' LLaVA evaluation:
    image tokens, newline, prompt). Each model replaces the placeholders with its own image
    tokens when it renders its chat template.
    """
    head = IMAGE_PLACEHOLDER * n_images + "\n" + TOOLKIT_PREFIX
    return head + question, len(head)
