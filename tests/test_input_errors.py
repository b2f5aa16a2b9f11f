"""Bad input refused in one line (issue 27, item 7): exit status 2, the file or argument named with
what to do, no traceback, nothing written, and no model loaded where the input allows it.

Every case runs the real ``icir`` command on the shared tiny model and toy datasets
(`lm_eval_helpers.build_shared`): in this process (`harness.cli.main`), or, where the model loads
and transformers writes to the process's own stderr, as a subprocess. "No model loaded" is
checked by making lm-eval's ``HFMultimodalLM.__init__`` (which loads the weights) fail the test
if it is reached.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lm_eval.models.hf_vlms import HFMultimodalLM
from lm_eval_helpers import eval_args, full_run

from harness.cli import main as icir_main

pytestmark = pytest.mark.slow

TASK = "icir_mcq_n5"


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes); empty when `folder` does not exist."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line(capsys, command: str, *named: str) -> str:
    """The single stderr line ``icir COMMAND: error: ...``; it names each of `named`."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"icir {command}: error: "), err
    assert "Traceback" not in err
    for text in named:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture(autouse=True)
def lm_eval_logs_to_this_stderr(capsys):
    """Point lm-eval's log handler (made once per process, on the stderr of the test that first ran
    ``icir eval``, closed since) at this test's captured stderr: what lm-eval logs is seen here, as a
    user sees it."""
    for handler in logging.getLogger("lm_eval").handlers:
        if type(handler) is logging.StreamHandler:  # not pytest's own capture handlers (subclasses)
            handler.stream = sys.stderr  # not setStream: it flushes the old, closed stream


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if any model's weights start to load (lm-eval's ``hf-multimodal`` init)."""

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr(HFMultimodalLM, "__init__", loaded)


def _eval(shared: Path, out: Path, model_args: str) -> list[str]:
    """``icir eval`` of ICIR-MCQ n5 on the tiny model into `out`, with `model_args`."""
    return eval_args(shared, "--tasks", TASK, "--output_path", str(out), model_args=model_args)


# ---------------------------------------------------------------------------- icir eval


def test_truncated_capture_settings_file(shared, tmp_path, capsys, no_model_load):
    store = tmp_path / "store"
    store.mkdir()
    settings = store / "capture_settings.json"
    text = (shared / "ref_mcq" / "model" / "activations" / "capture_settings.json").read_text()
    settings.write_text(text[: len(text) // 2])
    before = _files(store)
    assert icir_main(_eval(shared, tmp_path / "out", f"store={store}")) == 2
    line = _one_line(capsys, "eval", str(settings))
    assert "store=DIR" in line
    assert _files(store) == before and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("argument", "named"), [
    ("dtype=float99", "dtype 'float99'"),
    ("attn_implementation=eager_bogus", "attn_implementation 'eager_bogus'"),
])
def test_unknown_dtype_or_attention_kernel(shared, tmp_path, capsys, no_model_load, argument, named):
    assert icir_main(_eval(shared, tmp_path / "out", argument)) == 2
    _one_line(capsys, "eval", named)
    assert not (tmp_path / "out").exists()


def test_store_naming_a_file(shared, tmp_path, capsys, no_model_load):
    store = tmp_path / "store.txt"
    store.write_text("not a folder\n")
    assert icir_main(_eval(shared, tmp_path / "out", f"store={store}")) == 2
    _one_line(capsys, "eval", f"store {store}", "folder")
    assert store.read_text() == "not a folder\n" and not (tmp_path / "out").exists()


def test_weights_of_another_shape_at_the_model_path(shared, tmp_path):
    """The weights load (their shapes are known only then); the run's stderr ends in the one line,
    without transformers' per-tensor load report or a traceback."""
    from harness.tiny_models import save_tiny

    model = tmp_path / "model"
    shutil.copytree(shared / "model", model)
    other = save_tiny("qwen3_vl", tmp_path / "wider", seed=0, num_attention_heads=6)  # hidden size 96, not 64
    shutil.copyfile(other / "model.safetensors", model / "model.safetensors")
    args = [a.replace(str(shared / "model"), str(model)) for a in _eval(shared, tmp_path / "out", "")]
    done = subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "LOAD REPORT" not in done.stderr and "MISMATCH" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"icir eval: error: the weights in {model} ") and "config.json" in last
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- icir publish


def test_publish_dry_run_of_a_truncated_parquet_file(shared, tmp_path, capsys):
    folder = tmp_path / "mcq"
    shutil.copytree(shared / "mcq", folder)
    parquet = folder / "n5" / "test-00000-of-00001.parquet"
    parquet.write_bytes(parquet.read_bytes()[: parquet.stat().st_size // 2])
    staged = tmp_path / "staged"
    assert icir_main(["publish", str(folder), "--repo-id", "test-org/icir-mcq", "--dry-run", str(staged)]) == 2
    _one_line(capsys, "publish", str(parquet), "rebuild")
    assert not staged.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".staged")] == []


# ---------------------------------------------------------------------------- icir leaderboard verify


def test_verify_without_device_runs_on_the_device_there_is(shared, tmp_path, capsys, monkeypatch):
    """README's command (no --device) on a machine without CUDA runs on the CPU."""
    import torch

    run = full_run(shared, tmp_path / "run", TASK)
    submission = tmp_path / "sub"
    assert icir_main(["submit", str(run), "--out", str(submission)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = icir_main(["leaderboard", "verify", str(submission), "--docs", "2",
                      "--metadata", json.dumps({"icir_mcq_data": str(shared / "mcq")})])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verified on 2 re-run documents" in out


# ---------------------------------------------------------------------------- icir ablate


def test_ablate_rankings_without_a_writer_ranking(shared, tmp_path, capsys, no_model_load):
    rankings = tmp_path / "rankings"
    rankings.mkdir()
    found = shared / "ref_mcq" / "model" / "icir_artifacts" / TASK
    shutil.copyfile(found / "pointer_ranking.json", rankings / "pointer_ranking.json")
    out = tmp_path / "out"
    assert icir_main(["ablate", "--rankings", str(rankings), "--tasks", "vhs_single_n5",
                      "--metadata", json.dumps({"vhs_data": str(shared / "vhs")}), "--device", "cpu",
                      "--model_args", f"pretrained={shared / 'model'},image_budget=64",
                      "--output_path", str(out), "--ks", "1", "--top", "4", "--limit", "1"]) == 2
    _one_line(capsys, "ablate", str(rankings), "writer_ranking.json")
    assert not out.exists()
