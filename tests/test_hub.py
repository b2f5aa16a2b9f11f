"""``icir publish`` (staging and a mocked upload) and ``icir submit --eval-results``, all offline.

The upload itself is never made: `HfApi.create_repo` / `create_branch` / `upload_folder` are
replaced by recorders. The card is read back with huggingface_hub's `DatasetCard` and
`metadata_load`, the entries with its `parse_eval_result_entries`; huggingface_hub has no
``eval.yaml`` parser, so that file is read with yaml and checked against the documented fields.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import datasets
import pytest
from lm_eval_helpers import full_run
import yaml
from huggingface_hub import DatasetCard, HfApi, metadata_load, parse_eval_result_entries

from harness.cli import main as icir_main
from harness.hub.eval_results import POOLED_CONFIG, write_eval_results
from harness.hub.publish import check_eval_yaml
from icir_mcq.build import build_icir_mcq
from vhs_adapter.build import build_vhs
from vhs_adapter.toy_questions import write_toy_vhs_questions

TASK = "icir_mcq_n5"
REPO = "test-org/icir-mcq"


# ---------------------------------------------------------------------------- built folders


@pytest.fixture(scope="module")
def mcq_folder(toy_coco_root, toy_mmniah_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hub_mcq") / "icir_mcq"
    build_icir_mcq(toy_coco_root, [toy_mmniah_file], out, configs=["n5", "n6"], seed=0, samples=60,
                   max_passage_chars=60)
    return out


@pytest.fixture(scope="module")
def vhs_folder(toy_coco_root, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hub_vhs")
    write_toy_vhs_questions(toy_coco_root, root / "vhs_qa", seed=0, sizes=(5,), per_size=8)
    build_vhs(root / "vhs_qa", toy_coco_root, root / "vhs", sizes=[5])
    return root / "vhs"


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def rows(folder: Path, config: str) -> list[dict]:
    """The rows `load_dataset` gives, images as their stored bytes (no decoding).

    A fresh cache each time: datasets keys a local folder's cache on its name and card only.
    """
    dataset = datasets.load_dataset(str(folder), config, split="test", cache_dir=tempfile.mkdtemp())
    return dataset.with_format("arrow")[:].to_pylist()


def dry_run(folder: Path, out: Path, repo: str = REPO) -> Path:
    assert icir_main(["publish", str(folder), "--repo-id", repo, "--dry-run", str(out)]) == 0
    return out


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("icir publish: error: ")
    return lines[0]


# ---------------------------------------------------------------------------- publish


def test_dry_run_stages_a_loadable_benchmark(mcq_folder, tmp_path):
    staged = dry_run(mcq_folder, tmp_path / "staged")
    assert sorted(files_of(staged)) == ["README.md", "eval.yaml", "n5/test-00000-of-00001.parquet",
                                        "n6/test-00000-of-00001.parquet"]
    for config in ("n5", "n6"):
        assert rows(staged, config) == rows(mcq_folder, config)
    assert rows(staged, POOLED_CONFIG) == rows(mcq_folder, "n5") + rows(mcq_folder, "n6")

    card = DatasetCard.load(staged / "README.md")
    assert [c["config_name"] for c in card.data.configs] == ["n5", "n6", POOLED_CONFIG]
    assert card.data.configs[0]["data_files"] == [{"split": "test", "path": "n5/test-00000-of-00001.parquet"}]
    assert card.data.license == "cc-by-4.0" and "multiple-choice" in card.data.task_categories
    assert card.data.size_categories == ["n<1K"] and card.data.pretty_name == "ICIR-MCQ"
    assert metadata_load(staged / "README.md")["configs"] == card.data.configs
    assert f'load_dataset("{REPO}", "n5"' in card.text
    assert datasets.get_dataset_config_names(str(staged)) == ["n5", "n6", POOLED_CONFIG]

    benchmark = yaml.safe_load((staged / "eval.yaml").read_text())
    assert check_eval_yaml(benchmark) == []
    assert benchmark["name"] == "ICIR-MCQ" and benchmark["evaluation_framework"]
    tasks = {task["id"]: task for task in benchmark["tasks"]}
    assert {"n5_acc", "n5_pointer_r1", "n5_pointer_r1_exact", "n5_writer_r1", "all_acc"} <= set(tasks)
    assert tasks["n6_writer_r1"] == {"id": "n6_writer_r1", "config": "n6", "split": "test"}
    assert {task["config"] for task in tasks.values()} == {"n5", "n6", POOLED_CONFIG}


def test_upload_is_create_repo_then_upload_folder(mcq_folder, tmp_path, monkeypatch, capsys):
    expected = files_of(dry_run(mcq_folder, tmp_path / "staged"))
    calls: dict[str, list] = {"create_repo": [], "create_branch": [], "upload_folder": []}

    def create_repo(self, repo_id, **kwargs):
        calls["create_repo"].append({"repo_id": repo_id, **kwargs})

    def create_branch(self, repo_id, **kwargs):
        calls["create_branch"].append({"repo_id": repo_id, **kwargs})

    def upload_folder(self, **kwargs):
        calls["upload_folder"].append({**kwargs, "files": files_of(Path(kwargs["folder_path"]))})
        return "https://huggingface.co/datasets/test-org/icir-mcq/commit/0123"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_branch", create_branch)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    capsys.readouterr()
    assert icir_main(["publish", str(mcq_folder), "--repo-id", REPO, "--private", "--revision", "v1"]) == 0
    assert "commit/0123" in capsys.readouterr().out

    (repo,) = calls["create_repo"]
    assert repo == {"repo_id": REPO, "repo_type": "dataset", "private": True, "exist_ok": True}
    (branch,) = calls["create_branch"]
    assert branch["repo_id"] == REPO and branch["branch"] == "v1" and branch["repo_type"] == "dataset"
    (upload,) = calls["upload_folder"]
    assert upload["repo_id"] == REPO and upload["repo_type"] == "dataset" and upload["revision"] == "v1"
    assert upload["files"] == expected
    assert not Path(upload["folder_path"]).exists()  # the temporary staging folder is gone


def test_vhs_folder_publishes(vhs_folder, tmp_path):
    staged = dry_run(vhs_folder, tmp_path / "staged", repo="test-org/vhs")
    assert rows(staged, "single_needle_n5") == rows(vhs_folder, "single_needle_n5")
    card = DatasetCard.load(staged / "README.md")
    assert [c["config_name"] for c in card.data.configs] == ["single_needle_n5", "multi_needle_n5"]
    assert card.data.license == "mit" and card.data.task_categories == ["visual-question-answering"]
    benchmark = yaml.safe_load((staged / "eval.yaml").read_text())
    assert check_eval_yaml(benchmark) == []
    assert [t["id"] for t in benchmark["tasks"]] == ["single_needle_n5_acc", "single_needle_n5_pointer_r1",
                                                     "single_needle_n5_vote_r1", "multi_needle_n5_acc"]


def test_not_a_build_is_refused(toy_corpus, mcq_folder, tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "README.md").write_text("---\nconfigs: []\n---\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("README.md", ".icir-build.json"):
        (broken / name).write_bytes((mcq_folder / name).read_bytes())
    cases = {toy_corpus / "coco": "no readable .icir-build.json", plain: "no readable .icir-build.json",
             broken: "is missing", tmp_path / "nowhere": "is not a folder"}
    for folder, message in cases.items():
        assert icir_main(["publish", str(folder), "--repo-id", REPO, "--dry-run", str(tmp_path / "out")]) == 2
        assert message in one_error_line(capsys)
    assert not (tmp_path / "out").exists()
    # a toy corpus has a marker of another kind
    assert icir_main(["publish", str(toy_corpus), "--repo-id", REPO, "--dry-run", str(tmp_path / "out")]) == 2
    assert "toy-corpus build, not a finished ICIR-MCQ or VHs build" in one_error_line(capsys)


def test_bad_repo_id_existing_dry_run_folder(mcq_folder, tmp_path, capsys):
    assert icir_main(["publish", str(mcq_folder), "--repo-id", "not a repo", "--dry-run", str(tmp_path / "o")]) == 2
    assert "--repo-id" in one_error_line(capsys)
    (tmp_path / "taken").mkdir()
    assert icir_main(["publish", str(mcq_folder), "--repo-id", REPO, "--dry-run", str(tmp_path / "taken")]) == 2
    assert "already exists" in one_error_line(capsys)
    assert icir_main(["publish", str(mcq_folder), "--repo-id", REPO, "--dry-run", str(mcq_folder / "x")]) == 2
    assert "overlaps the build folder" in one_error_line(capsys)


def test_no_token_or_network_error_is_one_line(mcq_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("harness.hub.publish.get_token", lambda: None)
    assert icir_main(["publish", str(mcq_folder), "--repo-id", REPO]) == 2
    assert "no Hugging Face token" in one_error_line(capsys)

    monkeypatch.setattr("harness.hub.publish.get_token", lambda: "hf_test_token")

    def unreachable(self, repo_id, **kwargs):
        raise ConnectionError("Failed to resolve 'huggingface.co'\n(name resolution)")

    monkeypatch.setattr(HfApi, "create_repo", unreachable)
    assert icir_main(["publish", str(mcq_folder), "--repo-id", REPO]) == 2
    assert "upload to test-org/icir-mcq failed: ConnectionError: Failed to resolve" in one_error_line(capsys)


# ---------------------------------------------------------------------------- eval results


@pytest.fixture(scope="module")
def run_folder(shared, tmp_path_factory) -> Path:
    return full_run(shared, tmp_path_factory.mktemp("hub_run"), TASK)


@pytest.fixture(scope="module")
def submission(run_folder, tmp_path_factory) -> tuple[Path, Path]:
    """``icir submit --eval-results``: the submission folder and the eval-results folder."""
    root = tmp_path_factory.mktemp("hub_submission")
    assert icir_main(["submit", str(run_folder), "--out", str(root / "sub"), "--link", "https://example.org/model",
                      "--eval-results", str(root / "model_repo"), "--eval-results-dataset", REPO]) == 0
    return root / "sub", root / "model_repo"


def test_eval_results_match_the_results_json(submission, shared, tmp_path):
    folder, from_cli = submission
    paths = write_eval_results(folder, tmp_path / "repo", REPO)
    assert [p.relative_to(tmp_path / "repo").as_posix() for p in paths] == [".eval_results/test-org__icir-mcq.yaml"]
    assert files_of(tmp_path / "repo") == files_of(from_cli)

    entries = parse_eval_result_entries(yaml.safe_load(paths[0].read_text()))
    (results_path,) = (folder / "results").glob("results_*.json")
    results = json.loads(results_path.read_text())["results"][TASK]
    expected = {f"n5_{metric}": results[f"{metric},none"]
                for metric in ("acc", "pointer_r1", "pointer_r1_exact", "writer_r1")}
    assert {entry.task_id: entry.value for entry in entries} == expected
    manifest = json.loads((folder / "submission.json").read_text())
    revision = f"sha256-{manifest['model']['weights_sha256'][:12]}"
    for entry in entries:
        assert entry.dataset_id == REPO and entry.source_url == "https://example.org/model"
        assert "protocol icir-heads/2" in entry.notes and f"model revision {revision}" in entry.notes
        assert entry.date and entry.date.endswith("Z")

    # every task the entries name is declared by the eval.yaml that icir publish uploads
    staged = dry_run(shared / "mcq", tmp_path / "staged")
    declared = {task["id"] for task in yaml.safe_load((staged / "eval.yaml").read_text())["tasks"]}
    assert set(expected) <= declared


def test_eval_results_default_dataset(submission, tmp_path):
    (path,) = write_eval_results(submission[0], tmp_path / ".eval_results")
    assert path.parent == tmp_path / ".eval_results"
    (entry, *_) = parse_eval_result_entries(yaml.safe_load(path.read_text()))
    assert entry.dataset_id == "icir-heads/ICIR-MCQ"


def test_vhs_eval_results(shared, tmp_path):
    (run,) = [p for p in (shared / "ref_vhs").iterdir() if p.is_dir()]
    assert icir_main(["submit", str(run), "--out", str(tmp_path / "sub")]) == 0
    (path,) = write_eval_results(tmp_path / "sub", tmp_path / "repo", vhs_repo_id="test-org/vhs")
    assert path.name == "test-org__vhs.yaml"
    entries = {e.task_id: e for e in parse_eval_result_entries(yaml.safe_load(path.read_text()))}
    (results_path,) = (tmp_path / "sub" / "results").glob("results_*.json")
    results = json.loads(results_path.read_text())["results"]["vhs_single_n5"]
    votes = [value for key, value in results.items() if key.startswith("vote_r1@")]
    assert {task: entry.value for task, entry in entries.items()} == {
        "single_needle_n5_acc": results["acc,none"], "single_needle_n5_pointer_r1": results["pointer_r1,none"],
        "single_needle_n5_vote_r1": max(votes)}
    assert all(entry.dataset_id == "test-org/vhs" and entry.source_url is None for entry in entries.values())
    assert "best K = " in entries["single_needle_n5_vote_r1"].notes
