"""``icir submit`` and ``icir leaderboard validate`` on a real (full, 60-document) run of the tiny Qwen3-VL."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from lm_eval_helpers import full_run, rehash
from safetensors.numpy import load_file, save_file

from harness.cli import main as icir_main
from harness.leaderboard.bundle import write_manifest
from harness.leaderboard.schema import MANIFEST
from harness.leaderboard.validate import validate

TASK = "icir_mcq_n5"


@pytest.fixture(scope="module")
def run_folder(shared, tmp_path_factory) -> Path:
    return full_run(shared, tmp_path_factory.mktemp("full_run"), TASK)


@pytest.fixture(scope="module")
def submission(run_folder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("submission") / "sub"
    assert icir_main(["submit", str(run_folder), "--out", str(out), "--archive", "--submitter", "tester",
                      "--link", "https://example.org/model"]) == 0
    return out


@pytest.fixture
def copy(submission, tmp_path) -> Path:
    target = tmp_path / "sub"
    shutil.copytree(submission, target)
    return target


def failures(path: Path, config: dict | None = None) -> list[str]:
    return validate(path, config).failures


def results_file(folder: Path) -> Path:
    (path,) = (folder / "results").glob("results_*.json")
    return path


def test_submit_and_validate(submission, capsys):
    manifest = json.loads((submission / MANIFEST).read_text())
    assert manifest["schema_version"] == "icir-submission/1"
    assert manifest["model"]["n_layers"] == 4 and manifest["model"]["n_heads"] == 4
    assert manifest["tasks"] == [TASK] and manifest["submitter"] == "tester"
    assert manifest["datasets"][TASK]["documents"] == 60
    paths = [entry["path"] for entry in manifest["files"]]
    assert all(p.endswith((".json", ".jsonl", ".safetensors")) for p in paths)
    assert f"artifacts/{TASK}/head_records.safetensors" in paths
    assert not any("writer_probes" in p or p.endswith(".png") for p in paths)
    assert icir_main(["leaderboard", "validate", str(submission)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "any dataset fingerprint" in out
    archive = submission.with_name("sub.tar.gz")
    assert icir_main(["leaderboard", "validate", str(archive)]) == 0


def test_archive_is_deterministic(run_folder, submission, tmp_path):
    again = tmp_path / "sub"
    assert icir_main(["submit", str(run_folder), "--out", str(again), "--archive", "--submitter", "tester",
                      "--link", "https://example.org/model"]) == 0
    first, second = submission.with_name("sub.tar.gz").read_bytes(), again.with_name("sub.tar.gz").read_bytes()
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        names = tar.getnames()
        assert names == sorted(names)
        assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in tar.getmembers())


def test_tampered_pointer_r1_is_recomputed(copy):
    path = results_file(copy)
    results = json.loads(path.read_text())
    results["results"][TASK]["pointer_r1,none"] += 0.05
    path.write_text(json.dumps(results))
    rehash(copy)
    found = failures(copy)
    assert found and all("pointer_r1 (results)" in line for line in found), found
    assert "recomputed from the per-document records" in found[0]


def test_tampered_accuracy_and_documents(copy):
    docs = copy / "artifacts" / TASK / "documents.jsonl"
    rows = [json.loads(line) for line in docs.read_text().splitlines()]
    rows[0]["correct"] = not rows[0]["correct"]
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rehash(copy)
    assert any(line.startswith(f"{TASK} acc:") for line in failures(copy))


def test_wrong_hash(copy):
    path = copy / "artifacts" / TASK / "summary.json"
    path.write_text(path.read_text().replace('"name"', '"name" ', 1))
    found = failures(copy)
    assert any("summary.json: sha256" in line for line in found)
    assert any("summary.json: size" in line for line in found)


def test_extra_file(copy):
    (copy / "artifacts" / TASK / "notes.json").write_text("{}")
    assert failures(copy) == [f"artifacts/{TASK}/notes.json: not listed in the manifest (no file beyond the manifest)"]


def test_missing_file(copy):
    (copy / "artifacts" / TASK / "vote_r1.json").unlink()
    assert any("vote_r1.json: listed in the manifest but missing" in line for line in failures(copy))


def test_symlink(copy):
    (copy / "link.json").symlink_to(copy / MANIFEST)
    assert any("link.json: a symlink" in line for line in failures(copy))


def test_archive_with_parent_member(submission, tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(submission, arcname="sub")
        info = tarfile.TarInfo("sub/../../escape.json")
        payload = b"{}"
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    found = failures(archive)
    assert any("path traversal" in line and "escape.json" in line for line in found)
    assert not (tmp_path.parent / "escape.json").exists()


def test_archive_with_symlink_member(submission, tmp_path):
    archive = tmp_path / "link.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(submission, arcname="sub")
        info = tarfile.TarInfo("sub/passwd.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    assert any("a link" in line for line in failures(archive))


def _edit_records(folder: Path, edit) -> None:
    path = folder / "artifacts" / TASK / "head_records.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))
    rehash(folder)


def test_nan_in_head_record(copy):
    def edit(tensors):
        bad = tensors["pointer_image_exact"].astype(np.float32)
        bad[0, 0, 0] = np.nan
        tensors["pointer_image_exact"] = bad
    _edit_records(copy, edit)
    found = failures(copy)
    assert any("NaN or inf" in line and "pointer_image_exact" in line for line in found), found
    assert any("pointer_image_exact is float32, expected int16" in line for line in found)


def test_wrong_shape(copy):
    def edit(tensors):
        tensors["pointer_image_eq3"] = np.concatenate([tensors["pointer_image_eq3"]] * 2, axis=2)
    _edit_records(copy, edit)
    found = failures(copy)
    assert any("pointer_image_eq3 has shape [60, 4, 8], expected [60, 4, 4]" in line for line in found), found


def test_edited_head_record_changes_numbers(copy):
    def edit(tensors):
        tensors["pointer_image_eq3"] = (tensors["pointer_image_eq3"] + 1) % 5
    _edit_records(copy, edit)
    found = failures(copy)
    assert any("pointer_r1_eq3 (results)" in line for line in found)
    assert any("vote_r1@1 (results)" in line for line in found)


def test_config_protocol_and_fingerprint(submission, tmp_path, capsys):
    fingerprint = json.loads((submission / MANIFEST).read_text())["datasets"][TASK]["fingerprint"]
    good = {"protocols": ["icir-heads/2"], "datasets": {TASK: [fingerprint]}}
    assert failures(submission, good) == []
    found = failures(submission, {"protocols": ["icir-heads/3"], "datasets": {TASK: ["0" * 64]}})
    assert any("protocol 'icir-heads/2' is not one this leaderboard accepts" in line for line in found)
    assert any(f"{TASK}: dataset fingerprint {fingerprint} is not a published build's" in line for line in found)
    config = tmp_path / "board.json"
    config.write_text(json.dumps({"protocols": ["icir-heads/3"], "datasets": {}}))
    assert icir_main(["leaderboard", "validate", str(submission), "--config", str(config)]) == 1
    assert "FAIL: " in capsys.readouterr().out
    assert icir_main(["leaderboard", "validate", str(tmp_path / "nothing")]) == 2


def test_schema_failure(copy):
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["model"]["n_heads"] = "four"
    del manifest["schema_version"]
    write_manifest(copy, manifest)
    found = failures(copy)
    assert any("schema" in line and "n_heads" in line for line in found)
    assert any("schema" in line and "schema_version" in line for line in found)


def test_limit_run_refused(shared, tmp_path, capsys):
    (run,) = [p for p in (shared / "ref_mcq").iterdir() if p.is_dir()]
    assert icir_main(["submit", str(run), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "partial run (--limit 19)" in err and len(err.strip().splitlines()) == 1


def test_run_without_artifacts_refused(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    assert icir_main(["submit", str(tmp_path / "run"), "--out", str(tmp_path / "s")]) == 2
    assert "holds no artifacts" in capsys.readouterr().err


def test_transfer_run(shared, tmp_path):
    """A VHs run voting with a transferred ranking: its top head's R@1 and votes are recomputed too."""
    (run,) = [p for p in (shared / "ref_vhs").iterdir() if p.is_dir()]
    out = tmp_path / "vhs"
    assert icir_main(["submit", str(run), "--out", str(out)]) == 0
    assert failures(out) == []
    ranking_file = out / "inputs" / "vhs_single_n5" / "heads_ranking.json"
    ranking = json.loads(ranking_file.read_text())
    ranking["ranking"] = ranking["ranking"][::-1]
    ranking_file.write_text(json.dumps(ranking))
    rehash(out)
    assert any("vote_r1@" in line for line in failures(out))


def _edit_tensors(folder: Path, relative: str, edit) -> None:
    path = folder / relative
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))
    rehash(folder)


def test_writer_records_give_the_reported_writer_r1(submission):
    """Writer R@1 per head is the mean of its pool picks being the target, as reported everywhere."""
    records = load_file(str(submission / "artifacts" / TASK / "writer_records.safetensors"))
    picks, target = records["writer_pick"], records["writer_target"]
    assert picks.shape[1:] == (4, 4) and picks.shape[0] == target.shape[0] > 0
    grid = (picks == target[:, None, None]).mean(axis=0)
    results = json.loads(results_file(submission).read_text())["results"][TASK]
    assert results["writer_r1,none"] == pytest.approx(grid.max(), abs=1e-12)
    summary = json.loads((submission / "artifacts" / TASK / "summary.json").read_text())
    layer, head = np.unravel_index(np.argmax(grid), grid.shape)
    assert summary["writer_top_head"] == f"L{layer:02d}H{head:02d}"
    overlap = summary["pointer_writer_overlap"]
    assert overlap == {"k": 16, "count": 16, "chance": 16.0}  # K capped at the 16 heads: every head


def test_tampered_writer_numbers_are_recomputed(copy):
    path = results_file(copy)
    results = json.loads(path.read_text())
    results["results"][TASK]["writer_r1,none"] -= 0.01
    path.write_text(json.dumps(results))
    summary_path = copy / "artifacts" / TASK / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["pointer_writer_overlap"]["count"] = 3
    summary_path.write_text(json.dumps(summary))
    rehash(copy)
    found = failures(copy)
    assert any(line.startswith(f"{TASK} writer_r1 (results)") for line in found), found
    assert any("pointer_writer_overlap.count" in line for line in found), found


def test_edited_writer_picks_change_the_grid(copy):
    def edit(tensors):
        pool = int(tensors["writer_target"].max()) + 1
        tensors["writer_pick"] = ((tensors["writer_pick"] + 1) % pool).astype(np.int32)
    _edit_tensors(copy, f"artifacts/{TASK}/writer_records.safetensors", edit)
    found = failures(copy)
    assert any("writer_r1.json: R@1 of" in line for line in found), found


def test_writer_r1_without_records_is_refused(copy):
    (copy / "artifacts" / TASK / "writer_records.safetensors").unlink()
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["files"] = [e for e in manifest["files"] if not e["path"].endswith("writer_records.safetensors")]
    write_manifest(copy, manifest)
    assert any("without per-document writer records" in line for line in failures(copy))


def test_pooled_group(shared, tmp_path):
    """The icir_mcq group: its pooled accuracy, pointer and writer numbers are recomputed from both tasks."""
    run = full_run(shared, tmp_path / "run", "icir_mcq")
    sub = tmp_path / "sub"
    assert icir_main(["submit", str(run), "--out", str(sub)]) == 0
    manifest = json.loads((sub / MANIFEST).read_text())
    assert manifest["units"]["icir_mcq"] == ["icir_mcq_n5", "icir_mcq_n6"]
    assert (sub / "artifacts" / "icir_mcq" / "writer_records.safetensors").is_file()
    assert failures(sub) == []
    path = sub / manifest["results"]["icir_mcq_n5"]
    results = json.loads(path.read_text())
    accs = [json.loads(line)["correct"] for t in ("icir_mcq_n5", "icir_mcq_n6")
            for line in (sub / "artifacts" / t / "documents.jsonl").read_text().splitlines()]
    assert results["results"]["icir_mcq"]["acc,none"] == pytest.approx(np.mean(accs))
    results["results"]["icir_mcq"]["pointer_r1_eq3,none"] += 0.01
    path.write_text(json.dumps(results))
    rehash(sub)
    found = failures(sub)
    assert found and all(line.startswith("icir_mcq pointer_r1_eq3 (results)") for line in found), found


def test_transfer_run_writer_votes(shared, tmp_path):
    """In-context writer picks (VHs with probes) give writer R@1 and the writer-ranking vote."""
    (run,) = [p for p in (shared / "ref_vhs").iterdir() if p.is_dir()]
    out = tmp_path / "vhs"
    assert icir_main(["submit", str(run), "--out", str(out)]) == 0
    assert (out / "inputs" / "vhs_single_n5" / "writer_probes.json").is_file()
    task = "vhs_single_n5"

    def edit(tensors):
        tensors["writer_image"] = np.zeros_like(tensors["writer_image"])
    _edit_tensors(out, f"artifacts/{task}/head_records.safetensors", edit)
    found = failures(out)
    assert any(line.startswith(f"{task} writer_r1 (results)") for line in found), found
    assert any(line.startswith(f"{task} writer_vote_r1@1 (results)") for line in found), found


def test_units_of_two_runs_are_caught(copy, shared, tmp_path):
    """A hand-assembled submission whose unit comes from another run (another seed) is refused."""
    protocol = copy / "artifacts" / TASK / "protocol.json"
    record = json.loads(protocol.read_text())
    record["settings"]["seeds"]["random_seed"] = 1
    protocol.write_text(json.dumps(record))
    rehash(copy)
    assert any("another run's protocol record" in line for line in failures(copy))


def test_submit_refuses_a_folder_mixing_runs(run_folder, tmp_path, capsys):
    mixed = tmp_path / "mixed"
    shutil.copytree(run_folder, mixed)
    other = mixed / "icir_artifacts" / "icir_mcq_n6"
    shutil.copytree(mixed / "icir_artifacts" / TASK, other)
    record = json.loads((other / "protocol.json").read_text())
    record["model"]["dtype"] = "torch.bfloat16"
    (other / "protocol.json").write_text(json.dumps(record))
    assert icir_main(["submit", str(mixed), "--out", str(tmp_path / "s")]) == 2
    assert "mixes runs" in capsys.readouterr().err


def test_oversized_file(copy, monkeypatch):
    import harness.leaderboard.validate as validate_module

    size = (copy / "artifacts" / TASK / "head_records.safetensors").stat().st_size
    monkeypatch.setattr(validate_module, "MAX_FILE_BYTES", size - 1)
    assert any(line.startswith(f"artifacts/{TASK}/head_records.safetensors: {size} bytes (cap {size - 1})")
               for line in failures(copy))
    monkeypatch.setattr(validate_module, "MAX_TOTAL_BYTES", 1000)
    assert any(line.startswith("submission:") and "(cap 1000)" in line for line in failures(copy))


def test_icir_heads_1_submission_is_refused_in_one_line(copy, capsys):
    """A submission of protocol icir-heads/1 (whose pointer_r1 was the exact score) is refused whatever
    the board's config accepts, in one line saying how to redo it; no number of it is read."""
    manifest = json.loads((copy / MANIFEST).read_text())
    manifest["protocol"]["protocol"] = "icir-heads/1"
    (copy / MANIFEST).write_text(json.dumps(manifest))
    for record in (copy / "artifacts").glob("*/protocol.json"):
        record.write_text(json.dumps({**json.loads(record.read_text()), "protocol": "icir-heads/1"}))
    rehash(copy)
    fingerprint = manifest["datasets"][TASK]["fingerprint"]
    found = failures(copy, {"protocols": ["icir-heads/1", "icir-heads/2"], "datasets": {TASK: [fingerprint]}})
    assert len(found) == 1 and "protocol 'icir-heads/1' is retired" in found[0], found
    assert "exact score (Eq. 1)" in found[0] and "icir analyze RUN --overwrite" in found[0]
    assert icir_main(["leaderboard", "validate", str(copy)]) == 1
    assert capsys.readouterr().out.count("FAIL: ") == 1
