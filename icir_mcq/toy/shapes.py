"""The toy world's categories: flat coloured shapes with COCO-style ids, names and supercategories.

Each category has a unit outline (vertices in ``[-1, 1]^2``, image axes: x right, y down) that
is scaled to the instance radius in pixels and translated to its centre; the same polygon is
drawn into the JPEG and stored as the COCO ``segmentation``. Ids have gaps and names include
multi-word ones ("traffic cone") and irregular plurals ("leaf"/"leaves"), like COCO 2017.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShapeCategory:
    """One toy category.

    ``plural`` is spelled out (not derived) so the toy captions do not depend on the builder's
    plural rules they are meant to test; ``synonyms`` are everyday words captions sometimes use
    instead of the category name (like "table" for COCO's "dining table"), so some captions do
    not mention the category. ``outline`` is a ``[V, 2]`` float array of unit vertices.
    """

    id: int
    name: str
    plural: str
    supercategory: str
    synonyms: tuple[str, ...]
    outline: np.ndarray


def _regular_polygon(n: int, start_deg: float = -90.0) -> list[tuple[float, float]]:
    return [
        (math.cos(math.radians(start_deg + 360.0 * k / n)), math.sin(math.radians(start_deg + 360.0 * k / n)))
        for k in range(n)
    ]


def _ellipse(rx: float, ry: float, n: int = 16) -> list[tuple[float, float]]:
    return [(rx * math.cos(2 * math.pi * k / n), ry * math.sin(2 * math.pi * k / n)) for k in range(n)]


def _star(points: int = 5, inner: float = 0.45) -> list[tuple[float, float]]:
    vertices = []
    for k in range(2 * points):
        radius = 1.0 if k % 2 == 0 else inner
        angle = math.radians(-90.0 + 180.0 * k / points)
        vertices.append((radius * math.cos(angle), radius * math.sin(angle)))
    return vertices


def _crescent(n: int = 12) -> list[tuple[float, float]]:
    # Outer arc of the unit circle on the left (60..300 deg), back along an inner circle centred
    # at (0.5, 0) that meets the outer one at both tips, so the opening faces right.
    outer = [(math.cos(math.radians(a)), math.sin(math.radians(a))) for a in np.linspace(60, 300, n)]
    r_inner = math.sin(math.radians(60))
    inner = [
        (0.5 + r_inner * math.cos(math.radians(a)), r_inner * math.sin(math.radians(a)))
        for a in np.linspace(270, 90, n)[1:-1]
    ]
    return outer + inner


def _heart(n: int = 20) -> list[tuple[float, float]]:
    points = []
    for k in range(n):
        t = 2 * math.pi * k / n
        x = 16 * math.sin(t) ** 3
        y = 13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)
        points.append((x / 17.0, -(y + 2.5) / 17.0))
    return points


def _leaf(n: int = 10) -> list[tuple[float, float]]:
    xs = np.linspace(-1, 1, n)
    upper = [(x, -0.5 * (1 - x * x)) for x in xs]
    lower = [(x, 0.5 * (1 - x * x)) for x in xs[::-1][1:-1]]
    angle = math.radians(-35)
    c, s = math.cos(angle), math.sin(angle)
    return [(c * x - s * y, s * x + c * y) for x, y in upper + lower]


_CROSS = [(-0.3, -1), (0.3, -1), (0.3, -0.3), (1, -0.3), (1, 0.3), (0.3, 0.3),
          (0.3, 1), (-0.3, 1), (-0.3, 0.3), (-1, 0.3), (-1, -0.3), (-0.3, -0.3)]
_ARROW = [(-1, -0.25), (0.2, -0.25), (0.2, -0.7), (1, 0), (0.2, 0.7), (0.2, 0.25), (-1, 0.25)]
_TRAFFIC_CONE = [(-0.9, 1), (0.9, 1), (0.9, 0.78), (0.22, -0.95), (-0.22, -0.95), (-0.9, 0.78)]
_HOURGLASS = [(-0.7, -1), (0.7, -1), (0.12, 0), (0.7, 1), (-0.7, 1), (-0.12, 0)]
_LIGHTNING = [(0.25, -1), (-0.6, 0.15), (-0.05, 0.15), (-0.3, 1), (0.6, -0.2), (0.05, -0.2)]


def _category(id_, name, plural, supercategory, synonyms, outline) -> ShapeCategory:
    return ShapeCategory(id_, name, plural, supercategory, tuple(synonyms), np.asarray(outline, dtype=np.float64))


CATEGORIES: tuple[ShapeCategory, ...] = (
    _category(1, "circle", "circles", "round", ["disc", "dot"], _ellipse(1.0, 1.0)),
    _category(2, "oval", "ovals", "round", ["ellipse", "egg shape"], _ellipse(1.0, 0.62)),
    _category(4, "crescent moon", "crescent moons", "round", ["moon", "crescent"], _crescent()),
    _category(5, "triangle", "triangles", "polygon", ["pyramid shape"], _regular_polygon(3)),
    _category(6, "square", "squares", "polygon", ["box", "block"], [(-0.85, -0.85), (0.85, -0.85), (0.85, 0.85), (-0.85, 0.85)]),
    _category(7, "diamond", "diamonds", "polygon", ["rhombus"], [(0, -1), (0.7, 0), (0, 1), (-0.7, 0)]),
    _category(9, "pentagon", "pentagons", "polygon", ["five-sided shape"], _regular_polygon(5)),
    _category(10, "hexagon", "hexagons", "polygon", ["six-sided shape"], _regular_polygon(6, 0.0)),
    _category(11, "octagon", "octagons", "polygon", ["eight-sided shape"], _regular_polygon(8, 22.5)),
    _category(13, "star", "stars", "symbol", ["asterisk"], _star()),
    _category(14, "cross", "crosses", "symbol", ["plus sign"], _CROSS),
    _category(15, "arrow", "arrows", "symbol", ["pointer"], _ARROW),
    _category(16, "heart", "hearts", "symbol", ["love symbol"], _heart()),
    _category(18, "lightning bolt", "lightning bolts", "symbol", ["zigzag", "bolt"], _LIGHTNING),
    _category(20, "traffic cone", "traffic cones", "object", ["safety cone", "cone"], _TRAFFIC_CONE),
    _category(22, "leaf", "leaves", "object", ["sprig"], _leaf()),
    _category(23, "hourglass", "hourglasses", "object", ["sand timer"], _HOURGLASS),
)

# Shape colours (name, RGB) and background colours; shape and background never share a colour.
SHAPE_COLOURS: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("red", (220, 40, 40)),
    ("orange", (245, 140, 20)),
    ("yellow", (240, 210, 30)),
    ("green", (40, 160, 60)),
    ("blue", (40, 80, 220)),
    ("purple", (130, 60, 180)),
    ("pink", (240, 120, 180)),
    ("brown", (130, 80, 40)),
    ("black", (20, 20, 20)),
)
BACKGROUNDS: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("white", (250, 250, 250)),
    ("grey", (165, 165, 165)),
    ("beige", (228, 212, 180)),
    ("light blue", (175, 212, 240)),
    ("pale green", (196, 232, 196)),
)
