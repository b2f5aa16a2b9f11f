"""Toy worlds: which categories, colours, scene sizes and caption style a toy corpus draws from.

``standard`` is the world the builders are tested on: all 17 categories in any of 9 colours and
COCO-like captions that are partial, use synonyms or name no shape at all. ``demo`` is the world
the demo LVLM (`harness.demo_model`) is trained and evaluated on: 9 categories, each always
drawn in its own colour, 1-3 shapes of distinct categories per image (more often 2-3 than in the
standard world), and one caption per shape, in one fixed template that names the shape with its
colour and the image's background ("A red circle on a grey background."). All four ICIR-MCQ
options then differ only in the background they name, so the answer is the background of the
image that shows the queried category: readable only after finding that image, since the
distractor images show other backgrounds too. In the standard world a caption often fits several
option images of its category equally well, so even a perfect reader of images stays under 0.9
on ICIR-MCQ; in the demo world exactly one option fits the target (tests/test_toy_worlds.py
measures both). The demo world is that plain so that a model of half a million parameters can
learn it within the demo model's 15-minute training budget.
"""

from __future__ import annotations

from dataclasses import dataclass

from icir_common import UserInputError
from icir_mcq.toy.shapes import CATEGORIES, SHAPE_COLOURS


@dataclass(frozen=True)
class WorldSpec:
    """What a toy corpus draws from.

    Attributes:
        name: the name ``--world`` takes.
        categories: indices into ``CATEGORIES`` of the world's categories (the instance file's
            ``categories`` list, in this order).
        category_colours: index into ``SHAPE_COLOURS`` of each category's fixed colour (aligned with
            ``categories``), or None for a colour drawn per shape.
        shapes_per_image_p: probabilities of 1, 2 and 3 shapes per image (summing to 1).
        distinct_categories: no two shapes of one image share a category.
        complete_captions: each image has one caption per shape group, in one fixed template,
            that names the group by category name or plural with a count word ("a"/"an", "two",
            "three") and its colour (when the group's shapes share one, always so with
            ``category_colours``), and then the background (no synonyms, partial or shapeless
            captions).
    """

    name: str
    categories: tuple[int, ...]
    category_colours: tuple[int, ...] | None
    shapes_per_image_p: tuple[float, float, float]
    distinct_categories: bool
    complete_captions: bool


# The demo world's categories, each with the one colour it is always drawn in (names of
# ``CATEGORIES`` -> names of ``SHAPE_COLOURS``).
DEMO_CATEGORY_COLOURS = {"circle": "red", "triangle": "orange", "star": "yellow", "leaf": "green", "square": "blue",
                         "diamond": "purple", "heart": "pink", "arrow": "brown", "cross": "black"}

_CATEGORY_INDEX = {category.name: k for k, category in enumerate(CATEGORIES)}
_COLOUR_INDEX = {name: k for k, (name, _) in enumerate(SHAPE_COLOURS)}

WORLDS: dict[str, WorldSpec] = {
    "standard": WorldSpec("standard", tuple(range(len(CATEGORIES))), None, (0.3, 0.4, 0.3), False, False),
    "demo": WorldSpec("demo", tuple(_CATEGORY_INDEX[name] for name in DEMO_CATEGORY_COLOURS),
                      tuple(_COLOUR_INDEX[colour] for colour in DEMO_CATEGORY_COLOURS.values()), (0.2, 0.4, 0.4), True, True),
}


def get_world(name: str) -> WorldSpec:
    """The toy world called `name`.

    Raises:
        UserInputError: no world has that name (the message lists the names).
    """
    if name not in WORLDS:
        raise UserInputError(f"unknown toy world {name!r}; choose one of {sorted(WORLDS)}")
    return WORLDS[name]
