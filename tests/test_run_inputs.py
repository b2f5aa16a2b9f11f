"""Bad run inputs are refused before the model loads, with one clear line (exit code 2).

Rankings (empty, duplicate heads, too short, missing fields, not JSON), writer probes (NaN, wrong
dtype, non-numeric R@1), arguments (--limit <= 0, a non-positive image budget, an unknown model
argument, an --output_path that is a file), and an --output_path holding another run's artifacts.
"""

from __future__ import annotations

import json
import shutil

import lm_eval
import pytest
import torch
from lm_eval_helpers import artifacts_of, icir_args
from safetensors.torch import load_file, save_file

from harness.cli import main as icir_main

pytestmark = pytest.mark.slow


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if lm-eval starts (it loads the model first): the check must come before."""

    def refuse(*args, **kwargs):
        raise AssertionError("lm-eval (and the model) started before the input was checked")

    monkeypatch.setattr(lm_eval, "simple_evaluate", refuse)


def _refused(args, capsys, *fragments):
    capsys.readouterr()
    assert icir_main(args) == 2
    # The error is the last line; lm-eval's logging may print its own lines before it.
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("icir eval: error: ") and all(f in err for f in fragments), err
    return err


def _ranking(tmp_path, shared, edit):
    document = json.loads((artifacts_of(shared / "ref_mcq") / "icir_mcq_n5" / "pointer_ranking.json").read_text())
    path = tmp_path / "ranking.json"
    path.write_text(edit(document) if callable(edit) else edit)
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: json.dumps({**d, "ranking": []}), "ranks 0 heads; it must rank all 16 heads"),
        (lambda d: json.dumps({**d, "ranking": d["ranking"][:2], "r1": d["r1"][:2]}), "ranks 2 heads"),
        (lambda d: json.dumps({**d, "ranking": ["L00H00"] * 16}), "lists heads more than once (L00H00)"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "n_layers"}), "lacks n_layers"),
        ("\x89PNG\x00binary", "cannot read head ranking"),
    ],
    ids=["empty", "short", "duplicates", "no n_layers", "binary"],
)
def test_bad_rankings_are_refused_before_the_model_loads(shared, tmp_path, capsys, no_model_load, edit, message):
    path = _ranking(tmp_path, shared, edit)
    _refused(icir_args(shared, tmp_path / "out", model_args=f"heads_ranking={path}"), capsys, str(path), message)


def _probes(tmp_path, shared, tensor_edit=None, info_edit=None):
    folder = tmp_path / "probes"
    shutil.copytree(artifacts_of(shared / "ref_mcq") / "icir_mcq_n5" / "writer_probes", folder)
    if tensor_edit:
        tensors = load_file(str(folder / "writer_probes.safetensors"))
        save_file(tensor_edit(tensors), str(folder / "writer_probes.safetensors"))
    if info_edit:
        settings = json.loads((folder / "writer_probes.json").read_text())
        info_edit(settings["info"])
        (folder / "writer_probes.json").write_text(json.dumps(settings))
    return folder


@pytest.mark.parametrize(
    ("tensor_edit", "info_edit", "message"),
    [
        (lambda t: {**t, "f_bias": torch.full_like(t["f_bias"], float("nan"))}, None, "f_bias holds NaN"),
        (lambda t: {**t, "g_weight": t["g_weight"].long()}, None, "g_weight is torch.int64, not floating point"),
        (None, lambda info: info["writer_r1"].update(L00H00="high"), "writer R@1 of L00H00 is not a number"),
    ],
    ids=["nan", "int64", "string r1"],
)
def test_bad_writer_probes_are_refused_before_the_model_loads(shared, tmp_path, capsys, no_model_load,
                                                              tensor_edit, info_edit, message):
    folder = _probes(tmp_path, shared, tensor_edit, info_edit)
    _refused(icir_args(shared, tmp_path / "out", model_args=f"writer_probes={folder}"), capsys, message)


@pytest.mark.parametrize(
    ("extra", "model_args", "message"),
    [
        (["--limit", "0"], "", "--limit must be a positive number"),
        (["--limit", "-1"], "", "--limit must be a positive number"),
        ([], "image_budget=-5", "image_budget must be a positive side in pixels, got -5"),
        ([], "pointer_mod=exact", "unknown model argument 'pointer_mod' for hf-multimodal-heads; did you mean"),
        ([], "writer_epoch=3", "unknown writer-probe setting 'writer_epoch'"),
    ],
)
def test_bad_arguments_are_refused_before_the_model_loads(shared, tmp_path, capsys, no_model_load,
                                                          extra, model_args, message):
    args = icir_args(shared, tmp_path / "out", model_args=model_args)
    if extra:
        at = args.index("--limit")
        args = args[:at] + extra + args[at + 2:]
    _refused(args, capsys, message)


def test_an_output_path_that_is_a_file_is_refused(shared, tmp_path, capsys, no_model_load):
    (tmp_path / "out").write_text("not a folder")
    _refused(icir_args(shared, tmp_path / "out"), capsys, "is a file; give a folder")


def test_a_run_never_mixes_into_another_runs_artifacts(shared, tmp_path, capsys):
    out = tmp_path / "out"
    assert icir_main(icir_args(shared, out)) == 0
    assert icir_main(icir_args(shared, out)) == 0  # the same run again: its own folder, reused
    args = icir_args(shared, out)
    at = args.index("--limit")
    shorter = args[:at] + ["--limit", "12"] + args[at + 2:]
    _refused(shorter, capsys, "holds the artifacts of another run", "pass --overwrite")
    folder = artifacts_of(out) / "icir_mcq_n5"
    assert json.loads((folder / "protocol.json").read_text())["datasets"]["icir_mcq_n5"]["documents"] == 19
    assert icir_main(shorter + ["--overwrite"]) == 0  # the old folder is replaced whole
    assert json.loads((folder / "protocol.json").read_text())["datasets"]["icir_mcq_n5"]["documents"] == 12
