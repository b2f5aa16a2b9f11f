"""Caption the toy scenes the way COCO annotators describe photos: varied, partial, imperfect.

Most captions name the shapes by their category name (plural when an image has several of
one), often with colour words; some use an everyday synonym instead ("box" for square), some
mention only part of the scene and a few name no shape at all, so that name-or-plural
matching, like on real COCO, finds only some captions of each image. *Complete* captions (the
demo world, `icir_mcq.toy.worlds`) are one per shape group of the image, in one fixed template:
the group by name or plural with a count word ("a"/"an", "two", "three") and its colour when the
group shares one, then the background ("A red circle on a grey background.").
"""

from __future__ import annotations

import random

from icir_mcq.toy.shapes import BACKGROUNDS, CATEGORIES, SHAPE_COLOURS

MIN_CAPTIONS, MAX_CAPTIONS = 3, 5
COLOUR_P = 0.5  # a caption uses colour words
SYNONYM_P = 0.15  # a single shape is called by a synonym (never matches the category)
PARTIAL_P = 0.25  # a caption of a multi-category image names only some categories
NO_SHAPE_P = 0.07  # a caption names no shape
NUMBER_WORDS = {2: "two", 3: "three"}

_TEMPLATES = (
    "{S} on a {bg} background.",
    "A picture of {s}.",
    "There {be} {s} in the picture.",
    "{S} drawn on a plain {bg} surface.",
    "An image showing {s} against a {bg} backdrop.",
    "Simple drawing of {s}.",
    "A {bg} background with {s}.",
    "{S} in the middle of a {bg} canvas.",
)
COMPLETE_TEMPLATE = _TEMPLATES[0]
_SEVERAL_TEMPLATES = ("{S} placed next to each other.", "{S} side by side on {bg} paper.")
_NO_SHAPE = (
    "A few coloured shapes on a {bg} background.",
    "Some simple figures on a plain {bg} backdrop.",
    "An abstract {bg} picture with flat colours.",
)


def _article(phrase: str) -> str:
    return "an" if phrase[0] in "aeiou" or phrase.startswith("hour") else "a"


def _colour_prefix(colours: list[int]) -> str:
    """The colour word and a space when a group's shapes share one colour, else nothing."""
    return f"{SHAPE_COLOURS[colours[0]][0]} " if len(set(colours)) == 1 else ""


def _group_phrase(rng: random.Random, category: int, colours: list[int], use_colour: bool) -> str:
    shape = CATEGORIES[category]
    colour = _colour_prefix(colours) if use_colour else ""
    if len(colours) == 1:
        noun = rng.choice(shape.synonyms) if rng.random() < SYNONYM_P else shape.name
        return f"{_article(colour + noun)} {colour}{noun}"
    amount = rng.choice([NUMBER_WORDS[len(colours)], "some", "a few" if len(colours) == 3 else "a pair of"])
    return f"{amount} {colour}{shape.plural}"


def _join(phrases: list[str]) -> str:
    return phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]


def _sentence(template: str, phrases: list[str], background: str) -> str:
    subject = _join(phrases)
    be = "is" if phrases[0].startswith(("a ", "an ")) else "are"
    return template.format(S=subject[0].upper() + subject[1:], s=subject, bg=background, be=be)


def _one_caption(rng: random.Random, groups: list[tuple[int, list[int]]], background: str) -> str:
    if rng.random() < NO_SHAPE_P:
        return rng.choice(_NO_SHAPE).format(bg=background)
    named = groups
    if len(groups) > 1 and rng.random() < PARTIAL_P:
        named = sorted(rng.sample(groups, rng.randint(1, len(groups) - 1)))
    use_colour = rng.random() < COLOUR_P
    phrases = [_group_phrase(rng, category, colours, use_colour) for category, colours in named]
    n_named_shapes = sum(len(colours) for _, colours in named)
    return _sentence(rng.choice(_TEMPLATES + (_SEVERAL_TEMPLATES if n_named_shapes > 1 else ())), phrases, background)


def _complete_captions(groups: list[tuple[int, list[int]]], background: str) -> list[str]:
    captions = []
    for category, colours in groups:
        shape = CATEGORIES[category]
        colour = _colour_prefix(colours)
        noun = shape.name if len(colours) == 1 else shape.plural
        amount = _article(colour + noun) if len(colours) == 1 else NUMBER_WORDS[len(colours)]
        captions.append(_sentence(COMPLETE_TEMPLATE, [f"{amount} {colour}{noun}"], background))
    return captions


def caption_image(rng: random.Random, categories: list[int], colours: list[int], background: int,
                  complete: bool = False) -> list[str]:
    """3-5 distinct captions of one image, or its complete captions if `complete` (one per shape
    group, in category order; see the module docstring; then nothing is drawn from `rng`).

    ``categories``/``colours`` are the image's instances (indices into ``CATEGORIES`` /
    ``SHAPE_COLOURS``) in drawing order; ``background`` indexes ``BACKGROUNDS``.
    """
    groups: dict[int, list[int]] = {}
    for category, colour in zip(categories, colours):
        groups.setdefault(category, []).append(colour)
    ordered = sorted(groups.items())
    background_name = BACKGROUNDS[background][0]
    if complete:
        return _complete_captions(ordered, background_name)
    wanted = rng.randint(MIN_CAPTIONS, MAX_CAPTIONS)
    captions: list[str] = []
    for _ in range(8 * MAX_CAPTIONS):
        caption = _one_caption(rng, ordered, background_name)
        if caption not in captions:
            captions.append(caption)
            if len(captions) == wanted:
                break
    return captions
