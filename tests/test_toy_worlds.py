"""Toy worlds (`icir_mcq.toy.worlds`): the demo world's categories, fixed colours, distinct
categories per image and one fixed-template caption per shape, read back from the written files
with pycocotools and the JPEG pixels; ICIR-MCQ built on it is answerable from the target image
alone (and only after finding it), unlike on the standard world; bad world names; determinism;
the ``--world`` CLI option."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from pycocotools.coco import COCO
from scipy.ndimage import binary_dilation

from harness.cli import main
from icir_common import UserInputError
from icir_mcq.build import build_icir_mcq
from icir_mcq.hub_folder import config_data_path
from icir_mcq.toy import CATEGORIES, write_toy_corpus
from icir_mcq.toy.shapes import BACKGROUNDS, SHAPE_COLOURS
from icir_mcq.toy.worlds import DEMO_CATEGORY_COLOURS, get_world

SPLITS = ("train2017", "val2017")
ANNOTATION_FILES = [f"{kind}_{split}.json" for kind in ("instances", "captions") for split in SPLITS]
JPEG_TOLERANCE = 40  # per RGB channel, for the median pixel of a mask
PLURAL = {c.name: c.plural for c in CATEGORIES}
COLOUR_RGB = dict(SHAPE_COLOURS)
# How many shapes each count word of a caption allows ("some"/"a few" are vague: 2 or 3).
COUNT_WORDS = {"a": {1}, "an": {1}, "two": {2}, "a pair of": {2}, "three": {3}, "a few": {2, 3}, "some": {2, 3}}
COUNT_ALTERNATION = "|".join(sorted(map(re.escape, COUNT_WORDS), key=len, reverse=True))
MCQ_SAMPLES = 600


def _nearest(table, rgb: np.ndarray) -> str:
    """Name of the ``(name, rgb)`` entry of `table` closest to `rgb` (L1)."""
    return min(table, key=lambda entry: np.abs(np.array(entry[1]) - rgb).sum())[0]


def _words(phrase: str) -> re.Pattern:
    return re.compile(rf"\b{re.escape(phrase)}\b", re.IGNORECASE)


BACKGROUND_WORDS = {name: _words(name) for name, _ in BACKGROUNDS}


def _group_pattern(name: str) -> re.Pattern:
    """A count word, the category's fixed colour, then its name or plural."""
    nouns = f"{re.escape(name)}|{re.escape(PLURAL[name])}"
    return re.compile(rf"\b({COUNT_ALTERNATION}) {re.escape(DEMO_CATEGORY_COLOURS[name])} ({nouns})\b", re.IGNORECASE)


class World:
    """A written corpus read back: per image its category counts (by name), captions and, with
    JPEGs, its background (pixels outside every mask) and each instance's median mask colour."""

    def __init__(self, root: Path, pixels: bool):
        self.root = root
        self.category_lists: dict[str, list[dict]] = {}
        self.counts: dict[int, Counter] = defaultdict(Counter)
        self.captions: dict[int, list[str]] = defaultdict(list)
        self.background: dict[int, str] = {}
        self.instance_colours: list[tuple[str, np.ndarray]] = []  # (category name, median RGB)
        for split in SPLITS:
            coco = COCO(str(root / "coco" / "annotations" / f"instances_{split}.json"))
            self.category_lists[split] = coco.dataset["categories"]
            for annotation in coco.dataset["annotations"]:
                self.counts[annotation["image_id"]][coco.cats[annotation["category_id"]]["name"]] += 1
            captions = json.loads((root / "coco" / "annotations" / f"captions_{split}.json").read_text())
            for record in captions["annotations"]:
                self.captions[record["image_id"]].append(record["caption"])
            if pixels:
                for image_id, info in coco.imgs.items():
                    self._read_pixels(coco, image_id, root / "coco" / split / info["file_name"])

    def _read_pixels(self, coco: COCO, image_id: int, path: Path) -> None:
        with Image.open(path) as jpeg:
            rgb = np.asarray(jpeg.convert("RGB"), dtype=float)
        annotations = coco.imgToAnns[image_id]
        masks = [coco.annToMask(a).astype(bool) for a in annotations]
        # Two pixels of margin around the shapes keep JPEG ringing out of the background.
        outside = ~binary_dilation(np.logical_or.reduce(masks), iterations=2)
        median = np.median(rgb[outside], axis=0)
        self.background[image_id] = _nearest(BACKGROUNDS, median)
        assert np.abs(median - dict(BACKGROUNDS)[self.background[image_id]]).max() <= JPEG_TOLERANCE, (path, median)
        for annotation, mask in zip(annotations, masks):
            name = coco.cats[annotation["category_id"]]["name"]
            self.instance_colours.append((name, np.median(rgb[mask], axis=0)))


@pytest.fixture(scope="module")
def demo_world(tmp_path_factory) -> World:
    """A 3,000-image demo-world corpus (seed 3) with JPEGs, read back."""
    root = tmp_path_factory.mktemp("worlds") / "demo"
    write_toy_corpus(root, 3000, seed=3, world="demo")
    return World(root, pixels=True)


def test_demo_world_lists_exactly_its_nine_categories(demo_world):
    by_name = {c.name: c for c in CATEGORIES}
    expected = {(by_name[name].id, name, by_name[name].supercategory) for name in DEMO_CATEGORY_COLOURS}
    assert len(expected) == 9
    for split in SPLITS:
        listed = demo_world.category_lists[split]
        assert len(listed) == 9 and {(c["id"], c["name"], c["supercategory"]) for c in listed} == expected
    assert set().union(*demo_world.counts.values()) == set(DEMO_CATEGORY_COLOURS)  # every one occurs, no other
    shapes_per_image = Counter(sum(c.values()) for c in demo_world.counts.values())
    assert set(shapes_per_image) == {1, 2, 3}
    # p = (0.2, 0.4, 0.4) over 3,000 images: the standard deviation of each share is under 0.01.
    assert [shapes_per_image[k] / 3000 for k in (1, 2, 3)] == pytest.approx([0.2, 0.4, 0.4], abs=0.03)


def test_every_shape_is_drawn_in_its_categorys_fixed_colour(demo_world):
    assert len(demo_world.instance_colours) == sum(sum(c.values()) for c in demo_world.counts.values())
    for name, median in demo_world.instance_colours:
        expected = np.array(COLOUR_RGB[DEMO_CATEGORY_COLOURS[name]])
        assert np.abs(median - expected).max() <= JPEG_TOLERANCE, (name, median, expected)
        assert _nearest(SHAPE_COLOURS, median) == DEMO_CATEGORY_COLOURS[name]


def test_each_shape_has_one_caption_naming_it_in_its_colour_and_the_background(demo_world):
    category_order = [c.name for c in CATEGORIES]
    assert set(demo_world.captions) == set(demo_world.counts)
    for image_id, captions in demo_world.captions.items():
        counts, background = demo_world.counts[image_id], demo_world.background[image_id]
        assert set(counts.values()) == {1}, dict(counts)  # distinct categories: no count words
        shapes = [f"{DEMO_CATEGORY_COLOURS[name]} {name}" for name in sorted(counts, key=category_order.index)]
        expected = [f"{'An' if shape[0] in 'aeiou' else 'A'} {shape} on a {background} background." for shape in shapes]
        assert captions == expected, dict(counts)


def _ambiguous_samples(rows: list[dict], consistent) -> list[tuple[dict, list[int]]]:
    """The samples whose target option is not the one and only option `consistent(target, caption)`
    holds for, each with the image ids of the options it holds for."""
    ambiguous = []
    for row in rows:
        fits = [consistent(row["target_image_id"], option) for option in row["options"]]
        if not fits[row["answer_index"]] or sum(fits) > 1:
            ambiguous.append((row, [image for image, fit in zip(row["option_image_ids"], fits) if fit]))
    return ambiguous


def _build_n5(root: Path, out: Path) -> list[dict]:
    mmniah = root / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"
    build_icir_mcq(root / "coco", [mmniah], out, seed=0, configs=["n5"], samples=MCQ_SAMPLES, embed_images=False)
    return pq.read_table(out / config_data_path("n5")).to_pylist()


def test_demo_icir_mcq_is_answerable_from_the_target_image_unlike_the_standard_world(demo_world, tmp_path):
    groups = {name: _group_pattern(name) for name in DEMO_CATEGORY_COLOURS}

    def fits_demo_scene(image: int, caption: str) -> bool:
        # The caption names a shape group the image shows (count word allowing the annotated
        # count) and the background seen in its pixels.
        counts = demo_world.counts[image]
        named = {name: m.group(1).lower() for name, pattern in groups.items() if (m := pattern.search(caption))}
        return (len(named) == 1 and all(counts[name] in COUNT_WORDS[word] for name, word in named.items())
                and [b for b, p in BACKGROUND_WORDS.items() if p.search(caption)] == [demo_world.background[image]])

    rows = _build_n5(demo_world.root, tmp_path / "demo_mcq")
    assert _ambiguous_samples(rows, fits_demo_scene) == []  # exactly one option fits the target
    # ...but matching the options against every image in context is not enough: in nearly every
    # sample a distractor image shows the background a wrong option names (measured, seed 0: 0.968).
    def backgrounds(option: str) -> set[str]:
        return {b for b, p in BACKGROUND_WORDS.items() if p.search(option)}

    shown_elsewhere = [
        set().union(*(backgrounds(o) for k, o in enumerate(row["options"]) if k != row["answer_index"]))
        & {demo_world.background[image] for image in row["image_ids"] if image != row["target_image_id"]}
        for row in rows
    ]
    assert np.mean([bool(s) for s in shown_elsewhere]) > 0.9

    standard_root = tmp_path / "standard"
    write_toy_corpus(standard_root, 3000, seed=3, image_files=False)
    standard = World(standard_root, pixels=False)
    # Standard captions are partial, use synonyms or name no shape, so they cannot be parsed into
    # a scene; instead an option fits the target when it is a caption of some image with the
    # target's category set: such an image looks, category by category, like the target. Measured
    # (seed 0, 600 n5 samples): 0.695 (0.69-0.71 over build seeds 0-4). Parsing captions as above
    # (any colour word) gives 0.47-0.50 here; also requiring the same background (from pixels)
    # 0.86-0.89.
    captions_of_category_set = defaultdict(set)
    for image_id, counts in standard.counts.items():
        captions_of_category_set[frozenset(counts)].update(standard.captions[image_id])

    def fits_standard_scene(target: int, caption: str) -> bool:
        return caption in captions_of_category_set[frozenset(standard.counts[target])]

    standard_share = 1 - len(_ambiguous_samples(_build_n5(standard_root, tmp_path / "standard_mcq"),
                                                fits_standard_scene)) / MCQ_SAMPLES
    assert standard_share < 0.9


def test_unknown_world_is_a_user_error_naming_the_choices(tmp_path):
    with pytest.raises(UserInputError, match=r"'nope'.*'demo', 'standard'"):
        get_world("nope")
    out = tmp_path / "out"
    with pytest.raises(UserInputError, match=r"'nope'.*'demo', 'standard'"):
        write_toy_corpus(out, 20, world="nope")
    assert not out.exists()
    with pytest.raises(SystemExit) as exited:  # argparse's choices reject it before anything runs
        main(["toy-corpus", str(out), "--images", "20", "--world", "nope"])
    assert exited.value.code == 2 and not out.exists()


def test_same_seed_and_world_give_the_same_bytes_and_the_worlds_differ(tmp_path):
    first = write_toy_corpus(tmp_path / "a", 60, seed=5, image_files=False, world="demo")
    again = write_toy_corpus(tmp_path / "b", 60, seed=5, image_files=False, world="demo")
    standard = write_toy_corpus(tmp_path / "c", 60, seed=5, image_files=False, world="standard")
    for name in ANNOTATION_FILES:
        demo_bytes = (first.coco_root / "annotations" / name).read_bytes()
        assert demo_bytes == (again.coco_root / "annotations" / name).read_bytes(), name
        assert demo_bytes != (standard.coco_root / "annotations" / name).read_bytes(), name
    assert first.mmniah_file.read_bytes() == again.mmniah_file.read_bytes()


def test_cli_world_option_writes_a_demo_world_and_vhs_questions_over_it(tmp_path):
    out = tmp_path / "toy"
    assert main(["toy-corpus", str(out), "--images", "50", "--world", "demo", "--vhs-sizes", "1,2"]) == 0
    world = World(out, pixels=False)
    assert len(world.counts) == 50
    assert {c["name"] for split in SPLITS for c in world.category_lists[split]} == set(DEMO_CATEGORY_COLOURS)
    files = {p.name for p in (out / "VHs_qa" / "single_needle" / "VHs_large").iterdir()}
    assert files == {"visual_haystack_oracle.json", "visual_haystack_2.json"}  # N=1 is VHs' "oracle" file
    entries = json.loads((out / "VHs_qa" / "single_needle" / "VHs_large" / "visual_haystack_2.json").read_text())
    assert len(entries) == 20
    for entry in entries:
        anchor, target = re.fullmatch(r"For the image with an? (.+), is there an? (.+)\?",
                                      entry["conversations"][0]["value"]).groups()
        assert {anchor, target} <= set(DEMO_CATEGORY_COLOURS)
        (needle,) = [world.counts[int(Path(path).stem)] for path in entry["pos_image"]]
        assert anchor in needle and not any(anchor in world.counts[int(Path(path).stem)] for path in entry["neg_image"])
        assert (target in needle) == (entry["conversations"][1]["value"] == "yes")
