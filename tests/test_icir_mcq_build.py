"""Building ICIR-MCQ from the toy corpus: balance, provenance checked against the raw JSON,
loadability with load_dataset, determinism, and the GeneratorBasedBuilder twin."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
from PIL import Image

from harness.cli import main
from icir_common import UserInputError
from icir_mcq.build import build_icir_mcq
from icir_mcq.builder import IcirMcqBuilder
from icir_mcq.hub_folder import config_data_path
from icir_mcq.toy import CATEGORIES, write_toy_corpus
from icir_mcq.validate import validate_icir_mcq

FIELDS = ["id", "n_choices", "images", "image_ids", "image_files", "passages", "category", "category_id", "options",
          "answer", "answer_index", "target_position", "target_image_id", "option_image_ids", "prompt",
          "cattok_char_span", "mmniah_source_id", "probe_split"]
SPLITS = ("train2017", "val2017")


def _rows(folder: Path, config: str) -> list[dict]:
    return pq.read_table(folder / config_data_path(config)).to_pylist()


def _mmniah(root: Path) -> Path:
    return root / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"


@pytest.fixture(scope="module")
def full_build(tmp_path_factory) -> tuple[Path, Path]:
    """A 2,000-image annotations-only toy corpus and the full 3,000-per-config build from it."""
    work = tmp_path_factory.mktemp("full")
    corpus = write_toy_corpus(work / "toy", 2000, seed=5, image_files=False)
    out = work / "icir_mcq"
    build_icir_mcq(corpus.coco_root, [corpus.mmniah_file], out, seed=0, samples=3000, embed_images=False)
    return corpus.root, out


@pytest.mark.slow
def test_full_build_is_exactly_balanced_and_valid(full_build):
    _, out = full_build
    for config, n in (("n5", 5), ("n6", 6)):
        rows = _rows(out, config)
        assert len(rows) == 3000
        assert Counter(r["target_position"] for r in rows) == {p: 3000 // n for p in range(n)}
        assert Counter(r["answer"] for r in rows) == {letter: 750 for letter in "ABCD"}
        assert Counter(r["probe_split"] for r in rows) == {"eval": 600, "train": 2400}
        assert len({r["id"] for r in rows}) == 3000
    assert validate_icir_mcq(out) == []


@pytest.mark.slow
def test_full_build_loads_with_load_dataset(full_build):
    _, out = full_build
    for config, n in (("n5", 5), ("n6", 6)):
        ds = datasets.load_dataset(str(out), config, split="test")
        assert ds.num_rows == 3000 and ds.column_names == FIELDS
        row = ds[17]
        assert row["n_choices"] == n and len(row["images"]) == n and len(row["passages"]) == n + 1
        assert [image["path"] for image in row["images"]] == row["image_files"]
        assert all(image["bytes"] is None for image in row["images"])
        assert row["answer"] == "ABCD"[row["answer_index"]] and len(row["options"]) == 4
        assert row["image_ids"][row["target_position"]] == row["target_image_id"]


def _raw_world(root: Path):
    """Annotations, captions and MM-NIAH passages read with plain json (independent of icir_mcq)."""
    categories_of, captions_of, files = defaultdict(set), defaultdict(set), {}
    for split in SPLITS:
        instances = json.loads((root / "coco" / "annotations" / f"instances_{split}.json").read_text())
        for image in instances["images"]:
            files[image["id"]] = f"{split}/{image['file_name']}"
        for a in instances["annotations"]:
            categories_of[a["image_id"]].add(a["category_id"])
        for c in json.loads((root / "coco" / "annotations" / f"captions_{split}.json").read_text())["annotations"]:
            captions_of[c["image_id"]].add(c["caption"])
    contexts = {}
    for line in _mmniah(root).read_text().splitlines():
        record = json.loads(line)
        contexts[f"mm_niah_val:{record['id']}"] = [s.strip() for s in record["context"].split("<image>") if s.strip()]
    return categories_of, captions_of, files, contexts


@pytest.mark.slow
def test_records_agree_with_the_raw_files(full_build):
    root, out = full_build
    categories_of, captions_of, files, contexts = _raw_world(root)
    words = {c.id: re.compile(rf"\b(?:{c.name}|{c.plural})\b", re.IGNORECASE) for c in CATEGORIES}
    naming = 0
    for config, n in (("n5", 5), ("n6", 6)):
        for r in _rows(out, config):
            cid, prompt = r["category_id"], r["prompt"]
            assert [cid in categories_of[i] for i in r["image_ids"]] == [i == r["target_position"] for i in range(n)]
            assert all(categories_of[i] for i in r["image_ids"])  # distractors are annotated images
            assert r["image_files"] == [files[i] for i in r["image_ids"]]
            assert r["option_image_ids"][r["answer_index"]] == r["target_image_id"]
            for option, image_id in zip(r["options"], r["option_image_ids"]):
                assert option in captions_of[image_id] and cid in categories_of[image_id]
                assert words[cid].search(option)
            assert not (set(r["option_image_ids"]) - {r["target_image_id"]}) & set(r["image_ids"])
            assert len({o.lower().rstrip(".") for o in r["options"]}) == 4
            # Passage rule fixed (§3.2): the context's first N+1 passages as they are, whatever the category.
            assert r["passages"] == contexts[r["mmniah_source_id"]][: n + 1]
            naming += any(words[cid].search(p) for p in r["passages"])
            assert prompt.count("<image>") == n and prompt.startswith(r["passages"][0] + "\n<image>\n")
            start, end = r["cattok_char_span"]
            assert words[cid].fullmatch(prompt[start:end])
            assert start > prompt.rindex("\nD) ") and not words[cid].search(prompt, end)
            assert prompt.endswith("\nD) " + r["options"][3])
    assert naming > 0  # no passage was dropped for naming the category (the toy documents' shape words)
    assert json.loads((out / "build_info.json").read_text())["passages"] == "fixed"
    assert "first N+1 passages of one MM-NIAH context" in (out / "README.md").read_text()


def test_category_free_passages_are_a_named_recorded_option(toy_corpus, tmp_path, capsys):
    """``--passages category_free``: a seeded run of N+1 passages of the context, none naming the category,
    recorded in build_info.json and the card (checked against the raw JSON)."""
    root, out = toy_corpus, tmp_path / "icir"
    assert main(["build-mcq", "--coco", str(root / "coco"), "--mmniah", str(_mmniah(root)), "--out", str(out),
                 "--samples", "60", "--no-embed-images", "--passages", "category_free"]) == 0
    categories_of, _, _, contexts = _raw_world(root)
    words = {c.id: re.compile(rf"\b(?:{c.name}|{c.plural})\b", re.IGNORECASE) for c in CATEGORIES}
    windows = set()
    for config, n in (("n5", 5), ("n6", 6)):
        for r in _rows(out, config):
            source = contexts[r["mmniah_source_id"]]
            indices = [source.index(p) for p in r["passages"]]
            assert len(indices) == n + 1 and indices == sorted(set(indices))
            assert not any(words[r["category_id"]].search(p) for p in r["passages"])
            windows.add(indices[0])
    assert windows != {0}  # seeded starts, not the context's opening
    assert json.loads((out / "build_info.json").read_text())["passages"] == "category_free"
    card = (out / "README.md").read_text()
    assert "passage rule `category_free`" in card and "do not name the category" in card
    capsys.readouterr()
    assert main(["validate-mcq", str(out)]) == 0
    with pytest.raises(UserInputError, match="unknown passage rule 'window': choose fixed or category_free"):
        build_icir_mcq(root / "coco", [_mmniah(root)], tmp_path / "bad", samples=60, passages="window")
    assert not (tmp_path / "bad").exists()


def test_embedded_images_decode_to_the_coco_files(toy_corpus, tmp_path):
    out = tmp_path / "icir"
    summary = build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], out, samples=60)
    assert summary.rows == {"n5": 60, "n6": 60} and summary.eval_rows == {"n5": 12, "n6": 12}
    ds = datasets.load_dataset(str(out), "n6", split="test")
    row = ds[0]
    assert all(isinstance(image, Image.Image) and image.size == (64, 64) for image in row["images"])
    raw = ds.cast_column("images", datasets.List(datasets.Image(decode=False)))[0]["images"]
    assert [image["bytes"] for image in raw] == [(toy_corpus / "coco" / f).read_bytes() for f in row["image_files"]]
    card = (out / "README.md").read_text()
    assert "license: cc-by-4.0" in card and "arXiv:2611.04903" in card and "config_name: n6" in card


def test_same_seed_gives_identical_parquet_and_another_seed_differs(toy_corpus, tmp_path):
    def build(name: str, seed: int, embed: bool) -> Path:
        build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], tmp_path / name, seed=seed, samples=60,
                       embed_images=embed)
        return tmp_path / name

    for embed in (False, True):
        first, second, other = build(f"a{embed}", 0, embed), build(f"b{embed}", 0, embed), build(f"c{embed}", 1, embed)
        for config in ("n5", "n6"):
            data = (first / config_data_path(config)).read_bytes()
            assert data == (second / config_data_path(config)).read_bytes()
            assert data != (other / config_data_path(config)).read_bytes()
        assert (first / "README.md").read_bytes() == (second / "README.md").read_bytes()


def test_a_config_does_not_depend_on_the_others_built_with_it(toy_corpus, tmp_path):
    mmniah = [_mmniah(toy_corpus)]
    build_icir_mcq(toy_corpus / "coco", mmniah, tmp_path / "both", samples=60, embed_images=False)
    build_icir_mcq(toy_corpus / "coco", mmniah, tmp_path / "n6", configs=["n6"], samples=60, embed_images=False)
    assert _rows(tmp_path / "both", "n6") == _rows(tmp_path / "n6", "n6")
    assert not (tmp_path / "n6" / "n5").exists()


@pytest.mark.parametrize("passages", ["fixed", "category_free"])
def test_generator_based_builder_yields_the_folder_records(toy_corpus, tmp_path, passages):
    build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], tmp_path / "folder", samples=24, configs=["n6"],
                   seed=3, passages=passages)
    builder = IcirMcqBuilder(config_name="n6", coco_root=toy_corpus / "coco", mmniah_files=[_mmniah(toy_corpus)],
                             samples=24, seed=3, passages=passages, cache_dir=str(tmp_path / "cache"))
    builder.download_and_prepare()
    generated = builder.as_dataset(split="test")
    assert generated.column_names == FIELDS
    assert isinstance(generated[0]["images"][0], Image.Image)
    # A cache of its own: datasets keys a local folder's cache by its name, not its contents.
    folder = datasets.load_dataset(str(tmp_path / "folder"), "n6", split="test", cache_dir=str(tmp_path / "loaded"))
    assert generated.remove_columns("images").to_list() == folder.remove_columns("images").to_list()


def test_max_passage_chars_and_category_restriction(toy_corpus, tmp_path):
    out = tmp_path / "short"
    build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], out, samples=60, embed_images=False,
                   max_passage_chars=60, categories=["star", "Traffic Cone"])
    for config in ("n5", "n6"):
        rows = _rows(out, config)
        assert {r["category"] for r in rows} == {"star", "traffic cone"}
        assert max(len(p) for r in rows for p in r["passages"]) <= 60
        assert any(len(p) > 40 for r in rows for p in r["passages"])
    info = json.loads((out / "build_info.json").read_text())
    assert info["max_passage_chars"] == 60 and [r["name"] for r in info["category_report"]["n5"]] == [
        "star", "traffic cone"]


def test_uncaptioned_category_is_skipped_with_a_report(toy_corpus_copy, tmp_path, capsys):
    root = toy_corpus_copy()
    for split in SPLITS:  # captions never call a heart "heart": like "hair drier" on real COCO
        path = root / "coco" / "annotations" / f"captions_{split}.json"
        data = json.loads(path.read_text())
        for c in data["annotations"]:
            c["caption"] = re.sub(r"\bhearts?\b", "love symbol", c["caption"])
        path.write_text(json.dumps(data))
    out = tmp_path / "icir"
    code = main(["build-mcq", "--coco", str(root / "coco"), "--mmniah", str(_mmniah(root)), "--out", str(out),
                 "--samples", "60", "--no-embed-images"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "skipped 'heart'" in printed and "only 0 images have a caption naming it" in printed
    assert "n5: 60 samples (12 eval), 16 categories" in printed
    assert "heart" not in {r["category"] for r in _rows(out, "n5")}
    report = {r["name"]: r for r in json.loads((out / "build_info.json").read_text())["category_report"]["n6"]}
    assert report["heart"]["captioned_images"] == 0 and report["heart"]["skipped_because"]
    assert report["star"]["samples"] > 0 and report["star"]["skipped_because"] is None
    assert "| heart | 16 |" in (out / "README.md").read_text()
    assert main(["validate-mcq", str(out)]) == 0
    assert "0 violation(s)" in capsys.readouterr().out


def test_the_default_folder_is_the_name_load_dataset_reads(toy_corpus, tmp_path, monkeypatch):
    """``icir build-mcq`` without --out writes ``icir-mcq/``; its card's first config is the default,
    so ``load_dataset("icir-mcq")`` (no config name) loads it from the folder it was built in."""
    from datasets import load_dataset

    monkeypatch.chdir(tmp_path)
    assert main(["build-mcq", "--coco", str(toy_corpus / "coco"), "--mmniah", str(_mmniah(toy_corpus)),
                 "--samples", "60", "--no-embed-images"]) == 0
    assert (tmp_path / "icir-mcq" / "README.md").is_file()
    dataset = load_dataset("icir-mcq", split="test", cache_dir=str(tmp_path / "cache"))
    assert len(dataset) == len(_rows(tmp_path / "icir-mcq", "n5"))  # the default config: n5
