"""Attach the ``images`` field to ICIR-MCQ records: embedded COCO JPEG bytes, or paths only."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from pathlib import Path

from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from icir_common import UserInputError
from icir_mcq.features import FIELD_DOCS


def read_image_bytes(coco_root: Path, relative: str) -> bytes:
    """The bytes of ``coco_root/relative``, checked to be an image PIL can identify.

    Raises:
        UserInputError: the file is missing or is not a readable image.
    """
    path = coco_root / relative
    try:
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
    except FileNotFoundError as err:
        raise UserInputError(f"missing image file {path}; check --coco, or pass --no-embed-images "
                             "to store file names only") from err
    except (OSError, SyntaxError, UnidentifiedImageError) as err:
        raise UserInputError(f"unreadable image file {path}: {err}; re-download it") from err
    return data


def with_images(records: Iterable[dict], coco_root: Path, embed: bool) -> Iterator[dict]:
    """Yield ``records`` with their ``images`` field, fields in schema order.

    Embedded: ``{"bytes": <file bytes>, "path": image_file}`` per image, read as each record is
    yielded so that a streaming writer holds one row group of images at a time. Not embedded:
    ``{"bytes": None, "path": image_file}`` and no file is touched.

    Raises:
        UserInputError: an image file is missing or unreadable (from :func:`read_image_bytes`).
    """

    def value(relative: str) -> dict:
        return {"bytes": read_image_bytes(coco_root, relative) if embed else None, "path": relative}

    for record in tqdm(records, desc="images", unit="sample", leave=False, disable=not embed):
        yield {key: [value(f) for f in record["image_files"]] if key == "images" else record[key] for key in FIELD_DOCS}
