"""Seeded haystack construction (App. A) on hand-made entries, no images needed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from icir_common import UserInputError
from vhs_adapter.haystack import build_haystack, resolve_image
from vhs_adapter.question_files import MULTI_NEEDLE, SINGLE_NEEDLE, SizeFile, VHsEntry


def _entry(index: int, pos: tuple[str, ...], neg: tuple[str, ...]) -> VHsEntry:
    return VHsEntry(index, "For the image with a cup, is there a fork?", "yes", pos, neg)


def _size_file(size: int, kind: str = SINGLE_NEEDLE) -> SizeFile:
    return SizeFile(kind, size, Path(f"visual_haystack_{size}.json"))


def test_needles_sit_at_the_recorded_positions_and_fillers_come_from_neg_image():
    entry = _entry(0, ("p1", "p2"), ("n1", "n2", "n3", "n4", "n5", "n6"))
    haystack = build_haystack(_size_file(5, MULTI_NEEDLE), entry, seed=42)
    assert len(haystack.image_files) == 5 and len(set(haystack.image_files)) == 5
    assert sorted(haystack.image_files[p] for p in haystack.needle_positions) == ["p1", "p2"]
    fillers = [f for i, f in enumerate(haystack.image_files) if i not in haystack.needle_positions]
    assert len(fillers) == 3 and set(fillers) <= set(entry.neg_image)
    assert list(haystack.needle_positions) == sorted(haystack.needle_positions)


def test_same_seed_same_haystack_other_seeds_differ():
    entry = _entry(3, ("p",), tuple(f"n{i}" for i in range(9)))
    first = build_haystack(_size_file(10), entry, seed=42)
    assert build_haystack(_size_file(10), entry, seed=42) == first
    assert len({build_haystack(_size_file(10), entry, seed=s).image_files for s in range(20)}) > 1


def test_haystack_depends_on_entry_index_and_size_not_on_other_entries():
    neg = tuple(f"n{i}" for i in range(9))
    a = build_haystack(_size_file(10), _entry(0, ("p",), neg), seed=42)
    b = build_haystack(_size_file(10), _entry(1, ("p",), neg), seed=42)
    assert a != b  # two entries with the same images are shuffled independently
    c = build_haystack(_size_file(10, MULTI_NEEDLE), _entry(0, ("p",), neg), seed=42)
    assert a != c


def test_needle_position_is_uniform_over_the_haystack():
    # 5,000 fixed draws (seed 42, entries 0..4999); expected 1,000 per slot, sd ~28.
    neg = ("n1", "n2", "n3", "n4")
    counts = Counter(
        build_haystack(_size_file(5), _entry(i, ("p",), neg), seed=42).needle_positions[0] for i in range(5000)
    )
    assert sorted(counts) == [0, 1, 2, 3, 4]
    assert all(880 < count < 1120 for count in counts.values()), counts


@pytest.mark.parametrize("pos, neg", [(("p",), ("n1",)), (("p1", "p2", "p3", "p4"), ("n1", "n2"))])
def test_sizes_the_entry_cannot_fill_are_errors(pos, neg):
    with pytest.raises(UserInputError, match=r"visual_haystack_3\.json: entry 7: .* cannot make a haystack of size 3"):
        build_haystack(_size_file(3), _entry(7, pos, neg), seed=42)


def test_images_resolve_under_the_coco_root_or_its_parent(tmp_path):
    coco = tmp_path / "dataset" / "coco"
    (coco / "train2017").mkdir(parents=True)
    (coco / "train2017" / "000000000001.jpg").write_bytes(b"jpeg")
    entry = _entry(2, ("p",), ())
    direct = resolve_image(coco, "train2017/000000000001.jpg", _size_file(1), entry)
    via_parent = resolve_image(coco, "coco/train2017/000000000001.jpg", _size_file(1), entry)
    assert direct == coco / "train2017" / "000000000001.jpg"
    assert via_parent.resolve() == direct.resolve()
    with pytest.raises(UserInputError, match=r"entry 2: image val2017/000000000009\.jpg not found under COCO root"):
        resolve_image(coco, "val2017/000000000009.jpg", _size_file(1), entry)
