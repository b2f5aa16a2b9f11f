"""Write the toy corpus: COCO 2017 and MM-NIAH files of the real shapes, from synthetic shapes.

Layout under ``OUT`` (the real datasets' own layouts, ``docs/formats.md``)::

    coco/annotations/instances_{train,val}2017.json
    coco/annotations/captions_{train,val}2017.json
    coco/{train,val}2017/000000xxxxxx.jpg                 (unless image_files=False)
    mm_niah/mm_niah_val/annotations/retrieval-image.jsonl

The annotation files are the same whether or not image files are written, so a benchmark can
build from annotations alone.
"""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from icir_common import UserInputError, atomic_output_dir
from icir_mcq.toy.captions import caption_image
from icir_mcq.toy.documents import make_record
from icir_mcq.toy.render import crowd_rle, render_image
from icir_mcq.toy.scenes import instance_polygons, sample_scenes
from icir_mcq.toy.shapes import BACKGROUNDS, CATEGORIES
from icir_mcq.toy.worlds import get_world

SPLITS = ("train2017", "val2017")
BUILD_KIND = "toy-corpus"  # the kind in the folder's icir_common.BUILD_MARKER
VAL_FRACTION = 0.04  # COCO 2017: 5,000 of 123,287 images
MMNIAH_RELATIVE = Path("mm_niah/mm_niah_val/annotations/retrieval-image.jsonl")
LICENSES = [{"id": 1, "name": "Attribution License (synthetic toy images)",
             "url": "http://creativecommons.org/licenses/by/4.0/"}]


@dataclass(frozen=True)
class ToyCorpus:
    """Where a toy corpus was written and how big it is.

    ``coco_root`` is the folder to pass as ``--coco`` and ``mmniah_file`` the file to pass as
    ``--mmniah``; counts are images, instance annotations, captions and MM-NIAH contexts.
    """

    root: Path
    coco_root: Path
    mmniah_file: Path
    n_train: int
    n_val: int
    n_instances: int
    n_captions: int
    n_contexts: int
    image_files: bool

    @property
    def n_images(self) -> int:
        """Images over both splits."""
        return self.n_train + self.n_val


def n_contexts_for(n_images: int) -> int:
    """MM-NIAH documents written for ``n_images`` images: 40 to 1,000, one per 10 images."""
    return max(40, min(1000, n_images // 10))


def _dump(path: Path, obj: dict) -> None:
    # json.dumps (C encoder) rather than json.dump (Python chunks): 120k images in seconds.
    path.write_text(json.dumps(obj, separators=(",", ":")), encoding="utf-8")


def write_toy_corpus(out: str | Path, n_images: int, seed: int = 0, image_files: bool = True,
                     image_size: int = 64, overwrite: bool = False, world: str = "standard",
                     finish: Callable[[Path], None] | None = None) -> ToyCorpus:
    """Generate a toy COCO 2017 + MM-NIAH corpus of ``n_images`` images under ``out``.

    Each image is ``image_size`` px square with 1-3 coloured shapes (categories in
    ``icir_mcq.toy.shapes.CATEGORIES``) and 3-5 captions, drawn from the toy `world`
    (``icir_mcq.toy.worlds.WORLDS``: "standard" or "demo"). About 4% of the images (at least one
    when ``n_images >= 2``) go to val2017. Same ``seed`` gives byte-identical files; the
    annotation files do not depend on ``image_files``. Written atomically (temporary folder,
    then rename). ``finish``, when given, is called with the temporary root before it is published
    (the ``toy-corpus`` command writes the VHs question files there), so its files are part of the
    same atomic write.

    Raises:
        UserInputError: ``n_images < 1``, ``seed < 0``, an unknown `world`, or ``out`` exists and
            ``overwrite`` is False.
    """
    spec = get_world(world)
    if n_images < 1 or seed < 0:
        raise UserInputError(f"--images must be at least 1 and --seed at least 0, got {n_images} and {seed}")
    rng = np.random.default_rng(seed)
    image_ids = np.sort(rng.choice(6 * n_images + 10, size=n_images, replace=False) + 1)
    n_val = max(1, round(n_images * VAL_FRACTION)) if n_images >= 2 else 0
    is_val = np.zeros(n_images, dtype=bool)
    is_val[rng.choice(n_images, size=n_val, replace=False)] = True
    scenes = sample_scenes(n_images, rng, image_size, spec)
    polygons, bboxes, areas = instance_polygons(scenes)
    capture_seconds = rng.integers(0, 3 * 365 * 86400, size=n_images)

    caption_rng = random.Random(f"{seed}:captions")
    first, counts = scenes.first_instance.tolist(), scenes.n_shapes.tolist()
    category_of, colour_of = scenes.category.tolist(), scenes.colour.tolist()
    captions = [
        caption_image(caption_rng, category_of[f:f + k], colour_of[f:f + k], background, spec.complete_captions)
        for f, k, background in zip(first, counts, scenes.background.tolist())
    ]
    document_rng = random.Random(f"{seed}:documents")
    n_contexts = n_contexts_for(n_images)

    with atomic_output_dir(out, overwrite=overwrite, kind=BUILD_KIND) as tmp:
        annotations_dir = tmp / "coco" / "annotations"
        annotations_dir.mkdir(parents=True)
        epoch = datetime.datetime(2013, 1, 1)
        next_instance_id, next_caption_id = 1, 1
        for split in SPLITS:
            members = np.flatnonzero(is_val == (split == "val2017")).tolist()
            images = []
            for i in members:
                image_id = int(image_ids[i])
                images.append({
                    "license": 1, "file_name": f"{image_id:012d}.jpg", "coco_url": "",
                    "height": image_size, "width": image_size,
                    "date_captured": (epoch + datetime.timedelta(seconds=int(capture_seconds[i]))).isoformat(" "),
                    "flickr_url": "", "id": image_id,
                })
            instances, caption_records = [], []
            for i in members:
                image_id = int(image_ids[i])
                for j in range(first[i], first[i] + counts[i]):
                    crowd = bool(scenes.iscrowd[j])
                    instances.append({
                        "segmentation": crowd_rle(polygons[j], image_size, image_size) if crowd else [polygons[j]],
                        "area": float(areas[j]), "iscrowd": int(crowd), "image_id": image_id,
                        "bbox": bboxes[j].tolist(), "category_id": CATEGORIES[category_of[j]].id,
                        "id": next_instance_id,
                    })
                    next_instance_id += 1
                for caption in captions[i]:
                    caption_records.append({"image_id": image_id, "id": next_caption_id, "caption": caption})
                    next_caption_id += 1
            info = {"description": "ICIR-MCQ toy corpus: synthetic shapes in the COCO 2017 format",
                    "url": "", "version": "1.0", "year": 2017, "contributor": "image-retrieval-heads",
                    "date_created": "2017/09/01"}
            categories = [{"supercategory": CATEGORIES[k].supercategory, "id": CATEGORIES[k].id, "name": CATEGORIES[k].name}
                          for k in spec.categories]
            _dump(annotations_dir / f"instances_{split}.json",
                  {"info": info, "licenses": LICENSES, "images": images, "annotations": instances,
                   "categories": categories})
            _dump(annotations_dir / f"captions_{split}.json",
                  {"info": info, "licenses": LICENSES, "images": images, "annotations": caption_records})
            if image_files:
                image_dir = tmp / "coco" / split
                image_dir.mkdir()
                for i in tqdm(members, desc=f"toy {split} images", unit="img", leave=False):
                    span = range(first[i], first[i] + counts[i])
                    render_image(image_dir / f"{int(image_ids[i]):012d}.jpg", image_size,
                                 BACKGROUNDS[int(scenes.background[i])][1],
                                 [polygons[j] for j in span], [colour_of[j] for j in span])
        mmniah_file = tmp / MMNIAH_RELATIVE
        mmniah_file.parent.mkdir(parents=True)
        mmniah_file.write_text(
            "".join(json.dumps(make_record(document_rng, k)) + "\n" for k in range(n_contexts)), encoding="utf-8")
        if finish is not None:
            finish(tmp)
    root = Path(out)
    return ToyCorpus(root=root, coco_root=root / "coco", mmniah_file=root / MMNIAH_RELATIVE,
                     n_train=n_images - n_val, n_val=n_val, n_instances=len(category_of),
                     n_captions=sum(len(c) for c in captions), n_contexts=n_contexts, image_files=image_files)
