"""Toy VHs question files: the real format, 50/50 answers, nested haystacks, determinism and
errors. The anchor/target guarantees are checked against the COCO annotations with pycocotools
on the built records, in test_vhs_build.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from icir_common import UserInputError
from icir_mcq.toy import write_toy_corpus
from vhs_adapter.toy_questions import write_toy_vhs_questions

SIZES = (1, 2, 3, 5, 10, 20, 50, 100)
PER_SIZE = 8
MULTI = re.compile(r"For all images with an? (.+), do (all|any) of them contain an? (.+)\?")


@pytest.fixture(scope="module")
def vhs_qa(toy_coco_root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("toy_vhs")
    summary = write_toy_vhs_questions(toy_coco_root, out, seed=0, sizes=SIZES, per_size=PER_SIZE)
    assert summary.root == out / "VHs_qa"
    return summary.root


def _files(vhs_qa: Path) -> dict[str, Path]:
    # The build marker (.icir-build.json) is not a question file.
    return {str(path.relative_to(vhs_qa)): path for path in sorted(vhs_qa.rglob("*.json")) if not path.name.startswith(".")}


def test_writes_every_file_in_the_vhs_layout(vhs_qa):
    names = {f"visual_haystack_{'oracle' if n == 1 else n}.json" for n in SIZES}
    expected = {f"single_needle/VHs_large/{name}" for name in names}
    expected |= {f"single_needle/VHs_small/{name}" for name in names}
    expected |= {f"multi_needle/visual_haystack_{n}.json" for n in SIZES if n >= 5}
    assert set(_files(vhs_qa)) == expected


def test_entries_have_exactly_the_vhs_keys_sizes_and_balanced_answers(vhs_qa):
    for name, path in _files(vhs_qa).items():
        entries = json.loads(path.read_text())
        size = 1 if "oracle" in name else int(re.search(r"_(\d+)\.json", name).group(1))
        assert len(entries) == (PER_SIZE // 2 if "VHs_small" in name else PER_SIZE), name
        answers = [entry["conversations"][1]["value"] for entry in entries]
        assert answers.count("yes") == answers.count("no") == len(entries) // 2, name
        for entry in entries:
            assert set(entry) == {"pos_image", "neg_image", "conversations"}
            assert [turn["from"] for turn in entry["conversations"]] == ["human", "gpt"]
            assert len(entry["pos_image"]) + len(entry["neg_image"]) == size
            assert all(re.fullmatch(r"(train|val)2017/\d{12}\.jpg", p) for p in entry["pos_image"] + entry["neg_image"])
            assert len(set(entry["pos_image"] + entry["neg_image"])) == size


def test_small_subset_is_a_balanced_part_of_the_large_one(vhs_qa):
    for size_file in ("visual_haystack_oracle.json", "visual_haystack_10.json"):
        large = json.loads((vhs_qa / "single_needle" / "VHs_large" / size_file).read_text())
        small = json.loads((vhs_qa / "single_needle" / "VHs_small" / size_file).read_text())
        assert all(entry in large for entry in small)


def test_haystacks_grow_by_adding_fillers(vhs_qa):
    folder = vhs_qa / "single_needle" / "VHs_large"
    small = json.loads((folder / "visual_haystack_5.json").read_text())
    large = json.loads((folder / "visual_haystack_100.json").read_text())
    for a, b in zip(small, large):
        assert a["pos_image"] == b["pos_image"] and a["conversations"] == b["conversations"]
        assert a["neg_image"] == b["neg_image"][:4]


def test_multi_needle_questions_use_both_quantifiers_and_needle_counts(vhs_qa):
    entries = json.loads((vhs_qa / "multi_needle" / "visual_haystack_10.json").read_text())
    quantifiers = [MULTI.fullmatch(e["conversations"][0]["value"]).group(2) for e in entries]
    assert quantifiers.count("all") == quantifiers.count("any") == PER_SIZE // 2


def test_same_seed_same_bytes_other_seed_differs(toy_coco_root, vhs_qa, tmp_path):
    again = write_toy_vhs_questions(toy_coco_root, tmp_path / "a", seed=0, sizes=SIZES, per_size=PER_SIZE).root
    other = write_toy_vhs_questions(toy_coco_root, tmp_path / "b", seed=1, sizes=SIZES, per_size=PER_SIZE).root
    files = _files(vhs_qa)
    assert all((again / name).read_bytes() == path.read_bytes() for name, path in files.items())
    assert any((other / name).read_bytes() != path.read_bytes() for name, path in files.items())


def test_too_few_images_for_the_largest_size_is_a_clear_error(tmp_path):
    corpus = write_toy_corpus(tmp_path / "tiny", 12, seed=0, image_files=False)
    with pytest.raises(UserInputError, match=r"12-image corpus cannot supply .* haystack size 50"):
        write_toy_vhs_questions(corpus.coco_root, tmp_path / "out", sizes=(1, 50), per_size=2)
    assert not (tmp_path / "out" / "VHs_qa").exists()


@pytest.mark.parametrize("kwargs, message", [({"per_size": 7}, "even"), ({"sizes": (0, 5)}, "positive")])
def test_bad_arguments_are_user_errors(toy_coco_root, tmp_path, kwargs, message):
    with pytest.raises(UserInputError, match=message):
        write_toy_vhs_questions(toy_coco_root, tmp_path, **kwargs)


def test_missing_annotations_name_the_file(tmp_path):
    with pytest.raises(UserInputError, match=r"instances_train2017\.json not found"):
        write_toy_vhs_questions(tmp_path, tmp_path / "out")


def test_malformed_annotations_name_the_file(tmp_path):
    corpus = write_toy_corpus(tmp_path / "toy", 20, seed=0, image_files=False)
    path = corpus.coco_root / "annotations" / "instances_val2017.json"
    path.write_text(path.read_text()[:100])
    expected = r"malformed COCO annotation file .*instances_val2017\.json: not valid JSON"
    with pytest.raises(UserInputError, match=expected):
        write_toy_vhs_questions(corpus.coco_root, tmp_path / "out")
    assert not (tmp_path / "out" / "VHs_qa").exists()
