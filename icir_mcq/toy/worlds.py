"""Toy worlds: which categories, colours, scene sizes and caption style a toy corpus draws from.

``standard`` is the world the builders are tested on: all 17 categories in any of 9 colours and
COCO-like captions that are partial, use synonyms or name no shape at all. ``demo`` is the world
the demo LVLM (`harness.demo_model`) is trained and evaluated on: 9 categories, each always
drawn in its own colour, 1-3 shapes per image (more often 2-3 than in the standard world), and
every caption names every shape group (count word and colour) and the background. In the
standard world a caption often fits several option images of its category equally well, so even
a perfect reader of images stays under 0.9 on ICIR-MCQ; in the demo world the target's own
caption is the only one that fits it, barring option images with the same scene (about 2% of n5
samples; tests/test_toy_worlds.py measures both).
"""

from __future__ import annotations

from dataclasses import dataclass

from icir_mcq.errors import UserInputError
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
        complete_captions: every caption names every shape group by category name or plural with
            a count word ("a", "two", "a pair of", "three", "a few", or the vague "some") and its
            colour (when the group's shapes share one, always so with ``category_colours``), and
            the background (no synonyms, partial or shapeless captions).
    """

    name: str
    categories: tuple[int, ...]
    category_colours: tuple[int, ...] | None
    shapes_per_image_p: tuple[float, float, float]
    complete_captions: bool


# The demo world's categories, each with the one colour it is always drawn in (names of
# ``CATEGORIES`` -> names of ``SHAPE_COLOURS``).
DEMO_CATEGORY_COLOURS = {"circle": "red", "triangle": "orange", "star": "yellow", "leaf": "green", "square": "blue",
                         "diamond": "purple", "heart": "pink", "arrow": "brown", "cross": "black"}

_CATEGORY_INDEX = {category.name: k for k, category in enumerate(CATEGORIES)}
_COLOUR_INDEX = {name: k for k, (name, _) in enumerate(SHAPE_COLOURS)}

WORLDS: dict[str, WorldSpec] = {
    "standard": WorldSpec("standard", tuple(range(len(CATEGORIES))), None, (0.3, 0.4, 0.3), False),
    "demo": WorldSpec("demo", tuple(_CATEGORY_INDEX[name] for name in DEMO_CATEGORY_COLOURS),
                      tuple(_COLOUR_INDEX[colour] for colour in DEMO_CATEGORY_COLOURS.values()), (0.2, 0.4, 0.4), True),
}


def get_world(name: str) -> WorldSpec:
    """The toy world called `name`.

    Raises:
        UserInputError: no world has that name (the message lists the names).
    """
    if name not in WORLDS:
        raise UserInputError(f"unknown toy world {name!r}; choose one of {sorted(WORLDS)}")
    return WORLDS[name]
