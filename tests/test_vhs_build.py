"""The VHs dataset folder built from the toy VHs files: every size, seeded haystacks, spans,
``load_dataset``, the CLI, and bad inputs that must leave nothing behind."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from pycocotools.coco import COCO

from icir_common import UserInputError
from vhs_adapter.build import build_vhs
from vhs_adapter.cli import register
from vhs_adapter.toy_questions import write_toy_vhs_questions

SIZES = (1, 2, 3, 5, 10, 20, 50, 100)
PER_SIZE = 6
FIELDS = [
    "id", "source_index", "n_images", "images", "image_files", "needle_positions", "question", "answer",
    "anchor", "target", "anchor_char_span", "target_char_span", "cattok_char_span", "ablation_start_char", "prompt",
]
CONFIGS = [f"single_needle_n{n}" for n in SIZES] + [f"multi_needle_n{n}" for n in SIZES if n >= 5]
PREFIX = "You are given a set of images. Please answer the following question in Yes or No: "
QUESTION = re.compile(r"For (?:the image|all images) with an? (.+), (?:is there|do (?:all|any) of them contain) an? (.+)\?")


@pytest.fixture(scope="module")
def vhs_qa(toy_coco_root, tmp_path_factory) -> Path:
    return write_toy_vhs_questions(toy_coco_root, tmp_path_factory.mktemp("vhs"), sizes=SIZES, per_size=PER_SIZE).root


@pytest.fixture(scope="module")
def built(vhs_qa, toy_coco_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("built") / "vhs"
    return out, build_vhs(vhs_qa, toy_coco_root, out)


def _rows(out: Path, config: str) -> list[dict]:
    return pq.read_table(out / config / "test-00000-of-00001.parquet").to_pylist()


def _source_entries(vhs_qa: Path, config: str) -> list[dict]:
    kind, size = config.rsplit("_n", 1)
    name = f"visual_haystack_{'oracle' if size == '1' else size}.json"
    folder = vhs_qa / "single_needle" / "VHs_large" if kind == "single_needle" else vhs_qa / "multi_needle"
    return json.loads((folder / name).read_text())


def test_every_size_is_built(built):
    out, summary = built
    assert summary.rows == {config: PER_SIZE for config in CONFIGS}
    assert summary.skipped == {config: 0 for config in CONFIGS}
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(CONFIGS)


def test_haystacks_hold_the_source_images_with_needles_at_the_recorded_positions(built, vhs_qa, toy_coco_root):
    out, _ = built
    for config in CONFIGS:
        size = int(config.rsplit("_n", 1)[1])
        entries = _source_entries(vhs_qa, config)
        for row in _rows(out, config):
            source = entries[row["source_index"]]
            assert row["n_images"] == len(row["images"]) == len(row["image_files"]) == size
            needles = [row["image_files"][p] for p in row["needle_positions"]]
            assert sorted(needles) == sorted(source["pos_image"])
            fillers = [f for i, f in enumerate(row["image_files"]) if i not in row["needle_positions"]]
            assert sorted(fillers) == sorted(source["neg_image"])
            for image, relative in zip(row["images"], row["image_files"]):
                assert image["bytes"] == (toy_coco_root / relative).read_bytes()
            assert (row["question"], row["answer"]) == tuple(turn["value"] for turn in source["conversations"])
            assert row["id"] == f"{config}-{row['source_index']:05d}"


def test_anchor_only_in_needles_and_target_presence_decides_the_answer(built, toy_coco_root):
    categories = {}
    for split in ("train2017", "val2017"):
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO(str(toy_coco_root / "annotations" / f"instances_{split}.json"))
        for image_id, image in coco.imgs.items():
            categories[f"{split}/{image['file_name']}"] = {coco.cats[a["category_id"]]["name"] for a in coco.imgToAnns[image_id]}
    out, _ = built
    for config in CONFIGS:
        for row in _rows(out, config):
            for position, relative in enumerate(row["image_files"]):
                assert (row["anchor"] in categories[relative]) == (position in row["needle_positions"]), row["id"]
            holding = [row["target"] in categories[row["image_files"][p]] for p in row["needle_positions"]]
            expected = any(holding) if " do any of them " in row["question"] else all(holding)
            assert row["answer"] == ("yes" if expected else "no"), row["id"]
            assert len(holding) in ((1,) if config.startswith("single") else (2, 3))


def test_spans_slice_the_prompt_to_the_anchor_and_target(built):
    out, _ = built
    for config in CONFIGS:
        for row in _rows(out, config):
            prompt, question = row["prompt"], row["question"]
            assert prompt == "<image>" * row["n_images"] + "\n" + PREFIX + question
            anchor, target = QUESTION.fullmatch(question).groups()
            assert (row["anchor"], row["target"]) == (anchor, target)
            assert prompt[slice(*row["anchor_char_span"])] == anchor
            assert prompt[slice(*row["target_char_span"])] == target
            assert prompt[slice(*row["cattok_char_span"])] == anchor.split()[-1]
            assert row["cattok_char_span"][1] == row["anchor_char_span"][1]
            assert row["ablation_start_char"] == row["anchor_char_span"][0] == prompt.index(f" {anchor},") + 1


def test_seed_42_twice_is_byte_identical_and_another_seed_differs(built, vhs_qa, toy_coco_root, tmp_path):
    out, _ = built
    again = tmp_path / "again"
    other = tmp_path / "other"
    build_vhs(vhs_qa, toy_coco_root, again, seed=42)
    build_vhs(vhs_qa, toy_coco_root, other, seed=7)
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all((out / f).read_bytes() == (again / f).read_bytes() for f in files)
    for config in CONFIGS[1:]:  # N >= 2: an order to differ
        first = [row["image_files"] for row in _rows(out, config)]
        assert first != [row["image_files"] for row in _rows(other, config)], config


def test_load_dataset_returns_records_with_every_field(built, tmp_path):
    out, _ = built
    dataset = datasets.load_dataset(str(out), "single_needle_n10", split="test", cache_dir=str(tmp_path / "cache"))
    assert dataset.column_names == FIELDS
    assert len(dataset) == PER_SIZE
    row = dataset[0]
    assert len(row["images"]) == 10 and all(image.size == (64, 64) for image in row["images"])
    assert row["prompt"][slice(*row["cattok_char_span"])] == row["anchor"].split()[-1]
    assert row["answer"] in ("yes", "no")


def test_small_subset_builds_its_own_single_needle_files(vhs_qa, toy_coco_root, tmp_path):
    summary = build_vhs(vhs_qa, toy_coco_root, tmp_path / "small", sizes=[1, 20], subset="VHs_small")
    small = 2 * max(1, PER_SIZE // 4)  # balanced: as many yes as no questions
    assert summary.rows == {"single_needle_n1": small, "single_needle_n20": small, "multi_needle_n20": PER_SIZE}


def test_limit_sizes_and_paths_only(built, vhs_qa, toy_coco_root, tmp_path):
    out, _ = built
    summary = build_vhs(vhs_qa, toy_coco_root, tmp_path / "small", sizes=[1, 5], limit=3, embed_images=False)
    assert summary.rows == {"single_needle_n1": 3, "single_needle_n5": 3, "multi_needle_n5": 3}
    for config in summary.rows:
        rows = _rows(tmp_path / "small", config)
        assert [row["images"] for row in rows] == [row["image_files"] for row in rows]
        # a haystack does not depend on which other entries are built
        full = _rows(out, config)[:3]
        assert [(r["image_files"], r["needle_positions"]) for r in rows] == [
            (r["image_files"], r["needle_positions"]) for r in full
        ]


def _run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="icir")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_builds_and_reports_user_errors(vhs_qa, toy_coco_root, tmp_path, capsys):
    args = ["build-vhs", "--vhs", str(vhs_qa.parent), "--coco", str(toy_coco_root)]
    assert _run_cli([*args, "--out", str(tmp_path / "ok"), "--sizes", "oracle,10", "--limit", "2", "--seed", "42"]) == 0
    assert re.search(r"single_needle_n1 +2 rows", capsys.readouterr().out)
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == [
        ".icir-build.json", "README.md", "multi_needle_n10", "single_needle_n1", "single_needle_n10"
    ]
    with pytest.raises(UserInputError, match="haystack size 7: size file absent"):
        _run_cli([*args, "--out", str(tmp_path / "bad"), "--sizes", "1", "7"])
    assert not (tmp_path / "bad").exists()
    with pytest.raises(SystemExit):
        _run_cli([*args, "--out", str(tmp_path / "bad"), "--sizes", "ten"])


def _set(path: Path, index: int, key: str, value) -> None:
    entries = json.loads(path.read_text())
    if value is None:
        del entries[index][key]
    else:
        entries[index][key] = value
    path.write_text(json.dumps(entries))


def _truncate(path: Path) -> None:
    path.write_text(path.read_text()[:-20])


ORACLE = "single_needle/VHs_large/visual_haystack_oracle.json"
MULTI_100 = "multi_needle/visual_haystack_100.json"
BAD_INPUTS = {
    # the missing image is in the last config, so earlier configs were written before the failure
    "missing image": (
        MULTI_100, lambda p: _set(p, 2, "neg_image", ["train2017/999999999999.jpg"] + json.loads(p.read_text())[2]["neg_image"][1:]),
        None, r"visual_haystack_100\.json: entry 2: image train2017/999999999999\.jpg not found under COCO root",
    ),
    "no pos_image": (ORACLE, lambda p: _set(p, 1, "pos_image", None), None, r"visual_haystack_oracle\.json: entry 1: no pos_image"),
    "empty pos_image": (ORACLE, lambda p: _set(p, 3, "pos_image", []), None, r"visual_haystack_oracle\.json: entry 3: no pos_image"),
    "malformed JSON": (ORACLE, _truncate, None, r"visual_haystack_oracle\.json: malformed JSON"),
    "bad answer": (
        ORACLE, lambda p: _set(p, 0, "conversations", [{"from": "human", "value": "For the image with a cup, is there a fork?"}, {"from": "gpt", "value": "maybe"}]),
        None, r"visual_haystack_oracle\.json: entry 0: the answer turn must be 'yes' or 'no'",
    ),
    "unparsable question": (
        ORACLE, lambda p: _set(p, 4, "conversations", [{"from": "human", "value": "Is there a cup?"}, {"from": "gpt", "value": "yes"}]),
        None, r"visual_haystack_oracle\.json: entry 4: question 'Is there a cup\?' matches no VHs template",
    ),
    "size file absent": (ORACLE, lambda p: None, [7], r"haystack size 7: size file absent \(expected .*visual_haystack_7\.json"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_a_clear_error_and_leaves_nothing(case, vhs_qa, toy_coco_root, tmp_path):
    relative, mutate, sizes, message = BAD_INPUTS[case]
    copy = tmp_path / "VHs_qa"
    shutil.copytree(vhs_qa, copy)
    mutate(copy / relative)
    out = tmp_path / "out"
    with pytest.raises(UserInputError, match=message):
        build_vhs(copy, toy_coco_root, out, sizes=sizes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["VHs_qa"]


def test_unreadable_embedded_image_is_a_clear_error(vhs_qa, toy_coco_root, tmp_path):
    coco = tmp_path / "coco"
    shutil.copytree(toy_coco_root, coco)
    needle = _source_entries(vhs_qa, "single_needle_n1")[0]["pos_image"][0]
    (coco / needle).write_bytes(b"not a jpeg")
    with pytest.raises(UserInputError, match=rf"unreadable image file .*{re.escape(needle)}"):
        build_vhs(vhs_qa, coco, tmp_path / "out", sizes=[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coco"]
    paths_only = build_vhs(vhs_qa, coco, tmp_path / "paths", sizes=[1], embed_images=False)
    assert paths_only.rows == {"single_needle_n1": PER_SIZE}


def test_skip_unparsable_counts_the_skipped_entries(vhs_qa, toy_coco_root, tmp_path):
    copy = tmp_path / "VHs_qa"
    shutil.copytree(vhs_qa, copy)
    _set(copy / ORACLE, 4, "conversations", [{"from": "human", "value": "Is there a cup?"}, {"from": "gpt", "value": "yes"}])
    summary = build_vhs(copy, toy_coco_root, tmp_path / "out", sizes=[1], skip_unparsable=True)
    assert summary.rows == {"single_needle_n1": PER_SIZE - 1} and summary.skipped == {"single_needle_n1": 1}
    assert [row["source_index"] for row in _rows(tmp_path / "out", "single_needle_n1")] == [0, 1, 2, 3, 5]
