"""Draw the toy images and encode crowd masks from the same pycocotools rasterisation.

Shapes are painted through ``pycocotools.mask`` masks of their polygons, so the pixels of a
shape are exactly the mask COCO tools compute from its ``segmentation`` (``annToMask``), and
the bbox of the polygon bounds them; only JPEG compression noise differs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils

from icir_mcq.toy.shapes import SHAPE_COLOURS

JPEG_QUALITY = 90


def polygon_mask(polygon: list[float], height: int, width: int) -> np.ndarray:
    """``[height, width]`` uint8 mask of a flat COCO polygon, rasterised by pycocotools."""
    return mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects([polygon], height, width)))


def render_image(path: Path, size: int, background: tuple[int, int, int], polygons: list[list[float]],
                 colours: list[int]) -> None:
    """Write one ``size`` x ``size`` RGB JPEG: ``polygons`` (flat COCO vertex lists, pixels) filled
    with ``SHAPE_COLOURS[colours[k]]`` on a plain ``background``."""
    canvas = np.empty((size, size, 3), dtype=np.uint8)
    canvas[:] = background
    for polygon, colour in zip(polygons, colours):
        canvas[polygon_mask(polygon, size, size).astype(bool)] = SHAPE_COLOURS[colour][1]
    Image.fromarray(canvas).save(path, format="JPEG", quality=JPEG_QUALITY)


def crowd_rle(polygon: list[float], height: int, width: int) -> dict:
    """The uncompressed RLE ``{"counts": [...], "size": [h, w]}`` COCO stores for iscrowd=1.

    Counts are run lengths over the column-major :func:`polygon_mask`, starting with a
    background run: the form ``pycocotools`` reads back with ``frPyObjects``/``annToMask``.
    """
    flat = polygon_mask(polygon, height, width).ravel(order="F")
    edges = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
    if flat[0] == 1:
        runs = [0] + runs
    return {"counts": runs, "size": [height, width]}
