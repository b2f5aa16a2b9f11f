"""The builder on COCO's real 80 category names (ids 1-90 with gaps) and caption habits:
irregular plurals match, categories captions never name are skipped with a report, and
asking for one of those by name is an error."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from icir_common import UserInputError
from icir_mcq.build import build_icir_mcq
from icir_mcq.hub_folder import config_data_path

COCO_CATEGORIES = {
    1: "person", 2: "bicycle", 3: "car", 4: "motorcycle", 5: "airplane", 6: "bus", 7: "train", 8: "truck",
    9: "boat", 10: "traffic light", 11: "fire hydrant", 13: "stop sign", 14: "parking meter", 15: "bench",
    16: "bird", 17: "cat", 18: "dog", 19: "horse", 20: "sheep", 21: "cow", 22: "elephant", 23: "bear",
    24: "zebra", 25: "giraffe", 27: "backpack", 28: "umbrella", 31: "handbag", 32: "tie", 33: "suitcase",
    34: "frisbee", 35: "skis", 36: "snowboard", 37: "sports ball", 38: "kite", 39: "baseball bat",
    40: "baseball glove", 41: "skateboard", 42: "surfboard", 43: "tennis racket", 44: "bottle",
    46: "wine glass", 47: "cup", 48: "fork", 49: "knife", 50: "spoon", 51: "bowl", 52: "banana", 53: "apple",
    54: "sandwich", 55: "orange", 56: "broccoli", 57: "carrot", 58: "hot dog", 59: "pizza", 60: "donut",
    61: "cake", 62: "chair", 63: "couch", 64: "potted plant", 65: "bed", 67: "dining table", 70: "toilet",
    72: "tv", 73: "laptop", 74: "mouse", 75: "remote", 76: "keyboard", 77: "cell phone", 78: "microwave",
    79: "oven", 80: "toaster", 81: "sink", 82: "refrigerator", 84: "book", 85: "clock", 86: "vase",
    87: "scissors", 88: "teddy bear", 89: "hair drier", 90: "toothbrush",
}
# Captions per category in the habits of real COCO annotators; "{n}" numbers the image.
CAPTIONS = {
    "person": ["People waiting at stop {n}.", "A man holding an umbrella {n}.", "A person on a bench, photo {n}."],
    "knife": ["Two knives on cutting board {n}.", "A knife next to bread {n}."],
    "mouse": ["A computer mouse on desk {n}.", "Mice by keyboard {n}."],
    "bus": ["Buses lined up at depot {n}.", "A red double decker bus {n}."],
    "sheep": ["Sheep grazing on hill {n}.", "A flock in field {n}."],
    "wine glass": ["Wine glasses on table {n}.", "A glass of red wine {n}."],
    "hot dog": ["Hot dogs with mustard {n}.", "A hot dog on a plate {n}."],
    "dining table": ["A table set for dinner {n}.", "Plates of food on the table {n}."],
    "hair drier": ["A hair dryer on the counter {n}.", "Someone drying hair {n}."],
}
SERVED = {"person", "knife", "mouse", "bus", "sheep", "wine glass", "hot dog"}


def _write_coco(root: Path) -> None:
    name_to_id = {name: cid for cid, name in COCO_CATEGORIES.items()}
    categories = [{"supercategory": "thing", "id": cid, "name": name} for cid, name in COCO_CATEGORIES.items()]
    split_data = {split: {"images": [], "annotations": [], "captions": []} for split in ("train2017", "val2017")}
    image_id = 100
    for name, templates in CAPTIONS.items():
        for n in range(8):
            image_id += 7
            split = "val2017" if n == 7 else "train2017"
            data = split_data[split]
            data["images"].append({"id": image_id, "file_name": f"{image_id:012d}.jpg", "height": 480, "width": 640,
                                   "license": 1, "coco_url": "", "flickr_url": "", "date_captured": ""})
            data["annotations"].append({"id": image_id * 10, "image_id": image_id, "category_id": name_to_id[name],
                                        "bbox": [1.0, 2.0, 30.0, 40.0], "area": 1200.0, "iscrowd": 0,
                                        "segmentation": [[1, 2, 31, 2, 31, 42, 1, 42]]})
            data["captions"] += [{"id": image_id * 10 + k, "image_id": image_id, "caption": t.format(n=n) + "  \n"}
                                 for k, t in enumerate(templates)]
    annotations = root / "annotations"
    annotations.mkdir(parents=True)
    for split, data in split_data.items():
        common = {"info": {}, "licenses": [], "images": data["images"]}
        (annotations / f"instances_{split}.json").write_text(
            json.dumps({**common, "annotations": data["annotations"], "categories": categories}))
        (annotations / f"captions_{split}.json").write_text(json.dumps({**common, "annotations": data["captions"]}))


@pytest.fixture(scope="module")
def real_names_coco(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("coco_names") / "coco"
    _write_coco(root)
    return root


def _mmniah(toy_corpus: Path) -> list[Path]:
    return [toy_corpus / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"]


def test_real_category_names_build_with_a_skip_report(real_names_coco, toy_corpus, tmp_path):
    out = tmp_path / "icir"
    summary = build_icir_mcq(real_names_coco, _mmniah(toy_corpus), out, samples=120, embed_images=False)
    report = {r.name: r for r in summary.reports["n6"]}
    assert len(report) == 80
    assert {name for name, r in report.items() if r.skipped_because is None} == SERVED
    assert report["dining table"].captioned_images == 0 and report["dining table"].annotated_images == 8
    assert report["hair drier"].skipped_because.startswith("only 0 images have a caption naming it")
    assert report["zebra"].annotated_images == 0
    assert report["person"].matching_captions == 16  # "People ..." and "A person ...", not "A man ..."
    for config in ("n5", "n6"):
        rows = pq.read_table(out / config_data_path(config)).to_pylist()
        assert {r["category"] for r in rows} == SERVED
        mentions = {(r["category"], r["prompt"][slice(*r["cattok_char_span"])]) for r in rows}
        assert {m for c, m in mentions if c == "person"} == {"People", "person"}
        assert {m for c, m in mentions if c == "knife"} == {"knives", "knife"}
        assert {m for c, m in mentions if c == "mouse"} == {"Mice", "mouse"}
        assert {m for c, m in mentions if c == "bus"} == {"Buses", "bus"}
        assert {m for c, m in mentions if c == "wine glass"} == {"Wine glasses"}
        assert all("  " not in o and not o.endswith(" ") for r in rows for o in r["options"])  # cleaned captions


@pytest.mark.parametrize("name", ["hair drier", "Dining Table"])
def test_requesting_a_category_captions_never_name_is_an_error(real_names_coco, toy_corpus, tmp_path, name):
    with pytest.raises(UserInputError, match=f"category '{name.lower()}' cannot be served for n5: only 0 images"):
        build_icir_mcq(real_names_coco, _mmniah(toy_corpus), tmp_path / "out", samples=60, embed_images=False,
                       categories=["person", name])
    assert not (tmp_path / "out").exists()


def test_a_synonym_is_not_a_category(real_names_coco, toy_corpus, tmp_path):
    with pytest.raises(UserInputError, match="unknown category 'people'"):
        build_icir_mcq(real_names_coco, _mmniah(toy_corpus), tmp_path / "out", samples=60, embed_images=False,
                       categories=["people"])
