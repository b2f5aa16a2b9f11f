"""Sample the toy scenes: which shapes go where in each image, as flat per-instance arrays.

Everything is drawn with one ``numpy.random.Generator`` in whole-array calls, so 120,000
images take well under a second and the same seed always gives the same scenes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icir_mcq.toy.shapes import BACKGROUNDS, CATEGORIES, SHAPE_COLOURS
from icir_mcq.toy.worlds import WorldSpec

SHAPES_PER_IMAGE = np.array([1, 2, 3])
REPEAT_CATEGORY_P = 0.35  # a later shape copies an earlier shape's category: plurals in captions
REPEAT_COLOUR_P = 0.5  # ...and then also its colour: "two red stars"
CROWD_P = 0.01  # occasional iscrowd=1 instance with an RLE mask, as COCO has


@dataclass(frozen=True)
class Scenes:
    """Per-image and per-instance scene arrays (``n`` images, ``m`` instances).

    Instances of one image are contiguous and in drawing order: image ``i`` owns instances
    ``first_instance[i] : first_instance[i] + n_shapes[i]``. Geometry is in pixels:
    ``centre_x``, ``centre_y`` and ``radius`` (half the outline's extent) are ``[m]`` floats.
    """

    n_shapes: np.ndarray  # [n] int, 1-3
    first_instance: np.ndarray  # [n] int
    background: np.ndarray  # [n] index into BACKGROUNDS
    image_of: np.ndarray  # [m] image index
    category: np.ndarray  # [m] index into CATEGORIES
    colour: np.ndarray  # [m] index into SHAPE_COLOURS
    centre_x: np.ndarray  # [m] float px
    centre_y: np.ndarray  # [m] float px
    radius: np.ndarray  # [m] float px
    iscrowd: np.ndarray  # [m] bool


def sample_scenes(n_images: int, rng: np.random.Generator, image_size: int, world: WorldSpec) -> Scenes:
    """Place 1-3 non-overlapping shapes of `world`'s categories per ``image_size`` x ``image_size`` image.

    The number of shapes follows ``world.shapes_per_image_p``; each shape has its category's fixed
    colour when ``world.category_colours`` is set, and the shapes of an image have distinct
    categories when ``world.distinct_categories`` is (otherwise a shape may repeat an earlier
    one's). A single shape may use the whole canvas; several shapes each get a distinct quadrant
    of a 2x2 grid, so no shape occludes another and each polygon is exactly the drawn region.
    Returns ``Scenes`` of ``n_images`` images.
    """
    n_shapes = rng.choice(SHAPES_PER_IMAGE, size=n_images, p=np.array(world.shapes_per_image_p))
    first_instance = np.concatenate([[0], np.cumsum(n_shapes)[:-1]]).astype(np.int64)
    background = rng.integers(len(BACKGROUNDS), size=n_images)
    image_of = np.repeat(np.arange(n_images), n_shapes)
    m = int(n_shapes.sum())
    slot = np.arange(m) - first_instance[image_of]

    category = np.asarray(world.categories)[rng.integers(len(world.categories), size=m)]
    colour = rng.integers(len(SHAPE_COLOURS), size=m)
    repeat = rng.random(m) < REPEAT_CATEGORY_P
    repeat_colour = rng.random(m) < REPEAT_COLOUR_P
    source_slot = np.floor(rng.random(m) * np.maximum(slot, 1)).astype(np.int64)
    for current in (1, 2):  # slot 2 may copy slot 1, which must already be final
        copy = (slot == current) & repeat
        source = first_instance[image_of[copy]] + source_slot[copy]
        category[copy] = category[source]
        same_colour = copy & repeat_colour
        colour[same_colour] = colour[first_instance[image_of[same_colour]] + source_slot[same_colour]]
    # Free colours are drawn in every world, so the standard world's random stream (and its
    # files) stays what it was before worlds existed; fixed colours then replace them.
    if world.distinct_categories:
        # Each image takes the first n_shapes of its own random order of the world's categories.
        order = np.argsort(rng.random((n_images, len(world.categories))), axis=1)
        category = np.asarray(world.categories)[order[image_of, slot]]
    if world.category_colours is not None:
        fixed = np.zeros(len(CATEGORIES), dtype=np.int64)
        fixed[list(world.categories)] = world.category_colours
        colour = fixed[category]

    # Quadrant per shape: the first k entries of a random permutation of the 4 quadrants.
    quadrants = np.argsort(rng.random((n_images, 4)), axis=1)[image_of, slot]
    single = n_shapes[image_of] == 1
    cell = np.where(single, image_size, image_size / 2)
    origin_x = np.where(single, 0.0, (quadrants % 2) * image_size / 2)
    origin_y = np.where(single, 0.0, (quadrants // 2) * image_size / 2)
    radius = cell / 2 * rng.uniform(0.55, 0.9, size=m)
    slack = cell / 2 - radius
    centre_x = origin_x + cell / 2 + rng.uniform(-1, 1, size=m) * slack
    centre_y = origin_y + cell / 2 + rng.uniform(-1, 1, size=m) * slack
    iscrowd = rng.random(m) < CROWD_P
    return Scenes(n_shapes, first_instance, background, image_of, category, colour,
                  centre_x, centre_y, radius, iscrowd)


def instance_polygons(scenes: Scenes) -> tuple[list[list[float]], np.ndarray, np.ndarray]:
    """Each instance's outline in pixels, with its COCO bbox and polygon area.

    Returns ``(polygons, bboxes, areas)``: ``polygons[j]`` is the flat ``[x0, y0, x1, y1, ...]``
    list COCO stores (2 decimals), ``bboxes`` is ``[m, 4]`` ``[x, y, w, h]`` of those rounded
    vertices and ``areas`` ``[m]`` their shoelace area in square pixels.
    """
    m = len(scenes.category)
    polygons: list[list[float]] = [[] for _ in range(m)]
    bboxes = np.zeros((m, 4))
    areas = np.zeros(m)
    for index, shape in enumerate(CATEGORIES):
        members = np.flatnonzero(scenes.category == index)
        if len(members) == 0:
            continue
        centre = np.stack([scenes.centre_x[members], scenes.centre_y[members]], axis=1)[:, None, :]
        vertices = np.round(shape.outline[None] * scenes.radius[members, None, None] + centre, 2)  # [k, V, 2]
        low, high = vertices.min(axis=1), vertices.max(axis=1)
        bboxes[members] = np.concatenate([low, high - low], axis=1)
        x, y = vertices[..., 0], vertices[..., 1]
        areas[members] = 0.5 * np.abs(np.sum(x * np.roll(y, -1, axis=1) - np.roll(x, -1, axis=1) * y, axis=1))
        for member, flat in zip(members.tolist(), vertices.reshape(len(members), -1).tolist()):
            polygons[member] = flat
    return polygons, np.round(bboxes, 2), np.round(areas, 2)
