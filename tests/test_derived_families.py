"""Families outside the adapter table, end to end: icir eval (ICIR-MCQ, then VHs with the
transferred ranking), icir analyze, icir submit and icir leaderboard validate, on a tiny random
model of each `harness.tiny_models.DERIVED_ARCHS` family, with their derived adapter and the
processor's own image input (a deviation the protocol record names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from filelock import FileLock
from lm_eval_helpers import shared_root

from harness.cli import main as icir_main
from harness.tiny_models import DERIVED_ARCHS, save_tiny

SAMPLES = 20  # per config: 16 train + 4 eval documents, enough for writer probes to fit
VHS_DOCS = 4


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A small ICIR-MCQ n5 folder and a VHs N=5 folder from the toy corpus (once per session)."""
    from icir_mcq.build import build_icir_mcq
    from icir_mcq.toy import write_toy_corpus
    from vhs_adapter.build import build_vhs
    from vhs_adapter.toy_questions import write_toy_vhs_questions

    root = shared_root(tmp_path_factory).parent / "derived_families_data"
    with FileLock(str(root) + ".lock"):
        if not (root / "done").exists():
            corpus = write_toy_corpus(root / "toy", 120, seed=0, overwrite=True)
            build_icir_mcq(corpus.coco_root, [corpus.mmniah_file], root / "mcq", seed=0, configs=("n5",),
                           samples=SAMPLES, max_passage_chars=40, overwrite=True)
            write_toy_vhs_questions(corpus.coco_root, root / "vhs_qa", seed=0, sizes=(5,), per_size=VHS_DOCS,
                                    overwrite=True)
            build_vhs(root / "vhs_qa", corpus.coco_root, root / "vhs", sizes=[5], overwrite=True)
            (root / "done").touch()
    return root


def _eval(model: Path, data: Path, out: Path, tasks: str, model_args: str = "") -> None:
    args = f"pretrained={model}" + (f",{model_args}" if model_args else "")
    assert icir_main(["eval", "--device", "cpu", "--batch_size", "1", "--model_args", args, "--tasks", tasks,
                      "--metadata", json.dumps({"icir_mcq_data": str(data / "mcq"), "vhs_data": str(data / "vhs")}),
                      "--gen_kwargs", "max_gen_toks=2", "--output_path", str(out)]) == 0


@pytest.mark.parametrize("arch", DERIVED_ARCHS)
def test_eval_transfer_analyze_submit_validate(arch, data, tmp_path, capsys):
    model = save_tiny(arch, tmp_path / "models" / arch)
    out = tmp_path / "runs"
    _eval(model, data, out, "icir_mcq_n5")
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    found = run / "icir_artifacts" / "icir_mcq_n5"
    _eval(model, data, out, "vhs_single_n5",
          f"heads_ranking={found / 'pointer_ranking.json'},writer_probes={found / 'writer_probes'}")
    assert icir_main(["analyze", str(run)]) == 0
    results = [json.loads(p.read_text()) for p in sorted(run.glob("results_*.json"))]
    record = results[-1]["icir"]["protocol"]
    assert record["settings"]["image_inputs"]["derived"] is True
    assert any("processor's defaults" in line for line in record["deviations"])
    vhs = results[-1]["results"]["vhs_single_n5"]
    assert vhs["pointer_r1,none"] == vhs["vote_r1@1,none"]
    assert "pointer_r1,none" in results[0]["results"]["icir_mcq_n5"]
    submission = tmp_path / "submission"
    assert icir_main(["submit", str(run), "--out", str(submission)]) == 0
    capsys.readouterr()
    assert icir_main(["leaderboard", "validate", str(submission)]) == 0, capsys.readouterr().out


def test_an_untested_model_type_runs_only_when_the_user_opts_in(data, tmp_path, capsys, monkeypatch):
    """A model type outside the conformance-tested set (here Mistral 3, taken out of it) is refused
    at load in one line naming the opt-in, exit 2; with ``untested_architecture=true`` it runs on
    the derived adapter and the protocol record names the deviation."""
    import harness.tiny_models

    model = save_tiny("mistral3", tmp_path / "model")
    monkeypatch.setattr(harness.tiny_models, "TESTED_MODEL_TYPES", harness.tiny_models.TESTED_MODEL_TYPES - {"mistral3"})
    out = tmp_path / "runs"
    capsys.readouterr()
    assert icir_main(["eval", "--device", "cpu", "--model_args", f"pretrained={model}", "--tasks", "icir_mcq_n5",
                      "--metadata", json.dumps({"icir_mcq_data": str(data / "mcq")}), "--output_path", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert "no tiny model of this model type passes the conformance tests" in error
    assert "untested_architecture=true" in error and "\n" not in error and not out.exists()
    _eval(model, data, out, "icir_mcq_n5", "untested_architecture=true")
    (results,) = [json.loads(p.read_text()) for run in out.iterdir() for p in run.glob("results_*.json")]
    record = results["icir"]["protocol"]
    assert record["settings"]["image_inputs"]["conformance_tested"] is False and not record["on_protocol"]
    assert any("model type mistral3 is not conformance-tested" in line for line in record["deviations"])
