"""Seeded haystacks: which filler images join the needles, and in what order (paper App. A).

The reference toolkit shuffles each haystack with Python's unseeded ``random``, so two runs (and
two models) see different orders. The paper fixes seed 42 for filler selection and haystack
shuffling so every model sees the same composition and order; here each haystack draws from its
own generator seeded by ``(seed, needle kind, N, entry index)``, so a haystack does not depend on
which other sizes or entries are built (``--limit``, ``--sizes``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icir_common import UserInputError, inside_root
from vhs_adapter.question_files import NEEDLE_KINDS, SizeFile, VHsEntry

DEFAULT_SEED = 42  # paper App. A


@dataclass(frozen=True)
class Haystack:
    """The ``N`` image paths in haystack order and the 0-based positions of the needle image(s)."""

    image_files: tuple[str, ...]
    needle_positions: tuple[int, ...]


def build_haystack(size_file: SizeFile, entry: VHsEntry, seed: int) -> Haystack:
    """Choose ``N - len(pos_image)`` fillers from ``neg_image`` and shuffle them with the needles.

    Every needle is kept; fillers are drawn without replacement (all of them when the file gives
    exactly ``N - len(pos_image)``, the VHs norm), then the ``N`` images are permuted uniformly,
    so each needle position is uniform over ``0..N-1``.

    Raises:
        UserInputError: the entry has more needles than ``N`` or too few fillers for ``N``.
    """
    size, n_needles = size_file.size, len(entry.pos_image)
    n_fillers = size - n_needles
    if n_fillers < 0 or n_fillers > len(entry.neg_image):
        raise UserInputError(
            f"{size_file.path}: entry {entry.index}: {n_needles} pos_image + {len(entry.neg_image)} neg_image "
            f"cannot make a haystack of size {size}"
        )
    rng = np.random.default_rng([seed, NEEDLE_KINDS.index(size_file.kind), size, entry.index])
    fillers = rng.choice(len(entry.neg_image), size=n_fillers, replace=False)
    pool = list(entry.pos_image) + [entry.neg_image[i] for i in fillers]
    order = rng.permutation(size)
    return Haystack(
        image_files=tuple(pool[i] for i in order),
        needle_positions=tuple(int(p) for p in np.flatnonzero(order < n_needles)),
    )


def resolve_image(coco_root: Path, relative: str, size_file: SizeFile, entry: VHsEntry) -> Path:
    """The file of image path ``relative`` (as written in a VHs file) under the COCO root.

    Paths are relative to the COCO root (``train2017/…``); the toolkit's default config instead
    points its image root at the folder holding ``coco/``, so the parent is tried second.

    Either way the file must resolve (symlinks included) inside the COCO root.

    Raises:
        UserInputError: the path leaves the COCO root, or the image exists under neither; names
            the file, entry and path.
    """
    what = f"{size_file.path}: entry {entry.index}"
    candidate = inside_root(coco_root, relative, what)
    if os.path.isfile(candidate):
        return candidate
    # Via the parent, only paths that lead back into the COCO root ("coco/train2017/...").
    first = Path(relative).parts[0] if Path(relative).parts else ""
    if first == Path(coco_root).resolve().name:
        candidate = inside_root(coco_root, str(Path(*Path(relative).parts[1:])), what)
        if os.path.isfile(candidate):
            return candidate
    raise UserInputError(
        f"{size_file.path}: entry {entry.index}: image {relative} not found under COCO root {coco_root}; "
        "check --coco (it should hold train2017/ and val2017/)"
    )
