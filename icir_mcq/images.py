"""Attach the ``images`` field to ICIR-MCQ records: embedded COCO JPEG bytes, or paths only."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from pathlib import Path

from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from icir_common import UserInputError, inside_root
from icir_mcq.features import FIELD_DOCS


def decode_image_file(path: Path) -> bytes:
    """The bytes of image file ``path`` (a path checked by ``icir_common.inside_root``), fully decoded
    once (``Image.load()``) so that a truncated or corrupt file is caught at build time.

    Raises:
        UserInputError: the file is missing or does not decode completely.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError as err:
        raise UserInputError(f"missing image file {path}; check --coco, or pass --no-embed-images "
                             "to store file names only") from err
    except OSError as err:
        raise UserInputError(f"cannot read image file {path}: {err.strerror or err}") from err
    return check_image_bytes(data, str(path))


def check_image_bytes(data: bytes, name: str) -> bytes:
    """``data`` if it decodes completely as an image (``Image.load()``), else a ``UserInputError``
    naming ``name`` (the file the bytes came from)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except (OSError, SyntaxError, ValueError, UnidentifiedImageError, Image.DecompressionBombError) as err:
        raise UserInputError(f"unreadable image file {name}: {err}; re-download it") from err
    return data


def read_image_bytes(coco_root: Path, relative: str, what: str | None = None) -> bytes:
    """The bytes of ``coco_root/relative`` (checked to stay inside ``coco_root``), fully decoded.

    ``what`` names the record the path came from (default: the COCO root).

    Raises:
        UserInputError: the path leaves the root, or the file is missing or not a readable image.
    """
    return decode_image_file(inside_root(coco_root, relative, what or f"COCO root {coco_root}"))


def with_images(records: Iterable[dict], coco_root: Path, embed: bool, fields: Iterable[str] = FIELD_DOCS) -> Iterator[dict]:
    """Yield ``records`` with their ``images`` field (from ``image_files``), keys in `fields` order
    (the ICIR-MCQ schema by default).

    Embedded: ``{"bytes": <file bytes>, "path": image_file}`` per image, read as each record is
    yielded so that a streaming writer holds one row group of images at a time. Not embedded:
    ``{"bytes": None, "path": image_file}`` and no file is touched.

    Raises:
        UserInputError: an image file is missing or unreadable (from :func:`read_image_bytes`).
    """

    def value(relative: str) -> dict:
        if not embed:  # nothing is read, but only checked paths are stored
            inside_root(coco_root, relative, f"COCO root {coco_root}")
            return {"bytes": None, "path": relative}
        return {"bytes": read_image_bytes(coco_root, relative), "path": relative}

    for record in tqdm(records, desc="images", unit="sample", leave=False, disable=not embed):
        yield {key: [value(f) for f in record["image_files"]] if key == "images" else record[key] for key in fields}
