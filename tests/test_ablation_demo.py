"""icir ablate end to end on the shipped demo model: its overlap arm (which holds the pointer head
L00H00) is the causal one, the random controls barely move accuracy, the unablated baseline is
icir eval's answer on every document, and a killed grid resumes to the same tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.ablation import run as run_module
from harness.cli import main as icir_main

TASK = "vhs_single_n5"
GRID = ["--ks", "1,2", "--top", "6"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The demo's data (a fresh demo-world draw) and an icir eval of the demo model on it (both stages)."""
    out = tmp_path_factory.mktemp("ablation_demo")
    assert icir_main(["demo", "--out", str(out), "--no-eval", "--images", "500", "--samples", "120",
                      "--vhs-questions", "40"]) == 0
    common = ["--device", "cpu", "--batch_size", "1", "--output_path", str(out / "eval"), "--metadata",
              json.dumps({"icir_mcq_data": str(out / "icir_mcq"), "vhs_data": str(out / "vhs")})]
    assert icir_main(["eval", "--tasks", "icir_mcq", *common]) == 0
    found = out / "eval" / "icir-demo-model" / "icir_artifacts" / "icir_mcq"
    assert icir_main(["eval", "--tasks", TASK, *common, "--model_args",
                      f"heads_ranking={found / 'pointer_ranking.json'}"]) == 0
    return out


def _ablate(demo: Path, out: Path, *extra: str) -> int:
    return icir_main(["ablate", "--rankings", str(demo / "eval" / "icir-demo-model" / "icir_artifacts" / "icir_mcq"),
                      "--tasks", TASK, "--metadata", json.dumps({"vhs_data": str(demo / "vhs")}), "--device", "cpu",
                      "--output_path", str(out), *GRID, *extra])


def _cells(out: Path) -> dict:
    rows = pq.read_table(out / "icir-demo-model" / "ablation" / "cells.parquet").to_pylist()
    return {(r["arm"], r["K"], r["seed"]): r for r in rows}


def test_overlap_arm_is_causal_and_random_controls_are_not(demo, tmp_path, capsys):
    assert _ablate(demo, tmp_path / "grid") == 0
    out = capsys.readouterr().out
    assert "Table 14" in out and "dose_response.png" in out
    cells = _cells(tmp_path / "grid")
    grid = json.loads((tmp_path / "grid" / "icir-demo-model" / "ablation" / "grid.json").read_text())
    assert grid["arms"]["overlap"][0] == "L00H00"
    baseline = cells[("baseline", 0, -1)]["accuracy"]
    for k in (1, 2):
        overlap = cells[("overlap", k, -1)]
        randoms = [cells[("random", k, seed)] for seed in (0, 1, 2)]
        assert all(p < 0.05 for p in overlap["mcnemar_p"]) and overlap["significant_vs_seeds"] == 3
        assert overlap["accuracy"] < min(r["accuracy"] for r in randoms)
        assert abs(baseline - overlap["random_mean"]) <= 0.05 + 1e-12  # the random arms' mean drop is near zero


def test_baseline_is_icir_eval_on_every_document(demo, tmp_path):
    assert _ablate(demo, tmp_path / "grid", "--ks", "1", "--random-seeds", "0") == 0
    outcomes = pq.read_table(tmp_path / "grid" / "icir-demo-model" / "ablation" / "outcomes.parquet").to_pylist()
    baseline = {r["doc_id"]: r["correct"] for r in outcomes if r["cell"] == "baseline"}
    docs = demo / "eval" / "icir-demo-model" / "icir_artifacts" / TASK / "documents.jsonl"
    evaluated = {row["doc_id"]: row["correct"] for row in map(json.loads, docs.read_text().splitlines())}
    assert baseline == evaluated and len(baseline) == 40


def test_full_forwards_give_the_same_outcomes(demo, tmp_path):
    assert _ablate(demo, tmp_path / "shared", "--limit", "6") == 0
    assert _ablate(demo, tmp_path / "full", "--limit", "6", "--full-forwards") == 0
    read = lambda p: pq.read_table(p / "icir-demo-model" / "ablation" / "outcomes.parquet").to_pylist()  # noqa: E731
    assert read(tmp_path / "shared") == read(tmp_path / "full")


def test_killed_grid_resumes_to_identical_tables(demo, tmp_path, monkeypatch):
    assert _ablate(demo, tmp_path / "whole", "--limit", "8") == 0
    real_add = run_module.OutcomeLog.add
    written = []

    def killed_after_three(self, row):
        if len(written) == 3:
            with open(self.path, "a") as handle:  # a line cut off by the kill
                handle.write('{"doc_id": 3, "cel')
            raise KeyboardInterrupt
        written.append(row)
        real_add(self, row)

    monkeypatch.setattr(run_module.OutcomeLog, "add", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        _ablate(demo, tmp_path / "resumed", "--limit", "8")
    monkeypatch.setattr(run_module.OutcomeLog, "add", real_add)
    assert _ablate(demo, tmp_path / "resumed", "--limit", "8") == 0
    for name in ("table14.md", "grid.json"):
        whole = (tmp_path / "whole" / "icir-demo-model" / "ablation" / name).read_text()
        assert (tmp_path / "resumed" / "icir-demo-model" / "ablation" / name).read_text() == whole
    for name in ("cells.parquet", "outcomes.parquet"):
        whole = pq.read_table(tmp_path / "whole" / "icir-demo-model" / "ablation" / name).to_pylist()
        assert pq.read_table(tmp_path / "resumed" / "icir-demo-model" / "ablation" / name).to_pylist() == whole


def test_other_settings_in_the_same_folder_are_refused(demo, tmp_path, capsys):
    assert _ablate(demo, tmp_path / "grid", "--limit", "2") == 0
    assert _ablate(demo, tmp_path / "grid", "--limit", "2", "--random-seeds", "5") == 2
    assert "holds a grid run with other settings (cells)" in capsys.readouterr().err


def test_bad_input_before_the_model_loads(demo, tmp_path, capsys):
    rankings = demo / "eval" / "icir-demo-model" / "icir_artifacts" / "icir_mcq"
    base = ["ablate", "--metadata", json.dumps({"vhs_data": str(demo / "vhs")}), "--output_path", str(tmp_path),
            "--top", "6"]
    assert icir_main([*base, "--rankings", str(rankings), "--tasks", "vhs_single_n3", "--ks", "1"]) == 2
    assert "vhs_single_n3" in capsys.readouterr().err
    assert icir_main([*base, "--rankings", str(rankings), "--tasks", "icir_mcq_n5", "--ks", "1"]) == 2
    assert "VHs single-needle tasks" in capsys.readouterr().err
    assert icir_main([*base, "--rankings", str(tmp_path), "--tasks", TASK, "--ks", "1"]) == 2
    assert "holds no pointer_ranking.json" in capsys.readouterr().err
    assert icir_main([*base, "--rankings", str(rankings), "--tasks", TASK, "--ks", "1,30"]) == 2
    assert "--ks [30] outside 1..24" in capsys.readouterr().err


def test_submission_carries_the_grid_and_the_validator_recomputes_it(demo, tmp_path):
    from lm_eval_helpers import rehash

    from harness.leaderboard.entries import load_entry
    from harness.leaderboard.validate import validate

    assert _ablate(demo, demo / "eval") == 0  # into the run folder, as make demo does
    sub = tmp_path / "sub"
    assert icir_main(["submit", str(demo / "eval" / "icir-demo-model"), "--out", str(sub)]) == 0
    assert validate(sub).failures == []
    cells = json.loads((sub / "ablation" / "cells.json").read_text())
    entry = load_entry(sub, None)
    overlap = [-r["minus_random"] for r in cells if r["arm"] == "overlap"]
    assert entry.row["ablation_drop"] == pytest.approx(sum(overlap) / len(overlap)) and entry.row["ablation_drop"] > 0.3
    cells[1]["minus_random"] += 0.1
    (sub / "ablation" / "cells.json").write_text(json.dumps(cells))
    rehash(sub)
    found = validate(sub).failures
    assert len(found) == 1 and "minus_random reported" in found[0], found
    outcomes = sub / "ablation" / "outcomes" / f"{TASK}.jsonl"
    lines = [json.loads(line) for line in outcomes.read_text().splitlines()]
    lines[0]["cells"]["overlap@1"]["correct"] = not lines[0]["cells"]["overlap@1"]["correct"]
    outcomes.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rehash(sub)
    assert any("overlap K=1" in line and "accuracy reported" in line for line in validate(sub).failures)


def test_through_generation_and_table12(demo, tmp_path, capsys):
    args = ("--limit", "6", "--ks", "1,2", "--random-seeds", "0")
    assert _ablate(demo, tmp_path / "prefill", *args) == 0
    assert _ablate(demo, tmp_path / "through", *args, "--through-generation", "--compare",
                   str(tmp_path / "prefill" / "icir-demo-model")) == 0
    assert "Table 12" in capsys.readouterr().out
    read = lambda p: {(r["cell"], r["doc_id"]): r for r in pq.read_table(  # noqa: E731
        p / "icir-demo-model" / "ablation" / "outcomes.parquet").to_pylist()}
    before, after = read(tmp_path / "prefill"), read(tmp_path / "through")
    assert all(before[("baseline", d)] == after[("baseline", d)] for d in range(6))  # nothing zeroed: no change
    table = (tmp_path / "through" / "icir-demo-model" / "ablation" / "table12.md").read_text()
    for cell in ("overlap@1", "pointer_only@2"):
        acc_before = sum(before[(cell, d)]["correct"] for d in range(6)) / 6
        acc_after = sum(after[(cell, d)]["correct"] for d in range(6)) / 6
        changed = sum(before[(cell, d)]["answer"] != after[(cell, d)]["answer"] for d in range(6)) / 6
        assert f"| 5 | {cell} | {acc_before:.3f} | {acc_after:.3f} | {acc_after - acc_before:+.3f} | {changed:.3f} |" in table
    assert _ablate(demo, tmp_path / "other", "--compare", str(tmp_path / "prefill" / "icir-demo-model")) == 2


@pytest.mark.slow
def test_two_processes_give_the_one_process_tables(demo, tmp_path):
    """``accelerate launch`` with two CPU processes: documents sharded, outcomes merged, same tables."""
    import os
    import socket
    import subprocess
    import sys

    assert _ablate(demo, tmp_path / "one", "--limit", "7") == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rankings = demo / "eval" / "icir-demo-model" / "icir_artifacts" / "icir_mcq"
    launched = subprocess.run([
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
        str(port), "-m", "harness.ablation.cli", "--rankings", str(rankings), "--tasks", TASK, "--metadata",
        json.dumps({"vhs_data": str(demo / "vhs")}), "--device", "cpu", "--output_path", str(tmp_path / "two"),
        "--limit", "7", *GRID,
    ], env={**os.environ, "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"},
        capture_output=True, text=True, timeout=600, check=False)
    assert launched.returncode == 0, launched.stderr[-3000:]
    folder = tmp_path / "two" / "icir-demo-model" / "ablation"
    shards = {path.name: [json.loads(line)["doc_id"] for line in path.read_text().splitlines()]
              for path in sorted((folder / "outcomes").glob("*.jsonl"))}
    assert shards == {f"{TASK}.rank0.jsonl": [0, 2, 4, 6], f"{TASK}.rank1.jsonl": [1, 3, 5]}
    one = tmp_path / "one" / "icir-demo-model" / "ablation"
    assert (folder / "table14.md").read_text() == (one / "table14.md").read_text()
    assert pq.read_table(folder / "cells.parquet").to_pylist() == pq.read_table(one / "cells.parquet").to_pylist()


def test_records_without_an_ablation_start_are_refused(demo, tmp_path, capsys):
    import shutil

    import pyarrow.parquet as parquet

    vhs = tmp_path / "vhs"
    shutil.copytree(demo / "vhs", vhs)
    (file,) = (vhs / "single_needle_n5").glob("*.parquet")
    table = parquet.read_table(file)
    parquet.write_table(table.drop(["ablation_start_char"]), file)
    rankings = demo / "eval" / "icir-demo-model" / "icir_artifacts" / "icir_mcq"
    assert icir_main(["ablate", "--rankings", str(rankings), "--tasks", TASK, "--metadata",
                      json.dumps({"vhs_data": str(vhs)}), "--output_path", str(tmp_path / "out"), *GRID]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "have no ablation_start_char" in err and err.startswith("icir ablate: error:")
