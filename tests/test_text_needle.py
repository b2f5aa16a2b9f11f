"""The text needle probe (App. K): the builder's spans, the lm-eval task end to end on a tiny model,
the per-head needle mass against the stored per-document masses, and Table 15 by hand."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from lm_eval_helpers import IMAGE_BUDGET

from harness.cli import main as icir_main
from harness.tasks.utils import load_text_needle
from icir_common import IMAGE_PLACEHOLDER, UserInputError
from icir_mcq.needle import NEEDLE, QUESTION, build_text_needle

SAMPLES, IMAGES = 8, 3


def _sources(shared):
    toy = shared / "toy"
    return toy / "coco", [toy / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"]


@pytest.fixture(scope="module")
def needle_folder(shared, tmp_path_factory):
    coco, mmniah = _sources(shared)
    out = tmp_path_factory.mktemp("needle") / "needle"
    build_text_needle(coco, mmniah, out, seed=0, samples=SAMPLES, n_images=IMAGES, max_passage_chars=60)
    return out


def test_records_slice_the_needle_and_the_query_exactly(needle_folder, shared, tmp_path):
    rows = load_text_needle(str(needle_folder))["test"]  # the task's loader (a cache keyed on the files)
    assert len(rows) == SAMPLES
    for row in rows:
        prompt = row["prompt"]
        assert prompt[slice(*row["needle_char_span"])] == row["needle"] == NEEDLE.format(number=row["answer"])
        assert row["needle"] in row["passages"][row["needle_passage"]]
        assert prompt[slice(*row["cattok_char_span"])] == "number" and prompt.endswith(QUESTION)
        assert prompt.count(IMAGE_PLACEHOLDER) == len(row["images"]) == IMAGES == len(row["passages"]) - 1
        assert prompt.count(row["answer"]) == 1  # the number appears only in the needle
    coco, mmniah = _sources(shared)
    again = build_text_needle(coco, mmniah, tmp_path / "again", seed=0, samples=SAMPLES, n_images=IMAGES,
                              max_passage_chars=60).out
    other = build_text_needle(coco, mmniah, tmp_path / "other", seed=1, samples=SAMPLES, n_images=IMAGES,
                              max_passage_chars=60).out
    shard = "needle/test-00000-of-00001.parquet"
    assert (again / shard).read_bytes() == (needle_folder / shard).read_bytes()
    assert (other / shard).read_bytes() != (needle_folder / shard).read_bytes()
    with pytest.raises(UserInputError, match="lower --images"):
        build_text_needle(coco, mmniah, tmp_path / "too_many", n_images=500)
    with pytest.raises(UserInputError, match="--seed must be >= 0"):
        build_text_needle(coco, mmniah, tmp_path / "negative", seed=-1)
    with pytest.raises(UserInputError, match="MM-NIAH file .* not found"):
        build_text_needle(coco, [tmp_path / "absent.jsonl"], tmp_path / "absent")


@pytest.fixture(scope="module")
def needle_run(shared, needle_folder, tmp_path_factory):
    """A copy of the ICIR-MCQ reference run folder, then text_needle into the same output path."""
    out = tmp_path_factory.mktemp("needle_run")
    (ref,) = [p for p in (shared / "ref_mcq").iterdir() if p.is_dir()]
    shutil.copytree(ref, out / ref.name)
    assert icir_main([
        "eval", "--device", "cpu", "--batch_size", "1", "--tasks", "text_needle", "--log_samples",
        "--model_args", f"pretrained={shared / 'model'},image_budget={IMAGE_BUDGET}",
        "--metadata", json.dumps({"text_needle_data": str(needle_folder)}), "--output_path", str(out),
        "--gen_kwargs", "max_gen_toks=4",
    ]) == 0
    return out / ref.name


def _text_grid(run, score):
    data = json.loads((run / "icir_artifacts" / "text_needle" / "text_retrieval.json").read_text())
    return np.array([[data["grids"][score][f"L{l:02d}H{h:02d}"] for h in range(4)] for l in range(4)])  # noqa: E741


def test_needle_mass_grid_is_the_mean_of_the_stored_documents(needle_run):
    from harness.activation_store import SETTINGS_FILE, ActivationStore

    store_dir = needle_run / "activations"
    store = ActivationStore(store_dir, json.loads((store_dir / SETTINGS_FILE).read_text()))
    docs = store.load("text_needle", range(SAMPLES), ["needle_mass", "needle_mass_eq3"])
    for score, name in (("exact", "needle_mass"), ("eq3", "needle_mass_eq3")):
        expected = np.mean([doc.tensors[name].double().numpy() for doc in docs], axis=0)
        assert np.allclose(_text_grid(needle_run, score), expected, atol=1e-12)
        assert (expected > 0).all() and (expected < 1).all()
    ranking = json.loads((needle_run / "icir_artifacts" / "text_needle" / "text_ranking.json").read_text())
    grid = _text_grid(needle_run, ranking["score"])
    order = sorted(range(16), key=lambda i: (-grid.ravel()[i], i))
    assert ranking["ranking"] == [f"L{i // 4:02d}H{i % 4:02d}" for i in order] and ranking["position"] == "last"
    samples = [json.loads(line) for path in needle_run.glob("samples_text_needle_*.jsonl")
               for line in path.read_text().splitlines()]
    assert len(samples) == SAMPLES
    results = json.loads(sorted(needle_run.glob("results_*.json"))[-1].read_text())["results"]["text_needle"]
    hits = [s["target"] in re.findall(r"\d+", s["filtered_resps"][0]) for s in samples]
    assert results["acc,none"] == pytest.approx(np.mean(hits))


def test_table_15_ranks_equal_the_grids(needle_run, capsys):
    assert icir_main(["compare", str(needle_run), "--json"]) == 0
    (table,) = json.loads(capsys.readouterr().out)
    assert table["table"] == 15
    unit = needle_run / "icir_artifacts" / "icir_mcq_n5"
    position = json.loads((unit / "summary.json").read_text())["position"]
    pointer = json.loads((unit / "pointer_r1_eq3.json").read_text())["grids"][position]
    image = np.array([[pointer[f"L{l:02d}H{h:02d}"] for h in range(4)] for l in range(4)])  # noqa: E741
    text = _text_grid(needle_run, "eq3")

    def ranks(grid):
        order = sorted(range(16), key=lambda i: (-grid.ravel()[i], i))
        return {f"L{i // 4:02d}H{i % 4:02d}": r + 1 for r, i in enumerate(order)}, order

    image_rank, image_order = ranks(image)
    text_rank, text_order = ranks(text)
    shown = [row["Head"] for row in table["rows"]]
    tops = [f"L{i // 4:02d}H{i % 4:02d}" for i in image_order[:3] + text_order[:3]]
    assert shown[:len(set(tops))] == list(dict.fromkeys(tops))
    for row in table["rows"]:
        assert row["Image rank"] == image_rank[row["Head"]] and row["Text rank"] == text_rank[row["Head"]]
    both = len(set(image_order[:10]) & set(text_order[:10]))
    assert f"top-10 overlap {both}/10 (chance 6.2)" in table["notes"][0]


def test_refusals(shared, tmp_path, capsys):
    assert icir_main(["eval", "--tasks", "text_needle", "--model_args", f"pretrained={shared / 'model'}",
                      "--output_path", str(tmp_path)]) == 2
    assert "no text_needle dataset folder given" in capsys.readouterr().err
    (ref,) = [p for p in (shared / "ref_mcq").iterdir() if p.is_dir()]
    assert icir_main(["compare", str(ref)]) == 2
    assert "or a run with text_needle (Table 15)" in capsys.readouterr().err
