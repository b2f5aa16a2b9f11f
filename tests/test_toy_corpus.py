"""The toy corpus: COCO 2017 / MM-NIAH layout and shapes, geometry that matches the pixels,
captions that name exactly the annotated shapes, determinism."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools.coco import COCO
from scipy.ndimage import binary_dilation, binary_erosion

from harness.cli import main
from icir_mcq.toy import CATEGORIES, write_toy_corpus
from icir_mcq.toy.shapes import BACKGROUNDS

SPLITS = ("train2017", "val2017")
ANNOTATION_FILES = [f"{kind}_{split}.json" for kind in ("instances", "captions") for split in SPLITS]


def _load(root: Path, name: str) -> dict:
    return json.loads((root / "coco" / "annotations" / name).read_text())


def test_layout_and_json_shapes(toy_corpus):
    assert sorted(p.name for p in (toy_corpus / "coco" / "annotations").iterdir()) == sorted(ANNOTATION_FILES)
    image_ids = {}
    for split in SPLITS:
        instances, captions = _load(toy_corpus, f"instances_{split}.json"), _load(toy_corpus, f"captions_{split}.json")
        assert set(instances) == {"info", "licenses", "images", "annotations", "categories"}
        assert set(captions) == {"info", "licenses", "images", "annotations"}
        assert captions["images"] == instances["images"]
        for image in instances["images"]:
            assert set(image) == {"id", "file_name", "height", "width", "license", "coco_url", "flickr_url",
                                  "date_captured"}
            assert image["file_name"] == f"{image['id']:012d}.jpg"
            with Image.open(toy_corpus / "coco" / split / image["file_name"]) as jpeg:
                assert (jpeg.format, jpeg.size) == ("JPEG", (image["width"], image["height"]))
            image_ids[image["id"]] = split
        for annotation in instances["annotations"]:
            assert set(annotation) == {"id", "image_id", "category_id", "bbox", "area", "iscrowd", "segmentation"}
            if annotation["iscrowd"]:
                assert set(annotation["segmentation"]) == {"counts", "size"}
            else:
                assert isinstance(annotation["segmentation"], list) and len(annotation["segmentation"][0]) >= 6
        assert all(set(c) == {"id", "image_id", "caption"} for c in captions["annotations"])
    counts = Counter(image_ids.values())
    assert counts["train2017"] + counts["val2017"] == 300 and counts["val2017"] == 12  # 4% of 300
    assert sorted(len(list((toy_corpus / "coco" / s).iterdir())) for s in SPLITS) == [12, 288]


def test_categories_are_coco_like():
    ids = [c.id for c in CATEGORIES]
    assert len(CATEGORIES) >= 12 and ids == sorted(ids) and len(set(ids)) == len(ids)
    assert ids != list(range(ids[0], ids[0] + len(ids)))  # gaps, like COCO's 1-90
    assert {"traffic cone", "crescent moon", "lightning bolt"} <= {c.name for c in CATEGORIES}
    assert {c.name: c.plural for c in CATEGORIES}["leaf"] == "leaves"
    assert len({c.supercategory for c in CATEGORIES}) >= 3


def test_every_category_occurs_and_crowd_rle_is_present(toy_corpus):
    annotations = [a for s in SPLITS for a in _load(toy_corpus, f"instances_{s}.json")["annotations"]]
    assert {a["category_id"] for a in annotations} == {c.id for c in CATEGORIES}
    per_image = Counter(a["image_id"] for a in annotations)
    assert set(per_image.values()) == {1, 2, 3}
    assert any(a["iscrowd"] == 1 for a in annotations)


def test_segmentation_and_bbox_match_the_drawn_pixels(toy_corpus):

    for split in SPLITS:
        path = toy_corpus / "coco" / "annotations" / f"instances_{split}.json"
        coco = COCO(str(path))
        backgrounds = {name: np.array(rgb) for name, rgb in BACKGROUNDS}
        for image_id in sorted(coco.imgs)[:60]:
            info = coco.imgs[image_id]
            pixels = np.asarray(Image.open(toy_corpus / "coco" / split / info["file_name"]).convert("RGB"), dtype=int)
            corner = pixels[0, 0]
            background = min(backgrounds.values(), key=lambda rgb: np.abs(rgb - corner).sum())
            drawn = np.abs(pixels - background).sum(axis=2) > 60  # not background, JPEG noise tolerated
            annotations = coco.imgToAnns[image_id]
            masks = [coco.annToMask(a).astype(bool) for a in annotations]
            union = np.logical_or.reduce(masks)
            # Exact up to JPEG ringing: one pixel inside, two outside the polygon edge.
            assert not (binary_erosion(union) & ~drawn).any(), image_id
            assert not (drawn & ~binary_dilation(union, iterations=2)).any(), image_id
            for annotation, mask in zip(annotations, masks):
                ys, xs = np.nonzero(mask)
                x, y, w, h = annotation["bbox"]
                if not annotation["iscrowd"]:
                    vertices = np.array(annotation["segmentation"][0]).reshape(-1, 2)
                    low, high = vertices.min(axis=0), vertices.max(axis=0)
                    assert [x, y, w, h] == pytest.approx([*low, *(high - low)], abs=0.011)
                # The mask lies in the bbox and fills it up to sharp tips that cover no pixel centre.
                assert np.floor(x) <= xs.min() and xs.max() + 1 <= np.ceil(x + w) + 0.5
                assert np.floor(y) <= ys.min() and ys.max() + 1 <= np.ceil(y + h) + 0.5
                assert xs.min() - x < 2.5 and (x + w) - (xs.max() + 1) < 2.5
                assert ys.min() - y < 2.5 and (y + h) - (ys.max() + 1) < 2.5
                assert annotation["area"] == pytest.approx(mask.sum(), rel=0.25, abs=8)


def _category_words(name: str, plural: str) -> str:
    import re

    return rf"\b(?:{re.escape(name)}|{re.escape(plural)})\b"


def test_captions_name_exactly_the_annotated_shapes(toy_corpus):
    import re

    patterns = {c.id: re.compile(_category_words(c.name, c.plural), re.IGNORECASE) for c in CATEGORIES}
    plural_patterns = {c.id: re.compile(rf"\b{re.escape(c.plural)}\b", re.IGNORECASE) for c in CATEGORIES}
    named_total = plural_total = colour_total = 0
    for split in SPLITS:
        categories_of = defaultdict(Counter)
        for a in _load(toy_corpus, f"instances_{split}.json")["annotations"]:
            categories_of[a["image_id"]][a["category_id"]] += 1
        captions_of = defaultdict(list)
        for c in _load(toy_corpus, f"captions_{split}.json")["annotations"]:
            captions_of[c["image_id"]].append(c["caption"])
        assert set(captions_of) == set(categories_of)
        for image_id, captions in captions_of.items():
            assert 3 <= len(captions) <= 5 and len(set(captions)) == len(captions)
            for caption in captions:
                named = {cid for cid, pattern in patterns.items() if pattern.search(caption)}
                assert named <= set(categories_of[image_id]), (caption, categories_of[image_id])
                named_total += bool(named)
                plural_total += any(plural_patterns[cid].search(caption) for cid in named)
                colour_total += bool(re.search(r"\b(red|orange|yellow|green|blue|purple|pink|brown|black)\b", caption))
    n_captions = sum(len(_load(toy_corpus, f"captions_{s}.json")["annotations"]) for s in SPLITS)
    assert 0.6 < named_total / n_captions < 0.98  # most, not all, captions name a shape
    assert plural_total > 0.05 * n_captions and colour_total > 0.2 * n_captions


def test_mmniah_records(toy_corpus):
    lines = (toy_corpus / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 40 and [r["id"] for r in records] == list(range(40))
    for record in records:
        assert set(record) == {"id", "images_list", "context", "question", "answer", "meta"}
        placeholders = record["context"].count("<image>") + record["question"].count("<image>")
        assert len(record["images_list"]) == placeholders
        assert record["meta"]["num_images"] == record["context"].count("<image>") >= 3
        assert isinstance(record["answer"], int)
    assert any("\n\n" in r["context"] for r in records)  # multi-paragraph passages
    assert any("<image>\n\n<image>" in r["context"] or r["context"].startswith("\n<image>") for r in records)


def test_same_seed_same_bytes_and_annotations_do_not_depend_on_image_files(tmp_path):
    first = write_toy_corpus(tmp_path / "a", 40, seed=3)
    second = write_toy_corpus(tmp_path / "b", 40, seed=3, image_files=False)
    other = write_toy_corpus(tmp_path / "c", 40, seed=4, image_files=False)
    files = ANNOTATION_FILES
    assert all((first.coco_root / "annotations" / f).read_bytes() == (second.coco_root / "annotations" / f).read_bytes()
               for f in files)
    assert first.mmniah_file.read_bytes() == second.mmniah_file.read_bytes()
    assert not (second.coco_root / "train2017").exists()
    assert (first.coco_root / "annotations" / files[0]).read_bytes() != (other.coco_root / "annotations" / files[0]).read_bytes()
    again = write_toy_corpus(tmp_path / "d", 40, seed=3)
    jpegs = sorted((first.coco_root / "train2017").iterdir())
    assert [p.read_bytes() for p in jpegs] == [(again.coco_root / "train2017" / p.name).read_bytes() for p in jpegs]


def test_cli_writes_a_corpus_and_refuses_an_existing_folder(tmp_path, capsys):
    out = tmp_path / "toy"
    assert main(["toy-corpus", str(out), "--images", "25", "--seed", "1", "--no-image-files"]) == 0
    assert "24 train2017 + 1 val2017 images" in capsys.readouterr().out
    assert len(_load(out, "instances_train2017.json")["images"]) == 24
    assert main(["toy-corpus", str(out), "--images", "25"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["toy-corpus", str(tmp_path / "zero"), "--images", "0"]) == 2
    assert not (tmp_path / "zero").exists()


def test_cli_also_writes_visual_haystacks_question_files(tmp_path):
    out = tmp_path / "toy"
    assert main(["toy-corpus", str(out), "--images", "60", "--no-image-files", "--vhs-sizes", "2,5",
                 "--vhs-per-size", "6"]) == 0
    single = out / "VHs_qa" / "single_needle" / "VHs_large"
    assert sorted(p.name for p in single.iterdir()) == ["visual_haystack_2.json", "visual_haystack_5.json"]
    entries = json.loads((single / "visual_haystack_5.json").read_text())
    assert len(entries) == 6
    assert all(len(e["pos_image"]) + len(e["neg_image"]) == 5 for e in entries)
    assert sorted(e["conversations"][1]["value"] for e in entries) == ["no"] * 3 + ["yes"] * 3
    assert main(["toy-corpus", str(tmp_path / "bare"), "--images", "20", "--vhs-sizes", ""]) == 0
    assert not (tmp_path / "bare" / "VHs_qa").exists()
