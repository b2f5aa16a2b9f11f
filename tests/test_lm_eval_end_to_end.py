"""`icir eval` end to end on a tiny Qwen3-VL: every table metric recomputed from `capture_heads`.

The reference runs (tests/lm_eval_helpers.py) evaluate ``icir_mcq_n5`` (first 19 documents) and
``vhs_single_n5`` (with the ICIR-MCQ run's pointer ranking and writer probes). Here each document
is captured again directly with `harness.capture.capture_heads` on the same checkpoint, and the
metrics are recomputed by brute force (numpy argmax, hand-counted majority votes, probes applied
by hand from the saved tensors) and compared with lm-eval's results and the artifacts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats
import torch
import torch.nn.functional as F
import transformers
from datasets import load_dataset
from lm_eval_helpers import IMAGE_BUDGET, LIMIT, MAX_GEN_TOKS, artifacts_of, results_of
from safetensors.torch import load_file

from harness.capture import capture_heads
from harness.capture.spans import conversation, split_prompt
from harness.metrics.candidates import InContextCandidates
from harness.metrics.writer import WriterProbeConfig, fit_writer_probes
from vhs_adapter.scoring import is_compliant, is_correct

KS = (1, 3, 5, 10, 20, 30)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(shared):
    """The reference checkpoint loaded independently of lm-eval, with the same per-image budget."""
    model = transformers.AutoModelForImageTextToText.from_pretrained(shared / "model").eval()
    processor = transformers.AutoProcessor.from_pretrained(shared / "model")
    pixels = IMAGE_BUDGET * IMAGE_BUDGET
    processor.image_processor.size = {"shortest_edge": pixels, "longest_edge": pixels}
    return model, processor


def _grid(votes: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return (votes == targets[:, None, None]).mean(axis=0)


def _majority_curve(votes: np.ndarray, targets: np.ndarray, ranking: np.ndarray) -> dict[int, float]:
    """Top-K majority vote by counting, ties to the smallest image index (App. H)."""
    flat = votes.reshape(len(votes), -1)
    curve = {}
    for k in KS:
        top = ranking[: min(k, ranking.size)]
        predictions = [np.bincount(row[top]).argmax() for row in flat]
        curve[k] = float(np.mean(np.array(predictions) == targets))
    return curve


def _ranking(grid: np.ndarray) -> np.ndarray:
    return np.argsort(-grid.ravel(), kind="stable")


def _metrics(results: dict, task: str) -> dict[str, float]:
    return {key.split(",")[0]: value for key, value in results["results"][task].items() if key.endswith(",none")}


def _load(folder, config: str):
    """A config of a dataset folder, cached apart from other folders of the same name."""
    return load_dataset(str(folder), config, cache_dir=str(folder.parent / "hf_cache" / folder.name))["test"]


def _captured(tiny, folder, config: str, limit: int, answer_tokens=None):
    """The first `limit` documents of `config` and their `capture_heads` at the cattok."""
    model, processor = tiny
    docs = _load(folder, config).select(range(limit))
    captures = [
        capture_heads(model, processor, d["prompt"], d["images"], tuple(d["cattok_char_span"]),
                      answer_tokens=answer_tokens)
        for d in docs
    ]
    return docs, captures


@pytest.fixture(scope="module")
def icir_recomputed(shared, tiny):
    """ICIR-MCQ documents captured directly; acc and head metrics by brute force."""
    letters = [tiny[1].tokenizer.encode(letter, add_special_tokens=False)[0] for letter in "ABCD"]
    docs, captures = _captured(tiny, shared / "mcq", "n5", LIMIT, letters)
    targets = np.array(docs["target_position"])
    votes = np.stack([c.pointer[0].numpy().argmax(axis=-1) for c in captures])
    grid = _grid(votes, targets)
    votes_eq3 = np.stack([c.pointer_eq3[0].numpy().argmax(axis=-1) for c in captures])
    grid_eq3 = _grid(votes_eq3, targets)
    candidates = InContextCandidates.from_list([c.image_embeds for c in captures], targets)
    writer = fit_writer_probes(
        torch.stack([c.head_output[0] for c in captures]),
        torch.stack([c.image_embeds[t] for c, t in zip(captures, targets)]),
        docs["probe_split"],
        image_ids=docs["target_image_id"],
        candidates=candidates,
        progress=False,
    )
    return {
        "acc": float(np.mean([int(c.answer_logits.argmax()) == a for c, a in zip(captures, docs["answer_index"])])),
        "grid": grid,
        "grid_eq3": grid_eq3,
        "chance": float(np.mean(1 / np.array(docs["n_choices"]))),
        # The protocol ranks heads by the Eq. 3 proxy (App. A): its ranking votes and picks.
        "vote": _majority_curve(votes_eq3, targets, _ranking(grid_eq3)),
        "votes": votes,
        "votes_eq3": votes_eq3,
        "writer": writer.r1,
    }


def test_icir_mcq_metrics_match_capture_heads(shared, icir_recomputed):
    got = _metrics(results_of(shared / "ref_mcq"), "icir_mcq_n5")
    grid = icir_recomputed["grid"]
    assert got["acc"] == pytest.approx(icir_recomputed["acc"], abs=1e-12)
    assert got["pointer_r1_exact"] == pytest.approx(grid.max(), abs=1e-12)
    assert got["pointer_top_head_exact"] == int(_ranking(grid)[0])
    assert got["pointer_r1_median_exact"] == pytest.approx(np.median(grid), abs=1e-12)
    # The Eq. 3 proxy of the same prefill (test_capture_engine checks pointer_eq3 against q/k by hand):
    # protocol icir-heads/2's pointer_r1.
    grid_eq3 = icir_recomputed["grid_eq3"]
    for suffix in ("", "_eq3"):
        assert got[f"pointer_r1{suffix}"] == pytest.approx(grid_eq3.max(), abs=1e-12)
        assert got[f"pointer_top_head{suffix}"] == int(_ranking(grid_eq3)[0])
        assert got[f"pointer_r1_median{suffix}"] == pytest.approx(np.median(grid_eq3), abs=1e-12)
    assert got["pointer_rank_spearman"] == pytest.approx(scipy.stats.spearmanr(grid.ravel(), grid_eq3.ravel())[0])
    shared_top = set(_ranking(grid)[:10]) & set(_ranking(grid_eq3)[:10])
    assert got["pointer_top10_overlap"] == pytest.approx(len(shared_top) / 10)
    assert "pointer_r1_oracle" not in got  # a discovery set's pointer_r1 is its own best head (Table 1)
    assert got["chance_r1"] == pytest.approx(icir_recomputed["chance"], abs=1e-12)
    assert got["writer_r1"] == pytest.approx(icir_recomputed["writer"].max(), abs=1e-9)
    for k in KS:
        assert got[f"vote_r1@{k}"] == pytest.approx(icir_recomputed["vote"][k], abs=1e-12), k


def test_icir_mcq_artifacts_hold_the_grids(shared, icir_recomputed):
    folder = artifacts_of(shared / "ref_mcq") / "icir_mcq_n5"
    grid = icir_recomputed["grid"]
    n_heads = grid.shape[1]
    names = [f"L{i // n_heads:02d}H{i % n_heads:02d}" for i in range(grid.size)]
    pointer = json.loads((folder / "pointer_r1_exact.json").read_text())["grids"]["cattok"]
    assert list(pointer) == names
    np.testing.assert_allclose(list(pointer.values()), grid.ravel(), atol=1e-12)
    arrays = load_file(str(folder / "pointer_r1_exact.safetensors"))
    np.testing.assert_allclose(arrays["pointer_r1_exact"][0].numpy(), grid, atol=1e-12)
    arrays = load_file(str(folder / "pointer_r1_eq3.safetensors"))
    np.testing.assert_allclose(arrays["pointer_r1_eq3"][0].numpy(), icir_recomputed["grid_eq3"], atol=1e-12)
    ranking = json.loads((folder / "pointer_ranking_exact.json").read_text())
    assert ranking["ranking"] == [names[i] for i in _ranking(grid)]
    voting = json.loads((folder / "pointer_ranking.json").read_text())  # the protocol's: Eq. 3
    assert voting["ranking"] == [names[i] for i in _ranking(icir_recomputed["grid_eq3"])]
    writer = load_file(str(folder / "writer_r1.safetensors"))["writer_r1"].numpy()
    np.testing.assert_allclose(writer, icir_recomputed["writer"], atol=1e-9)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["pointer_top_head_exact"] == names[_ranking(grid)[0]]
    assert [head for head, _ in summary["top_pointer_heads_exact"]] == [names[i] for i in _ranking(grid)[:10]]
    eq3_order = _ranking(icir_recomputed["grid_eq3"])
    assert summary["pointer_top_head"] == summary["pointer_top_head_eq3"] == names[eq3_order[0]]
    assert [head for head, _ in summary["top_pointer_heads"]] == [names[i] for i in eq3_order[:10]]
    for figure in ("pointer_r1_exact_grid.png", "pointer_r1_eq3_grid.png", "writer_r1_grid.png", "pointer_vs_writer.png", "vote_r1.png"):
        assert (folder / figure).read_bytes().startswith(b"\x89PNG"), figure


def _writer_votes(probes_dir, head_output: torch.Tensor, embeds: torch.Tensor) -> np.ndarray:
    """Each probe's in-context vote by hand: argmax_i <norm(f o + b_f), norm(g e_i + b_g)> ([L*H])."""
    tensors = {k: v.double() for k, v in load_file(str(probes_dir / "writer_probes.safetensors")).items()}
    o = head_output.double().reshape(-1, head_output.shape[-1])
    query = F.normalize(torch.einsum("nkd,nd->nk", tensors["f_weight"], o) + tensors["f_bias"], dim=-1)
    keys = F.normalize(torch.einsum("nkd,id->nik", tensors["g_weight"], embeds.double()) + tensors["g_bias"][:, None], dim=-1)
    return torch.einsum("nk,nik->ni", query, keys).argmax(dim=-1).numpy()


def test_vhs_metrics_match_capture_heads(shared, tiny, icir_recomputed):
    model, processor = tiny
    docs = _load(shared / "vhs", "single_needle_n5")
    probes = artifacts_of(shared / "ref_mcq") / "icir_mcq_n5" / "writer_probes"
    targets = np.array([d["needle_positions"][0] for d in docs])
    pointer_votes, pointer_votes_eq3, writer_votes, correct, compliant = [], [], [], [], []
    for d in docs:
        capture = capture_heads(model, processor, d["prompt"], d["images"], tuple(d["cattok_char_span"]))
        pointer_votes.append(capture.pointer[0].numpy().argmax(axis=-1))
        pointer_votes_eq3.append(capture.pointer_eq3[0].numpy().argmax(axis=-1))
        writer_votes.append(_writer_votes(probes, capture.head_output[0], capture.image_embeds))
        text = processor.apply_chat_template(conversation(split_prompt(d["prompt"], len(d["images"]))),
                                             add_generation_prompt=True, tokenize=False)
        inputs = processor(text=[text], images=[d["images"]], return_tensors="pt")
        output = model.generate(**inputs, max_new_tokens=MAX_GEN_TOKS, do_sample=False)
        response = processor.tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
        correct.append(is_correct(response, d["answer"]))
        compliant.append(is_compliant(response))
    pointer_votes, pointer_votes_eq3 = np.stack(pointer_votes), np.stack(pointer_votes_eq3)
    writer_votes = np.stack(writer_votes).reshape(pointer_votes.shape)
    grid = _grid(pointer_votes, targets)
    writer_grid = _grid(writer_votes, targets)
    icir_writer_ranking = _ranking(icir_recomputed["writer"])

    got = _metrics(results_of(shared / "ref_vhs"), "vhs_single_n5")
    assert got["acc"] == pytest.approx(np.mean(correct), abs=1e-12)
    assert got["compliance"] == pytest.approx(np.mean(compliant), abs=1e-12)
    # The paper's transfer protocol (§4.3): pointer_r1 is the ICIR-MCQ ranking's top head on VHs, scored
    # with the score that ranked it (Eq. 3); the best head chosen on VHs itself is the oracle.
    grid_eq3 = _grid(pointer_votes_eq3, targets)
    icir_top = int(_ranking(icir_recomputed["grid_eq3"])[0])  # the ICIR-MCQ run's voting (Eq. 3) ranking
    for suffix in ("", "_exact", "_eq3"):
        assert got[f"pointer_top_head{suffix}"] == icir_top
    for suffix in ("", "_eq3"):
        assert got[f"pointer_r1{suffix}"] == pytest.approx(grid_eq3.ravel()[icir_top], abs=1e-12)
        assert got[f"pointer_r1_oracle{suffix}"] == pytest.approx(grid_eq3.max(), abs=1e-12)
        assert got[f"pointer_r1_median{suffix}"] == pytest.approx(np.median(grid_eq3), abs=1e-12)
    assert got["pointer_r1_exact"] == pytest.approx(grid.ravel()[icir_top], abs=1e-12)
    assert got["pointer_r1_oracle_exact"] == pytest.approx(grid.max(), abs=1e-12)
    assert got["pointer_r1_median_exact"] == pytest.approx(np.median(grid), abs=1e-12)
    assert got["pointer_r1"] == got["vote_r1@1"]  # App. H: a K = 1 vote is the single head
    assert got["chance_r1"] == pytest.approx(0.2, abs=1e-12)
    assert got["writer_r1"] == pytest.approx(writer_grid.max(), abs=1e-12)
    # Votes use the rankings found on ICIR-MCQ, not VHs's own (§4.3, App. H).
    pointer_curve = _majority_curve(pointer_votes_eq3, targets, _ranking(icir_recomputed["grid_eq3"]))
    writer_curve = _majority_curve(writer_votes, targets, icir_writer_ranking)
    for k in KS:
        assert got[f"vote_r1@{k}"] == pytest.approx(pointer_curve[k], abs=1e-12), k
        assert got[f"writer_vote_r1@{k}"] == pytest.approx(writer_curve[k], abs=1e-12), k


def test_python_api_pools_the_icir_mcq_group(shared, tiny, tmp_path, monkeypatch):
    """One ``icir_mcq`` run fits the writer probes once per readout position, on both configs pooled."""
    import harness.analysis

    fits = []

    def counting_fit(head_output, *args, **kwargs):
        fits.append(tuple(head_output.shape))
        return fit_writer_probes(head_output, *args, **kwargs)

    monkeypatch.setattr(harness.analysis, "fit_writer_probes", counting_fit)
    limit = 6
    results = harness.evaluate(
        ["icir_mcq"],
        {"pretrained": str(shared / "model"), "image_budget": IMAGE_BUDGET, "readout": "cattok/last",
         "writer_epochs": 12, "writer_lr": 0.002},
        metadata={"icir_mcq_data": str(shared / "mcq")},
        output_path=tmp_path,
        limit=limit,
        device="cpu",
        bootstrap_iters=0,
    )
    parts = [_captured(tiny, shared / "mcq", config, limit) for config in ("n5", "n6")]
    docs = [d for part_docs, _ in parts for d in part_docs]
    captures = [c for _, part_captures in parts for c in part_captures]
    targets = np.array([d["target_position"] for d in docs])
    grid = _grid(np.stack([c.pointer[0].numpy().argmax(axis=-1) for c in captures]), targets)
    writer = fit_writer_probes(
        torch.stack([c.head_output[0] for c in captures]),
        torch.stack([c.image_embeds[t] for c, t in zip(captures, targets)]),
        [d["probe_split"] for d in docs],
        image_ids=[d["target_image_id"] for d in docs],
        candidates=InContextCandidates.from_list([c.image_embeds for c in captures], targets),
        config=WriterProbeConfig(epochs=12, lr=0.002),
        progress=False,
    )
    assert fits == [(2 * limit, 4, 4, 16)] * 2  # pooled n5 + n6, at cattok and at last; never per config
    group = results["groups"]["icir_mcq"]
    assert group["pointer_r1_exact,none"] == pytest.approx(grid.max(), abs=1e-12)
    assert group["pointer_top_head_exact,none"] == int(_ranking(grid)[0])
    assert group["chance_r1,none"] == pytest.approx((1 / 5 + 1 / 6) / 2, abs=1e-12)
    assert group["writer_r1,none"] == pytest.approx(writer.r1.max(), abs=1e-9)
    summary = results["icir"]["summaries"]["icir_mcq"]
    assert summary["n_docs"] == 2 * limit and summary["tasks"] == ["icir_mcq_n5", "icir_mcq_n6"]
    artifacts = artifacts_of(tmp_path) / "icir_mcq"
    assert json.loads((artifacts / "summary.json").read_text())["pointer_r1"] == summary["pointer_r1"]
    assert (artifacts / "writer_probes" / "writer_probes.safetensors").is_file()
    recorded = json.loads((artifacts / "writer_r1.json").read_text())["cattok"]["config"]
    assert (recorded["epochs"], recorded["lr"], recorded["batch_size"]) == (12, 0.002, 256)  # the model arguments


def test_logged_samples_hold_readable_per_document_records(shared, icir_recomputed):
    """``--log_samples``: answer, correctness, target image and the top pointer head's pick; no paths."""
    (samples_file,) = sorted((shared / "ref_mcq").glob("*/samples_icir_mcq_n5_*.jsonl"))
    text = samples_file.read_text()
    assert str(shared) not in text and "activations" not in text
    samples = sorted((json.loads(line) for line in text.splitlines()), key=lambda s: s["doc_id"])
    docs = _load(shared / "mcq", "n5").select(range(LIMIT))
    top = int(_ranking(icir_recomputed["grid_eq3"])[0])  # the voting (Eq. 3) ranking's top head
    n_heads = icir_recomputed["grid"].shape[1]
    assert [s["doc_id"] for s in samples] == list(range(LIMIT))
    for sample, doc, picks in zip(samples, docs, icir_recomputed["votes_eq3"]):
        letters = [float(resp[0][0]) for resp in sample["resps"]]
        assert sample["answer"] == "ABCD"[int(np.argmax(letters))]
        assert sample["correct"] == (sample["answer"] == "ABCD"[doc["answer_index"]]) == bool(sample["acc"])
        assert sample["target_image"] == doc["target_position"]
        assert sample["pointer_head"] == f"L{top // n_heads:02d}H{top % n_heads:02d}"
        assert sample["pointer_pick"] == picks[top // n_heads, top % n_heads]
        assert sample["pointer_hit"] == (sample["pointer_pick"] == doc["target_position"])
    records = load_file(str(artifacts_of(shared / "ref_mcq") / "icir_mcq_n5" / "head_records.safetensors"))
    exact = records["pointer_image_exact"]
    assert exact.dtype == torch.int16 and exact.shape == (LIMIT, 4, 4)
    assert np.array_equal(exact.numpy(), icir_recomputed["votes"])
    assert np.array_equal(records["pointer_image_eq3"].numpy(), icir_recomputed["votes_eq3"])
    assert records["doc_id"].tolist() == list(range(LIMIT))


def test_icir_analyze_recomputes_a_finished_run(shared, tmp_path, capsys):
    """``icir analyze`` on a run whose results hold lm-eval's numbers only (as a plain lm_eval run
    with ``store=DIR`` leaves them) restores every head metric, the artifacts and the samples' records."""
    import shutil

    from harness.cli import main as icir_main

    reference = results_of(shared / "ref_mcq")
    (run,) = (shared / "ref_mcq").glob("*/results_*.json")
    copy = tmp_path / run.parent.name
    shutil.copytree(run.parent, copy, ignore=shutil.ignore_patterns("icir_artifacts"))
    stripped = json.loads((copy / run.name).read_text())
    stripped["results"]["icir_mcq_n5"] = {k: v for k, v in stripped["results"]["icir_mcq_n5"].items()
                                          if "," not in k or k.split(",")[0] in ("acc", "acc_stderr")}
    del stripped["icir"]
    (copy / run.name).write_text(json.dumps(stripped))
    samples = next(copy.glob("samples_icir_mcq_n5_*.jsonl"))
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    samples.write_text("".join(json.dumps({k: v for k, v in s.items() if not k.startswith("pointer_")}) + "\n"
                               for s in lines))
    assert icir_main(["analyze", str(copy)]) == 0
    assert "pointer_r1" in capsys.readouterr().out
    assert json.loads((copy / run.name).read_text())["results"] == reference["results"]
    assert [json.loads(line) for line in samples.read_text().splitlines()] == lines
    assert (copy / "icir_artifacts" / "icir_mcq_n5" / "head_records.safetensors").is_file()


def test_protocol_record_holds_the_runs_actual_settings(shared, tiny):
    """protocol.json (written by the analysis stage of the reference run) against the run as it was."""
    import hashlib
    import importlib.metadata

    from harness.lm_eval_plugin.documents import fingerprint

    folder = artifacts_of(shared / "ref_mcq") / "icir_mcq_n5"
    record = json.loads((folder / "protocol.json").read_text())
    assert record == results_of(shared / "ref_mcq")["icir"]["protocol"]
    assert record["protocol"] == "icir-heads/2" and record["on_protocol"] is False
    assert record["deviations"] == [
        "image side 64 px set by the user (protocol: the qwen3_vl family's own)",
        f"--limit {LIMIT} (protocol: every document)",
        f"--gen_kwargs {{'max_gen_toks': {MAX_GEN_TOKS}}} (protocol: the tasks' own generation settings)",
    ]
    settings = record["settings"]
    assert settings["pointer_mode"] == "proxy" and settings["readout"] == ["cattok"]
    assert settings["vote_ks"] == list(KS) and settings["limit"] == LIMIT
    assert settings["image_inputs"]["family"] == "qwen3_vl" and settings["image_inputs"]["side"] == IMAGE_BUDGET
    assert settings["writer_config"]["batch_size"] == 256 and settings["writer_config"]["epochs"] == 30
    model, processor = tiny
    template = hashlib.sha256(processor.chat_template.encode()).hexdigest()
    assert settings["chat_template_sha256"] == template
    weights_file = hashlib.sha256((shared / "model" / "model.safetensors").read_bytes()).hexdigest()
    weights = hashlib.sha256(f"model.safetensors {weights_file}\n".encode())
    assert record["model"]["weights_sha256"] == weights.hexdigest() and record["model"]["source"] == "local"
    assert (record["model"]["n_layers"], record["model"]["n_heads"]) == (4, 4)
    assert record["model"]["dtype"] == "torch.float32" and record["model"]["attn_implementation"] == "sdpa"
    assert record["versions"]["transformers"] == importlib.metadata.version("transformers")
    docs = _load(shared / "mcq", "n5").select(range(LIMIT))
    prints = [fingerprint(d["prompt"], d["cattok_char_span"], d["images"]) for d in docs]
    dataset = record["datasets"]["icir_mcq_n5"]
    assert dataset["documents"] == LIMIT
    assert dataset["fingerprint"] == hashlib.sha256("\n".join(prints).encode()).hexdigest()
    spans = [capture_heads(model, processor, d["prompt"], d["images"], tuple(d["cattok_char_span"])).image_spans
             for d in docs.select(range(3))]
    tokens = {end - start for doc_spans in spans for start, end in doc_spans}
    assert dataset["visual_tokens_per_image"]["min"] == min(tokens) and dataset["visual_tokens_per_image"]["images"] == 5 * LIMIT
    assert results_of(shared / "ref_mcq")["icir"]["summaries"]["icir_mcq_n5"]["visual_tokens_per_image"] == dataset["visual_tokens_per_image"]


def test_results_name_the_weights_and_the_chat_template(shared):
    """lm-eval's results ``config.model_sha`` is the weights' identity (HFLM asks the Hub, which
    knows no local folder) and its ``chat_template`` fields hold the template every prompt used."""
    import hashlib

    from transformers import AutoProcessor

    from harness.protocol import weights_sha256

    results = results_of(shared / "ref_mcq")
    assert results["config"]["model_sha"] == f"sha256:{weights_sha256(shared / 'model')}"
    template = AutoProcessor.from_pretrained(shared / "model").chat_template
    assert results["chat_template"] == template and "chat_template" not in results["config"]
    assert results["chat_template_sha"] == hashlib.sha256(template.encode()).hexdigest()
