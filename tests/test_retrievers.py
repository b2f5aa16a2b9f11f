"""icir retrievers (Table 2): tiny random CLIP, SigLIP and a Qwen3-VL embedder against independent
computations from their embeddings, planted embeddings, the template ensemble by hand, the
leaderboard rows, and the refusals before any model loads."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from harness.cli import main as icir_main
from harness.retrievers.encoders import Retriever, RetrieverSpec, load_retriever
from harness.retrievers.run import HaystackDoc, retriever_picks
from harness.retrievers.score import recall_at_1
from harness.tiny_models.retrievers import save_tiny_retriever
from icir_common import UserInputError


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrievers")
    return {kind: save_tiny_retriever(kind, root / kind) for kind in ("clip", "siglip")}


def _images(n, seed=0):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (24 + 4 * i, 40, 3), dtype=np.uint8)) for i in range(n)]


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_two_template_ensemble_equals_the_hand_computed_mean(folders, kind):
    retriever = load_retriever(RetrieverSpec(kind, str(folders[kind])))
    retriever.templates = (lambda c: f"a photo of a {c}.", lambda c: f"a drawing of the {c}.")
    model, tokenizer = retriever.model, retriever.processor.tokenizer
    padding = {"padding": "max_length", "max_length": 64} if kind == "siglip" else {}
    embeddings = []
    for prompt in ("a photo of a traffic light.", "a drawing of the traffic light."):
        ids = tokenizer([prompt], return_tensors="pt", **padding).input_ids  # alone: no padding for CLIP
        if kind == "clip":
            assert ids[0, -1] == tokenizer.eos_token_id  # CLIP pools at the end-of-text token
        with torch.no_grad():
            embeddings.append(model.get_text_features(input_ids=ids).pooler_output[0].double().numpy())
    expected = _unit(np.mean(_unit(np.stack(embeddings)), axis=0))
    assert np.allclose(retriever.query("traffic light").double().numpy(), expected, atol=1e-6)
    assert retriever.settings()["n_templates"] == 2


def test_the_default_ensemble_has_the_80_openai_templates(folders):
    retriever = load_retriever(RetrieverSpec("clip", str(folders["clip"])))
    assert len(retriever.templates) == 80 and retriever.templates[0]("dog") == "a bad photo of a dog."


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_picks_and_r1_equal_an_independent_cosine_argmax(folders, kind):
    retriever = load_retriever(RetrieverSpec(kind, str(folders[kind])), batch_size=3)
    docs = [HaystackDoc(i, anchor, _images(5, seed=i), target=i % 5)
            for i, anchor in enumerate(["dog", "traffic light", "cup", "dog"])]
    picks = retriever_picks(retriever, docs, kind)
    model, processor = retriever.model, retriever.processor
    expected = []
    for doc in docs:
        with torch.no_grad():
            pixels = processor(images=doc.images, return_tensors="pt")["pixel_values"]
            images = _unit(model.get_image_features(pixel_values=pixels).pooler_output.double().numpy())
        query = retriever.query(doc.anchor).double().numpy()
        expected.append(int(np.argmax(images @ query)))
    assert picks == expected
    assert recall_at_1(picks, [d.target for d in docs]) == sum(p == d.target for p, d in zip(picks, docs)) / 4


class Planted(Retriever):
    """Images embed as one-hot vectors of their red channel's level; the query of anchor c as one-hot c."""

    def __init__(self):
        super().__init__(RetrieverSpec("clip", "planted"), "cpu", batch_size=2)

    def _embed_images(self, images):
        return torch.stack([torch.nn.functional.one_hot(torch.tensor(int(np.asarray(im)[0, 0, 0]) // 50), 6).float()
                            for im in images])

    def _embed_query(self, anchor):
        return torch.nn.functional.one_hot(torch.tensor(int(anchor)), 6).float()


def test_planted_embeddings_score_one():
    docs = []
    for doc_id in range(6):
        levels = [(doc_id + j) % 6 for j in range(4)]
        images = [Image.new("RGB", (8, 8), (50 * level, 0, 0)) for level in levels]
        docs.append(HaystackDoc(doc_id, str(levels[2]), images, target=2))
    picks = retriever_picks(Planted(), docs, "planted")
    assert picks == [2] * 6 and recall_at_1(picks, [2] * 6) == 1.0


@pytest.fixture(scope="module")
def vhs_run(shared):
    (run,) = [p for p in (shared / "ref_vhs").iterdir() if p.is_dir()]
    return run


def _args(shared, run, *retrievers, tasks="vhs_single_n5"):
    return ["retrievers", str(run), *[f"--retriever={r}" for r in retrievers], "--tasks", tasks,
            "--metadata", json.dumps({"vhs_data": str(shared / "vhs")})]


def test_command_on_the_runs_documents_and_the_leaderboard_rows(shared, vhs_run, folders, tmp_path, capsys):
    out, board = tmp_path / "out", tmp_path / "board"
    assert icir_main(_args(shared, vhs_run, f"clip={folders['clip']}", f"siglip={folders['siglip']}",
                           f"qwen3vl-embedding={shared / 'model'}")
                     + ["--output_path", str(out), "--leaderboard", str(board)]) == 0
    printed = capsys.readouterr().out
    assert "Table 2" in printed and "| vhs_single_n5 |" in printed
    record = json.loads((out / "retrievers.json").read_text())
    task = record["tasks"]["vhs_single_n5"]
    docs = [json.loads(line) for line in
            (vhs_run / "icir_artifacts" / "vhs_single_n5" / "documents.jsonl").read_text().splitlines()]
    assert task["doc_ids"] == [d["doc_id"] for d in docs] and task["targets"] == [d["target_image"] for d in docs]
    summary = json.loads((vhs_run / "icir_artifacts" / "vhs_single_n5" / "summary.json").read_text())
    assert record["runs"][0]["tasks"]["vhs_single_n5"]["r1"] == summary["pointer_r1"] == summary["pointer_r1_eq3"]
    for retriever in record["retrievers"]:
        scored = retriever["tasks"]["vhs_single_n5"]
        assert len(scored["picks"]) == len(docs)
        assert scored["r1"] == np.mean([p == t for p, t in zip(scored["picks"], task["targets"])])
        assert f"| {scored['r1']:.3f} |" in printed or f" {scored['r1']:.3f} |" in printed
    assert [r["kind"] for r in record["retrievers"]] == ["clip", "siglip", "qwen3vl-embedding"]

    from harness.leaderboard.retrievers import retriever_rows

    rows = retriever_rows(board)
    assert sorted(r["kind"] for r in rows) == ["clip", "qwen3vl-embedding", "siglip"]
    assert all(r["fingerprint"] == task["fingerprint"] for r in rows)
    tampered = board / "retrievers" / sorted(p.name for p in (board / "retrievers").iterdir())[0]
    data = json.loads(tampered.read_text())
    data["tasks"]["vhs_single_n5"]["picks"] = [t for t in task["targets"]]  # claims every haystack right
    tampered.write_text(json.dumps(data))
    with pytest.raises(UserInputError, match="is not what its picks give"):
        retriever_rows(board)


def test_refusals_before_any_model_loads(shared, vhs_run, folders, tmp_path, capsys, monkeypatch):
    import harness.retrievers.encoders as encoders

    def no_load(*args, **kwargs):
        raise AssertionError("a retriever was loaded")

    monkeypatch.setattr(encoders, "load_retriever", no_load)
    cases = [
        (_args(shared, vhs_run, f"siglip={folders['clip']}"), "is a 'clip' model, not a siglip retriever"),
        (_args(shared, vhs_run, f"clip={shared / 'model'}"), "is a 'qwen3_vl' model, not a clip retriever"),
        (_args(shared, vhs_run, f"clip={tmp_path}"), "no config.json in that folder"),
        (_args(shared, vhs_run, f"bert={folders['clip']}"), "unknown kind 'bert'"),
        (_args(shared, vhs_run, f"clip={folders['clip']}", tasks="vhs_single_n10"), "has no icir_artifacts/vhs_single_n10"),
        (_args(shared, vhs_run, f"clip={folders['clip']}", tasks="icir_mcq_n5"), "single-needle VHs tasks"),
        (_args(shared, shared / "ref_mcq", f"clip={folders['clip']}"), "has no icir_artifacts/vhs_single_n5"),
    ]
    for args, message in cases:
        assert icir_main(args) == 2, args
        assert message in capsys.readouterr().err
    # Another VHs folder (other haystacks) than the run's: refused by the dataset fingerprint.
    other = tmp_path / "vhs"
    shutil.copytree(shared / "vhs", other)
    from vhs_adapter.build import build_vhs

    build_vhs(shared / "vhs_qa", shared / "toy" / "coco", other, sizes=[5], seed=7, overwrite=True)
    args = _args(shared, vhs_run, f"clip={folders['clip']}")
    args[args.index("--metadata") + 1] = json.dumps({"vhs_data": str(other)})
    assert icir_main(args) == 2
    assert "not the ones the runs evaluated" in capsys.readouterr().err


def test_runs_of_different_documents_are_refused(shared, vhs_run, folders, tmp_path, capsys):
    other = tmp_path / "other_run"
    shutil.copytree(vhs_run, other)
    documents = other / "icir_artifacts" / "vhs_single_n5" / "documents.jsonl"
    documents.write_text("\n".join(documents.read_text().splitlines()[:-1]) + "\n")
    assert icir_main(_args(shared, vhs_run, f"clip={folders['clip']}")[:2] + [str(other)]
                     + _args(shared, vhs_run, f"clip={folders['clip']}")[2:]) == 2
    assert "evaluated different documents" in capsys.readouterr().err
