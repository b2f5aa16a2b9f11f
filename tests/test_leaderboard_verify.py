"""icir leaderboard verify: a seeded re-run of sampled documents agrees with an honest submission
and names the documents whose head records were edited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from lm_eval_helpers import full_run, rehash
from safetensors.numpy import load_file, save_file

from harness.activation_store import file_sha256
from harness.cli import main as icir_main
from harness.leaderboard.schema import MANIFEST
from harness.leaderboard.verify import sample_documents, verify

TASK = "icir_mcq_n5"
DOCS = 6


@pytest.fixture(scope="module")
def submission(shared, tmp_path_factory) -> Path:
    run = full_run(shared, tmp_path_factory.mktemp("verify_run"), TASK)
    sub = tmp_path_factory.mktemp("verify_sub") / "sub"
    assert icir_main(["submit", str(run), "--out", str(sub)]) == 0
    return sub


def _data(shared: Path) -> dict:
    return {"icir_mcq_data": str(shared / "mcq")}


def test_sample_is_seeded_and_sorted():
    first = sample_documents({"a": 60, "b": 3}, 5, seed=7)
    assert first == sample_documents({"b": 3, "a": 60}, 5, seed=7)
    assert first["b"] == [0, 1, 2] and len(first["a"]) == 5 and first["a"] == sorted(set(first["a"]))
    assert first != sample_documents({"a": 60, "b": 3}, 5, seed=8)


def test_honest_submission_verifies(shared, submission, tmp_path, capsys):
    record = tmp_path / "verifications" / "model" / "rev.json"
    code = icir_main(["leaderboard", "verify", str(submission), "--docs", str(DOCS), "--device", "cpu",
                      "--metadata", json.dumps(_data(shared)), "--record", str(record)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verified on 6 re-run documents" in out
    written = json.loads(record.read_text())
    assert written["passed"] is True and written["manifest_sha256"] == file_sha256(submission / MANIFEST)
    assert written["agreement"] == {"answer": 1.0, "correct": 1.0, "pointer_image_exact": 1.0, "pointer_image_eq3": 1.0}
    assert written["documents"] == sample_documents({TASK: 60}, DOCS, 0)


def test_edited_head_records_fail_naming_the_documents(shared, submission, tmp_path):
    copy = tmp_path / "sub"
    shutil.copytree(submission, copy)
    sampled = sample_documents({TASK: 60}, DOCS, 0)[TASK]
    edited = sampled[:2]
    path = copy / "artifacts" / TASK / "head_records.safetensors"
    tensors = load_file(str(path))
    rows = [tensors["doc_id"].tolist().index(d) for d in edited]
    tensors["pointer_image_exact"][rows] = (tensors["pointer_image_exact"][rows] + 1) % 5
    save_file(tensors, str(path))
    rehash(copy)
    found = verify(copy, _data(shared), docs=DOCS, seed=0, device="cpu")
    assert not found.passed
    assert found.mismatches["pointer_image_exact"] == [f"{TASK}:{d}" for d in edited]
    assert found.mismatches["pointer_image_eq3"] == []
    assert found.agreement["pointer_image_exact"] == pytest.approx(1 - 2 / DOCS)
    assert any(line.startswith("pointer_image_exact: agreement") and f"{TASK}:{edited[0]}" in line for line in found.failures)
    assert any(line.startswith("does not validate") for line in found.failures)


def test_other_weights_are_refused(shared, submission, tmp_path):
    other = tmp_path / "other_model"
    from harness.tiny_models import save_tiny

    save_tiny("qwen3_vl", other, seed=5)
    found = verify(submission, _data(shared), docs=2, seed=0, device="cpu", model_args={"pretrained": str(other)})
    assert any("weights_sha256" in line and "verify with the submitted weights" in line for line in found.failures)
    assert np.isfinite(found.agreement["pointer_image_exact"])


def test_unreadable_records_are_refused_before_the_model_loads(shared, submission, tmp_path, capsys):
    copy = tmp_path / "sub"
    shutil.copytree(submission, copy)
    (copy / "artifacts" / TASK / "head_records.safetensors").write_bytes(b"not safetensors")
    rehash(copy)
    code = icir_main(["leaderboard", "verify", str(copy), "--metadata", json.dumps(_data(shared)),
                      "--model_args", "pretrained=/nowhere"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "head_records.safetensors: not a readable safetensors file" in err[0]
