"""Read COCO 2017 instances + captions (train2017 and val2017) into one index, via pycocotools.

ICIR-MCQ samples from the union of the two splits (App. B). Image ids are unique across the
splits in COCO 2017; an id found in both is reported as bad input.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from pycocotools.coco import COCO

from icir_common import UserInputError, check_relative

COCO_SPLITS = ("train2017", "val2017")


@dataclass(frozen=True)
class CocoIndex:
    """What ICIR-MCQ needs from COCO, keyed by image id.

    ``categories``: category id -> name. ``image_files``: image id -> path relative to the
    COCO root (``"val2017/000000000139.jpg"``) for every listed image. ``image_categories``:
    image id -> category ids annotated in it (crowd annotations included), only for images with
    at least one instance annotation. ``category_images``: category id -> sorted image ids.
    ``captions``: image id -> its captions, whitespace-normalised, in file order.
    """

    root: Path
    categories: dict[int, str]
    image_files: dict[int, str]
    image_categories: dict[int, frozenset[int]]
    category_images: dict[int, list[int]]
    captions: dict[int, list[str]]

    def category_id(self, name: str) -> int | None:
        """Id of the category called ``name`` (case-insensitive), None when COCO has none."""
        wanted = name.strip().lower()
        return next((cid for cid, cname in self.categories.items() if cname.lower() == wanted), None)


def clean_caption(caption: str) -> str:
    """A COCO caption with runs of whitespace (trailing spaces, newlines) collapsed to one space."""
    return " ".join(caption.split())


def annotation_path(coco_root: Path, kind: str, split: str) -> Path:
    """``coco_root/annotations/{kind}_{split}.json`` with ``kind`` in {instances, captions}."""
    return coco_root / "annotations" / f"{kind}_{split}.json"


# The record fields each list of an annotation file must have (docs/formats.md), by file kind.
COCO_FIELDS = {
    "instances": {"images": ("id", "file_name"), "annotations": ("id", "image_id", "category_id"),
                  "categories": ("id", "name")},
    "captions": {"images": ("id", "file_name"), "annotations": ("id", "image_id", "caption")},
}
_ID_FIELDS = ("id", "image_id", "category_id")


def _file_kind(path: Path) -> str:
    return "captions" if path.name.startswith("captions") else "instances"


def read_coco_file(path: Path, required: tuple[str, ...] | None = None, kind: str | None = None) -> COCO:
    """One COCO annotation file, checked, then indexed by ``pycocotools.coco.COCO`` (silenced).

    ``kind`` (``instances`` or ``captions``; default from the file name) sets the lists and record
    fields required (``COCO_FIELDS``); ``required`` may name the lists instead. A captions file may
    not hold a ``categories`` list (pycocotools would then read its annotations as instances).

    Raises:
        UserInputError: the file is missing, is not JSON, is not a JSON object, lacks a required
            list, has an extra ``categories`` key (captions), or a record that is not an object
            with the required fields and int ids; the message names the file, list and record.
    """
    kind = kind or _file_kind(path)
    fields = dict(COCO_FIELDS[kind])
    if required is not None:
        fields = {key: fields.get(key, ()) for key in required}
    if not path.is_file():
        raise UserInputError(
            f"missing COCO annotation file {path}; --coco must be a COCO 2017 root holding "
            "annotations/{instances,captions}_{train,val}2017.json"
        )
    try:
        with path.open("rb") as handle:
            data = json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(f"malformed COCO annotation file {path}: not valid JSON ({err})") from err
    except OSError as err:
        raise UserInputError(f"cannot read COCO annotation file {path}: {err.strerror or err}") from err
    if not isinstance(data, dict):
        raise UserInputError(f"malformed COCO annotation file {path}: the top level is a JSON {type(data).__name__}, "
                             "not the object with images/annotations keys of a COCO file; re-download it")
    missing = [key for key in fields if not isinstance(data.get(key), list)]
    if missing:
        raise UserInputError(f"malformed COCO annotation file {path}: no list under key(s) {', '.join(missing)}")
    if kind == "captions" and "categories" in data:
        raise UserInputError(f"malformed COCO annotation file {path}: extra key 'categories', which a captions file "
                             "does not have (is it an instances file?); remove the key or re-download the file")
    for key, needed in fields.items():
        for number, record in enumerate(data[key]):
            if not isinstance(record, dict):
                raise UserInputError(f"malformed COCO annotation file {path}: {key}[{number}] is a "
                                     f"{type(record).__name__}, not an object; re-download it")
            absent = [name for name in needed if name not in record]
            if absent:
                raise UserInputError(f"malformed COCO annotation file {path}: {key}[{number}] "
                                     f"(id {record.get('id')!r}) lacks key(s) {', '.join(absent)}; re-download it")
            bad = [name for name in _ID_FIELDS if name in needed
                   and (not isinstance(record[name], int) or isinstance(record[name], bool))]
            if bad:
                raise UserInputError(f"malformed COCO annotation file {path}: {key}[{number}] has a non-integer "
                                     f"{', '.join(bad)} ({', '.join(repr(record[n]) for n in bad)}); re-download it")
    ids: dict[int, int] = {}
    for number, record in enumerate(data.get("images", [])):
        first = ids.setdefault(record["id"], number)
        if first != number:
            raise UserInputError(f"malformed COCO annotation file {path}: image id {record['id']} is listed twice "
                                 f"(images[{first}] and images[{number}]); image ids must be unique")
    coco = COCO()
    coco.dataset = data
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress lines
            coco.createIndex()
    except (KeyError, TypeError, AttributeError, AssertionError) as err:
        raise UserInputError(f"malformed COCO annotation file {path}: bad record ({err!r}); re-download it") from err
    return coco


def _malformed(path: Path, what: str, record, err: Exception) -> UserInputError:
    return UserInputError(f"malformed COCO annotation file {path}: {what} {record!r:.200} lacks a field "
                          f"or has a wrong type ({err!r}); re-download it")


def _check_known(path: Path, what: str, referenced: set[int], listed: set[int]) -> None:
    unknown = sorted(referenced - listed, key=str)
    if unknown:
        raise UserInputError(f"{path}: annotations refer to {len(unknown)} unknown {what} id(s), e.g. {unknown[:5]}; "
                             f"every {what} must be listed in the instances file of its split")


def load_coco(coco_root: str | Path) -> CocoIndex:
    """Load the four COCO 2017 annotation files under ``coco_root`` into a :class:`CocoIndex`.

    Raises:
        UserInputError: a file is missing, is not JSON, lacks ``images``/``annotations``
            (/``categories``), has a record without its id fields, refers to an unknown image
            or category, or an image id occurs in both splits.
    """
    root = Path(coco_root)
    categories: dict[int, str] = {}
    image_files: dict[int, str] = {}
    image_split: dict[int, str] = {}
    image_categories: dict[int, set[int]] = {}
    captions: dict[int, list[str]] = {}
    for split in COCO_SPLITS:
        path = annotation_path(root, "instances", split)
        instances = read_coco_file(path, kind="instances")
        record = None
        try:
            for record in instances.dataset["categories"]:
                categories[int(record["id"])] = str(record["name"])
            for number, record in enumerate(instances.dataset["images"]):
                if record["id"] in image_files:
                    raise UserInputError(f"{path}: image id {record['id']} (images[{number}]) is also listed in "
                                         f"{annotation_path(root, 'instances', image_split[record['id']])}; "
                                         "image ids must be unique across train2017 and val2017")
                name = check_relative(record["file_name"], f"{path}: images[{number}] (id {record['id']}) file_name",
                                      root / split)
                image_files[record["id"]] = f"{split}/{name}"
                image_split[record["id"]] = split
        except UserInputError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise _malformed(path, "record", record, err) from err
        _check_known(path, "image", set(instances.imgToAnns), set(instances.imgs))
        _check_known(path, "category", set(instances.catToImgs), set(instances.cats))
        for category_id, image_ids in instances.catToImgs.items():
            for image_id in image_ids:
                image_categories.setdefault(image_id, set()).add(category_id)

        path = annotation_path(root, "captions", split)
        captions_coco = read_coco_file(path, kind="captions")
        _check_known(path, "image", set(captions_coco.imgToAnns), set(instances.imgs))
        try:
            for image_id, annotations in captions_coco.imgToAnns.items():
                texts = captions[image_id] = []
                for record in annotations:
                    texts.append(clean_caption(record["caption"]))
        except (KeyError, TypeError, AttributeError) as err:
            raise _malformed(path, "caption", record, err) from err

    category_images: dict[int, list[int]] = {cid: [] for cid in sorted(categories)}
    for image_id in sorted(image_categories):
        for category_id in image_categories[image_id]:
            category_images[category_id].append(image_id)
    return CocoIndex(
        root=root,
        categories=dict(sorted(categories.items())),
        image_files=image_files,
        image_categories={image_id: frozenset(cats) for image_id, cats in image_categories.items()},
        category_images=category_images,
        captions=captions,
    )
