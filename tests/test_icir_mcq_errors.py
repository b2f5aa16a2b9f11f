"""Each bad input of the build gets a clear error naming the file or record, and OUT is not created."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from icir_common import UserInputError
from icir_mcq.build import build_icir_mcq

SPLITS = ("train2017", "val2017")


def _mmniah(root: Path) -> Path:
    return root / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"


def _jsonl(tmp_path: Path) -> Path:
    """An MM-NIAH file path in its own folder (--out may not lie inside the MM-NIAH file's folder)."""
    (tmp_path / "mmniah").mkdir(exist_ok=True)
    return tmp_path / "mmniah" / "retrieval-image.jsonl"


def _annotations(root: Path, name: str) -> Path:
    return root / "coco" / "annotations" / name


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _fails(root: Path, out: Path, match: str, **options) -> str:
    options = {"samples": 60, "embed_images": False, **options}
    with pytest.raises(UserInputError, match=match) as err:
        build_icir_mcq(root / "coco", options.pop("mmniah", [_mmniah(root)]), out, **options)
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")] == []  # no temp folder left
    return str(err.value)


def test_missing_annotation_file(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy()
    _annotations(root, "captions_val2017.json").unlink()
    message = _fails(root, tmp_path / "out", "missing COCO annotation file")
    assert "captions_val2017.json" in message


def test_annotation_file_that_is_not_json(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy()
    path = _annotations(root, "instances_train2017.json")
    path.write_text(path.read_text()[:5000])
    assert "instances_train2017.json: not valid JSON" in _fails(root, tmp_path / "out", "malformed COCO annotation file")


def test_annotation_file_without_images(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy()
    _edit_json(_annotations(root, "captions_train2017.json"), lambda d: d.pop("images"))
    message = _fails(root, tmp_path / "out", "malformed COCO annotation file")
    assert "captions_train2017.json" in message and "images" in message


def test_annotation_record_without_file_name(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy()
    _edit_json(_annotations(root, "instances_val2017.json"), lambda d: d["images"][3].pop("file_name"))
    message = _fails(root, tmp_path / "out", "malformed COCO annotation file")
    assert "instances_val2017.json" in message and "file_name" in message


def test_caption_of_an_unlisted_image(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy()
    _edit_json(_annotations(root, "captions_val2017.json"),
               lambda d: d["annotations"].append({"id": 99999999, "image_id": 123456789, "caption": "A star."}))
    message = _fails(root, tmp_path / "out", "unknown image")
    assert "captions_val2017.json" in message and "123456789" in message


def test_unknown_category_name(toy_corpus, tmp_path):
    message = _fails(toy_corpus, tmp_path / "out", "unknown category 'zebra'", categories=["star", "zebra"])
    assert "instances_*2017.json" in message and "traffic cone" in message  # lists the known names


def test_requested_category_with_fewer_than_four_captioned_images(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy()
    kept = []

    def keep_three_hourglass_images(data):
        for caption in data["annotations"]:
            if re.search(r"\bhourglass(es)?\b", caption["caption"], re.IGNORECASE):
                if caption["image_id"] not in kept and len(kept) < 3:
                    kept.append(caption["image_id"])
                if caption["image_id"] not in kept:
                    caption["caption"] = "A sand timer."

    for split in SPLITS:
        _edit_json(_annotations(root, f"captions_{split}.json"), keep_three_hourglass_images)
    assert len(kept) == 3
    message = _fails(root, tmp_path / "out", "category 'hourglass' cannot be served for n5",
                     categories=["hourglass", "star"])
    assert "only 3 images have a caption naming it (needs 4" in message


def test_missing_image_file(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy(images=True)
    for image in (root / "coco" / "train2017").iterdir():
        image.unlink()
    message = _fails(root, tmp_path / "out", "missing image file", embed_images=True)
    assert re.search(r"coco/train2017/\d{12}\.jpg", message) and "--no-embed-images" in message


def test_unreadable_image_file(toy_corpus_copy, tmp_path):
    root = toy_corpus_copy(images=True)
    for split in SPLITS:
        for image in (root / "coco" / split).iterdir():
            image.write_bytes(b"not a jpeg")
    message = _fails(root, tmp_path / "out", "unreadable image file", embed_images=True)
    assert re.search(r"coco/(train|val)2017/\d{12}\.jpg", message)


def test_too_few_mmniah_contexts_with_enough_passages(toy_corpus, tmp_path):
    short = _jsonl(tmp_path)
    short.write_text("".join(json.dumps({"id": k, "context": "One.\n<image>\nTwo.\n<image>\nThree.\n<image>\nFour."})
                             + "\n" for k in range(30)))
    message = _fails(toy_corpus, tmp_path / "out", "too few MM-NIAH contexts with 6 usable passages for n5",
                     mmniah=[short])
    assert "none of the 30 contexts has 6 non-empty passages" in message


def test_contexts_whose_passages_all_name_the_category(toy_corpus, tmp_path):
    starry = _jsonl(tmp_path)
    starry.write_text(json.dumps({"id": 0, "context": "\n<image>\n".join(["A star."] * 9)}) + "\n")
    message = _fails(toy_corpus, tmp_path / "out", "category 'star' cannot be served for n5",
                     mmniah=[starry], categories=["star"], passages="category_free")
    assert "no MM-NIAH context has 6 passages that do not name it (passage rule category_free)" in message
    # The paper's rule keeps the passages as they are (§3.2): the same context serves the category.
    build_icir_mcq(toy_corpus / "coco", [starry], tmp_path / "fixed", samples=60, embed_images=False,
                   categories=["star"])


def test_malformed_mmniah_line(toy_corpus, tmp_path):
    bad = _jsonl(tmp_path)
    lines = _mmniah(toy_corpus).read_text().splitlines()
    lines[6] = lines[6][:40]
    bad.write_text("\n".join(lines) + "\n")
    _fails(toy_corpus, tmp_path / "out", re.escape(f"{bad}:7: malformed MM-NIAH record"), mmniah=[bad])
    bad.write_text(json.dumps({"id": "seven", "context": "x"}) + "\n")
    _fails(toy_corpus, tmp_path / "out", "needs an int 'id' and a str 'context'", mmniah=[bad])


def test_missing_mmniah_file(toy_corpus, tmp_path):
    _fails(toy_corpus, tmp_path / "out", "MM-NIAH file .* not found", mmniah=[tmp_path / "mmniah" / "absent.jsonl"])


def test_bad_options(toy_corpus, tmp_path):
    _fails(toy_corpus, tmp_path / "out", "multiple of 20", samples=50)
    _fails(toy_corpus, tmp_path / "out", "unknown config 'n1'", configs=["n1"])
    _fails(toy_corpus, tmp_path / "out", "--max-passage-chars must be at least 1", max_passage_chars=0)
    _fails(toy_corpus, tmp_path / "out", "unknown passage rule 'random': choose fixed or category_free",
           passages="random")
    _fails(toy_corpus, tmp_path / "out", "--seed must be >= 0", seed=-1)


def test_existing_out_is_kept(toy_corpus, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UserInputError, match="already exists; pass --overwrite"):
        build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], out, samples=60, embed_images=False)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_cli_prints_one_line_and_exits_2(toy_corpus_copy, tmp_path, capsys):
    root = toy_corpus_copy()
    _annotations(root, "instances_train2017.json").unlink()
    out = tmp_path / "out"
    code = main(["build-mcq", "--coco", str(root / "coco"), "--mmniah", str(_mmniah(root)), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.startswith("icir build-mcq: error: missing COCO annotation file") and "Traceback" not in err


def test_generator_builder_without_inputs(tmp_path):
    from icir_mcq.builder import IcirMcqBuilder

    builder = IcirMcqBuilder(config_name="n5", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(UserInputError, match=r"needs coco_root=\.\.\. .* and mmniah_files"):
        builder.download_and_prepare()


def test_generator_builder_with_an_unknown_passage_rule(toy_corpus, tmp_path):
    from icir_mcq.builder import IcirMcqBuilder

    builder = IcirMcqBuilder(config_name="n5", coco_root=toy_corpus / "coco", mmniah_files=[_mmniah(toy_corpus)],
                             samples=20, passages="window", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(UserInputError, match="unknown passage rule 'window': choose fixed or category_free"):
        builder.download_and_prepare()
