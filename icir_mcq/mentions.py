"""Does a text name a COCO category? Whole-word, case-insensitive, singular or plural (App. B).

"Mentions the category" in the paper's sampling procedure is read literally, as
``docs/protocol.md`` settles: the category name or its plural as whole words, so
"zebras" mentions zebra but "man" does not mention person (only "person", "persons" and
"people" do). Multi-word names match with any run of whitespace between the words and are
pluralised on their last word ("hot dogs", "wine glasses").
"""

from __future__ import annotations

import functools
import re

# Irregular plurals of category heads in COCO 2017 and in everyday captions.
IRREGULAR_PLURALS: dict[str, tuple[str, ...]] = {
    "person": ("people", "persons"),
    "man": ("men",),
    "woman": ("women",),
    "child": ("children",),
    "mouse": ("mice",),
    "knife": ("knives",),
    "leaf": ("leaves",),
    "wolf": ("wolves",),
    "shelf": ("shelves",),
    "loaf": ("loaves",),
    "foot": ("feet",),
    "tooth": ("teeth",),
    "goose": ("geese",),
    "sheep": ("sheep",),
    "deer": ("deer",),
    "fish": ("fish", "fishes"),
}


def plural_forms(name: str) -> tuple[str, ...]:
    """Plural spellings of a category ``name``, lower-case.

    Irregular heads come from ``IRREGULAR_PLURALS`` (person -> people, persons; knife ->
    knives; mouse -> mice); otherwise English rules: -s/-x/-z/-ch/-sh add "es" (bus ->
    buses, wine glass -> wine glasses), consonant + y -> "ies", else add "s". A name that
    is already plural ("skis", "scissors") gets a harmless extra form that never occurs.
    """
    *modifiers, head = name.lower().split()
    if head in IRREGULAR_PLURALS:
        heads = IRREGULAR_PLURALS[head]
    elif head.endswith(("s", "x", "z", "ch", "sh")):
        heads = (head + "es",)
    elif head.endswith("y") and len(head) > 1 and head[-2] not in "aeiou":
        heads = (head[:-1] + "ies",)
    else:
        heads = (head + "s",)
    return tuple(" ".join([*modifiers, plural]) for plural in heads)


@functools.lru_cache(maxsize=None)
def category_pattern(name: str) -> re.Pattern[str]:
    """Compiled pattern matching ``name`` or any of its :func:`plural_forms` as whole words,
    case-insensitively, with ``\\s+`` between the words of a multi-word name."""
    forms = sorted({name.lower(), *plural_forms(name)}, key=len, reverse=True)
    alternatives = "|".join(r"\s+".join(re.escape(word) for word in form.split()) for form in forms)
    return re.compile(rf"\b(?:{alternatives})\b", re.IGNORECASE)


def mentions(text: str, name: str) -> bool:
    """True when ``text`` names category ``name`` (singular or plural, whole word, any case)."""
    return category_pattern(name).search(text) is not None


def last_mention_span(text: str, name: str) -> tuple[int, int] | None:
    """Half-open character span ``[start, end)`` of the last mention of ``name`` in ``text``,
    or None when there is none. Matches do not overlap, so the last match is the last mention."""
    last = None
    for last in category_pattern(name).finditer(text):
        pass
    return None if last is None else last.span()
