"""`icir analyze RUN` reads the run's own store, checks every input, and writes nothing before that.

- The store is RUN/activations or ``--store DIR``, never the absolute path a results file
  recorded: a run folder moved elsewhere, with another model's store put at its old path, is
  analysed from its own store; a store whose model identity or capture settings differ from the
  run's protocol record is refused (one line, exit 2).
- Every results file of the folder is analysed and every unit folder checked before anything is
  written: a failure in the second analysis leaves every file of the run folder as it was.
- A cut results, samples or capture-settings file is one line naming it, exit 2, no traceback.

The run folders are copies of the shared reference runs (tests/lm_eval_helpers.py): the
ICIR-MCQ run, and a folder holding it and the VHs run (as ``icir eval`` leaves a folder that
evaluated ICIR-MCQ, then VHs). ``--overwrite`` lets a copy's artifact folders be replaced even
when the shared runs were made by an older version of the package.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from harness.activation_store import SETTINGS_FILE as SETTINGS
from harness.cli import main as icir_main
from harness.constants import STORE_FOLDER as STORE


def _tree(folder: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under `folder`."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _analyze(capsys, *args: str | Path) -> tuple[int, str]:
    """``icir analyze ARGS``: its exit code and stderr."""
    capsys.readouterr()
    code = icir_main(["analyze", *map(str, args)])
    return code, capsys.readouterr().err


def _one_line_error(err: str, *names: str | Path) -> str:
    """Check that `err` is one ``icir analyze`` error line naming each of `names`; return it."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("icir analyze: error: "), err
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


def _results_file(run: Path, task: str) -> Path:
    """The results file of `run` that evaluated `task`."""
    (path,) = [p for p in run.glob("results_*.json") if task in json.loads(p.read_text())["n-samples"]]
    return path


def _set_store(results_file: Path, store: Path) -> None:
    """Record `store` as the results file's ``store=`` (as ``icir eval`` records the run's own
    store), written compactly, so any rewrite of the file changes its bytes."""
    results = json.loads(results_file.read_text())
    results["config"]["model_args"]["store"] = str(store)
    results_file.write_text(json.dumps(results))


def _copy_run(reference: Path, out: Path) -> Path:
    """A copy of the run folder under `reference` in ``out/<model>``, recording its own store."""
    (source,) = [p for p in reference.iterdir() if p.is_dir()]
    run = out / source.name
    shutil.copytree(source, run)
    for results_file in run.glob("results_*.json"):
        _set_store(results_file, run / STORE)
    return run


def _edit_settings(store: Path, edit) -> None:
    """Apply `edit` to the capture settings of `store` (making it, to the analysis, another model's or capture's)."""
    settings = json.loads((store / SETTINGS).read_text())
    edit(settings)
    (store / SETTINGS).write_text(json.dumps(settings, indent=2, sort_keys=True))


@pytest.fixture
def mcq_run(shared, tmp_path) -> Path:
    """A copy of the ICIR-MCQ reference run folder (results, samples, store, artifacts)."""
    return _copy_run(shared / "ref_mcq", tmp_path / "out")


@pytest.fixture
def two_runs(shared, mcq_run) -> Path:
    """The ICIR-MCQ run folder with the VHs reference run added to it: two results files (ICIR-MCQ,
    then VHs), one store holding both runs' captures, both runs' artifact folders."""
    (source,) = [p for p in (shared / "ref_vhs").iterdir() if p.is_dir()]
    assert (source / STORE / SETTINGS).read_bytes() == (mcq_run / STORE / SETTINGS).read_bytes()
    for task_dir in (source / STORE / "shards").iterdir():
        shutil.copytree(task_dir, mcq_run / STORE / "shards" / task_dir.name)
    for unit in (source / "icir_artifacts").iterdir():
        shutil.copytree(unit, mcq_run / "icir_artifacts" / unit.name)
    (results_file,) = source.glob("results_*.json")
    shutil.copy(results_file, mcq_run / results_file.name)
    _set_store(mcq_run / results_file.name, mcq_run / STORE)
    assert sorted(mcq_run.glob("results_*.json"))[-1].name == results_file.name  # VHs is the newer run
    return mcq_run


# --- item 5: the store is the run folder's own (or --store), checked against the run's record ---


def test_a_moved_run_folder_is_analysed_from_its_own_store(mcq_run, tmp_path, capsys):
    """The run folder moves; another model's store is put at the path its results recorded. The
    analysis reads the moved folder's own store and leaves the other one alone."""
    results_file = _results_file(mcq_run, "icir_mcq_n5")
    recorded = json.loads(results_file.read_text())["icir"]["protocol"]["model"]
    moved = tmp_path / "moved" / mcq_run.name
    shutil.move(mcq_run, moved)
    shutil.copytree(moved / STORE, mcq_run / STORE)  # the old path: a store of another model
    _edit_settings(mcq_run / STORE, lambda s: s["identity"].update(weights_sha256="0" * 64))
    other = _tree(mcq_run)
    code, err = _analyze(capsys, moved, "--overwrite")
    assert code == 0, err
    analysed = json.loads((moved / results_file.name).read_text())["icir"]["protocol"]["model"]
    assert analysed["weights_sha256"] == recorded["weights_sha256"] != "0" * 64
    assert _tree(mcq_run) == other


FOREIGN_STORES = {
    "model.weights_sha256": lambda s: s["identity"].update(weights_sha256="0" * 64),
    "model.name": lambda s: s.update(model="/elsewhere/another-model"),
    "model.dtype": lambda s: s.update(dtype="torch.bfloat16"),
    "model.architecture": lambda s: s.update(architecture="LlavaForConditionalGeneration"),
    "model.n_layers": lambda s: s.update(layers=s["layers"] * 2),
    "settings.readout": lambda s: s.update(readout=["cattok", "+1"]),
    "settings.image_inputs.side": lambda s: s["image_inputs"].update(side=2 * s["image_inputs"]["side"]),
    "settings.pointer_scores.eq3": lambda s: s.update(eq3="proxy_causal"),
}


@pytest.mark.parametrize("fact", sorted(FOREIGN_STORES))
def test_a_store_of_another_model_or_capture_is_refused(mcq_run, fact, capsys):
    """The run folder's store differs from the results file's protocol record in one fact:
    refused, naming the store, the results file and the fact; nothing written (--overwrite too)."""
    _edit_settings(mcq_run / STORE, FOREIGN_STORES[fact])
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run, "--overwrite")
    assert code == 2
    _one_line_error(err, mcq_run / STORE, _results_file(mcq_run, "icir_mcq_n5"), fact, "--store")
    assert _tree(mcq_run) == before


def _drop_results_record(run: Path) -> Path:
    """Remove ``icir.protocol`` (and the rest of ``icir``) from the ICIR-MCQ results file, as a
    plain lm_eval run leaves it; return that file."""
    results_file = _results_file(run, "icir_mcq_n5")
    results = json.loads(results_file.read_text())
    del results["icir"]
    results_file.write_text(json.dumps(results))
    return results_file


def test_without_a_results_record_the_unit_folders_record_is_compared(mcq_run, capsys):
    """A results file without ``icir.protocol`` (a plain lm_eval run): its unit folder's protocol.json is the record."""
    _drop_results_record(mcq_run)
    _edit_settings(mcq_run / STORE, FOREIGN_STORES["model.weights_sha256"])
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run)
    assert code == 2
    _one_line_error(err, mcq_run / STORE, mcq_run / "icir_artifacts" / "icir_mcq_n5" / "protocol.json",
                    "model.weights_sha256")
    assert _tree(mcq_run) == before


def test_without_any_record_the_results_config_is_compared(mcq_run, capsys):
    """No ``icir.protocol`` and no artifacts: the results' model_args name the model and its image side."""
    results_file = _drop_results_record(mcq_run)
    shutil.rmtree(mcq_run / "icir_artifacts")
    _edit_settings(mcq_run / STORE, FOREIGN_STORES["model.name"])
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run)
    assert code == 2
    _one_line_error(err, mcq_run / STORE, f"{results_file} (config.model_args)", "model.name")
    assert _tree(mcq_run) == before


def test_a_store_named_with_store_is_read_and_checked(mcq_run, tmp_path, capsys):
    """``--store DIR``: the store the run captured into, wherever it is; refused when it is another's."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(mcq_run / STORE, elsewhere)
    foreign = tmp_path / "foreign"
    shutil.copytree(elsewhere, foreign)
    _edit_settings(foreign, FOREIGN_STORES["model.weights_sha256"])
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run, "--store", foreign, "--overwrite")
    assert code == 2
    _one_line_error(err, foreign, "model.weights_sha256")
    assert _tree(mcq_run) == before
    code, err = _analyze(capsys, mcq_run, "--store", elsewhere, "--overwrite")
    assert code == 0, err
    assert not (mcq_run / STORE).exists()


def test_a_run_folder_without_its_store_names_store(mcq_run, shared, capsys):
    """No RUN/activations: refused, naming --store and the recorded store, even when that path exists."""
    shutil.rmtree(mcq_run / STORE)
    (reference,) = [p for p in (shared / "ref_mcq").iterdir() if p.is_dir()]
    _set_store(_results_file(mcq_run, "icir_mcq_n5"), reference / STORE)
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run, "--overwrite")
    assert code == 2
    _one_line_error(err, mcq_run, "--store", f"store={reference / STORE}")
    assert _tree(mcq_run) == before


# --- item 6: every input read and checked, every analysis computed, before anything is written ---


def test_a_failing_second_analysis_leaves_the_run_folder_as_it_was(two_runs, capsys):
    """ICIR-MCQ then VHs in one folder; the VHs run (newest) analyses, the ICIR-MCQ one fails (its
    store lost a shard): exit 2, and no file of the folder was rewritten, added or removed."""
    (shard, *_) = sorted((two_runs / STORE / "shards" / "icir_mcq_n5").glob("r*.safetensors"))
    shard.unlink()
    shard.with_name(shard.name + ".sha256").unlink()
    before = _tree(two_runs)
    code, err = _analyze(capsys, two_runs, "--overwrite")
    assert code == 2
    _one_line_error(err, two_runs / STORE, "icir_mcq_n5")
    assert _tree(two_runs) == before


def test_a_damaged_shard_is_not_set_aside_by_the_analysis(two_runs, capsys):
    """A shard cut short: the analysis refuses (its documents are missing) and, reading the store
    read-only, renames nothing in it either (a writer's rerun sets it aside and recomputes)."""
    (shard, *_) = sorted((two_runs / STORE / "shards" / "icir_mcq_n5").glob("r*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:100])
    before = _tree(two_runs)
    with pytest.warns(UserWarning, match="its documents are not read"):
        code, err = _analyze(capsys, two_runs, "--overwrite")
    assert code == 2 and "icir_mcq_n5" in err and "Traceback" not in err
    assert _tree(two_runs) == before


def test_a_folder_of_two_runs_analyses_both(two_runs, capsys):
    """The same folder, whole: each results file gets its head metrics (newest first, then written)."""
    code, err = _analyze(capsys, two_runs, "--overwrite")
    assert code == 0, err
    for task in ("icir_mcq_n5", "vhs_single_n5"):
        results = json.loads(_results_file(two_runs, task).read_text())
        assert task in results["icir"]["summaries"] and "vote_r1@1,none" in results["results"][task]


# --- item 7: a cut input file is one line naming it, exit 2, nothing written ---


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_results_file_is_one_line(mcq_run, capsys):
    results_file = _results_file(mcq_run, "icir_mcq_n5")
    _cut(results_file)
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run, "--overwrite")
    assert code == 2
    _one_line_error(err, results_file)
    assert _tree(mcq_run) == before


def test_a_truncated_results_file_is_one_line_from_the_command(mcq_run):
    """The same through the ``icir`` command's own process: no traceback on stderr."""
    import subprocess
    import sys

    results_file = _results_file(mcq_run, "icir_mcq_n5")
    _cut(results_file)
    done = subprocess.run([sys.executable, "-m", "harness.cli", "analyze", str(mcq_run)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 2
    _one_line_error(done.stderr, results_file)


def test_a_truncated_samples_file_is_one_line(mcq_run, capsys):
    (samples,) = mcq_run.glob("samples_icir_mcq_n5_*.jsonl")
    _cut(samples)
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run, "--overwrite")
    assert code == 2
    _one_line_error(err, samples, "line")
    assert _tree(mcq_run) == before


def test_truncated_capture_settings_are_one_line(mcq_run, capsys):
    _cut(mcq_run / STORE / SETTINGS)
    before = _tree(mcq_run)
    code, err = _analyze(capsys, mcq_run, "--overwrite")
    assert code == 2
    _one_line_error(err, mcq_run / STORE / SETTINGS)
    assert _tree(mcq_run) == before


def test_a_run_where_every_head_scores_one_is_analysed(shared, tmp_path, capsys):
    """VHs N=1 (the oracle haystack): every head points at the only image, so every head has R@1 = 1,
    the exact and Eq. 3 grids are constant and their Spearman correlation is undefined. The analysis
    reports it as undefined (null) instead of failing after a results file was rewritten."""
    from lm_eval_helpers import IMAGE_BUDGET

    from vhs_adapter.build import build_vhs
    from vhs_adapter.toy_questions import write_toy_vhs_questions

    coco = shared / "toy" / "coco"
    write_toy_vhs_questions(coco, tmp_path / "vhs_qa", seed=0, sizes=(1,), per_size=4)
    build_vhs(tmp_path / "vhs_qa", coco, tmp_path / "vhs", sizes=[1])
    out = tmp_path / "out"
    assert icir_main(["eval", "--device", "cpu", "--batch_size", "1", "--tasks", "vhs_single_n1",
                      "--model_args", f"pretrained={shared / 'model'},image_budget={IMAGE_BUDGET}",
                      "--metadata", json.dumps({"vhs_data": str(tmp_path / "vhs")}),
                      "--gen_kwargs", "max_gen_toks=2", "--output_path", str(out)]) == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    code, err = _analyze(capsys, run, "--overwrite")
    assert code == 0, err
    (results_file,) = run.glob("results_*.json")
    row = json.loads(results_file.read_text())["results"]["vhs_single_n1"]
    assert row["pointer_r1_oracle,none"] == row["pointer_r1_oracle_exact,none"] == 1.0
    assert "pointer_rank_spearman,none" not in row
    summary = json.loads((run / "icir_artifacts" / "vhs_single_n1" / "summary.json").read_text())
    assert summary["pointer_rank_spearman"] is None
