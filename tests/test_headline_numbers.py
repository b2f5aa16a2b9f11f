"""The headline numbers are protocol icir-heads/2's definitions everywhere they are printed.

Each value is recomputed here with numpy alone from a run's per-document records
(``head_records.safetensors`` read as arrays, ``documents.jsonl``, the ranking file's JSON), none
of the package's metric functions:

- ICIR-MCQ ``pointer_r1`` is the best head's Eq. 3 R@1 (the paper's Tables 1, 2, 5, 6, 13), and
  the leaderboard's rows, their value and their default order follow it;
- VHs ``pointer_r1`` is the transferred head's Eq. 3 R@1 (§4.3, the score that ranked it), which
  is also ``vote_r1@1`` (App. H: a K = 1 vote is that head), the pointer entry of
  ``icir retrievers``' Table 2 and the leaderboard row's value.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lm_eval_helpers import eval_args
from safetensors.numpy import load_file
from test_leaderboard_site import board, site  # noqa: F401  (the two-entry board and its site)

from harness.cli import main as icir_main
from harness.tiny_models.retrievers import save_tiny_retriever


def _records(folder: Path) -> tuple[dict[str, np.ndarray], list[dict]]:
    tensors = load_file(str(folder / "head_records.safetensors"))
    documents = [json.loads(line) for line in (folder / "documents.jsonl").read_text().splitlines()]
    scored = [row for row in documents if row["target_image"] is not None]
    assert tensors["target_image"].tolist() == [row["target_image"] for row in scored]
    assert tensors["doc_id"].tolist() == [row["doc_id"] for row in scored]
    return tensors, scored


def _eq3_grid(tensors: dict[str, np.ndarray]) -> np.ndarray:
    """``[L, H]`` Eq. 3 R@1: the fraction of documents whose Eq. 3 pick is the target."""
    picks, targets = tensors["pointer_image_eq3"].astype(np.int64), tensors["target_image"].astype(np.int64)
    return (picks == targets[:, None, None]).mean(axis=0)


def _name(flat: int, n_heads: int) -> str:
    return f"L{flat // n_heads:02d}H{flat % n_heads:02d}"


def test_icir_mcq_pointer_r1_is_the_best_eq3_head_and_orders_the_board(board, site):  # noqa: F811
    rows = json.loads((site / "leaderboard.json").read_text())
    best = {}
    for row in rows:
        folder = board / "results" / row["key"] / "artifacts" / "icir_mcq_n5"
        tensors, _ = _records(folder)
        grid = _eq3_grid(tensors)
        best[row["key"]] = grid.max()
        assert row["pointer_r1"] == pytest.approx(grid.max(), abs=1e-12)
        assert row["pointer_head"] == _name(int(np.flatnonzero(grid.ravel() == grid.max())[0]), grid.shape[1])
        exact = tensors["pointer_image_exact"].astype(np.int64) == tensors["target_image"][:, None, None]
        assert row["pointer_r1_exact"] == pytest.approx(exact.mean(axis=0).max(), abs=1e-12)
        summary = json.loads((folder / "summary.json").read_text())
        (results_file,) = (board / "results" / row["key"] / "results").glob("results_*.json")  # lm-eval's
        result = json.loads(results_file.read_text())["results"]["icir_mcq_n5"]
        assert summary["pointer_r1"] == result["pointer_r1,none"] == row["pointer_r1"]
    assert [row["key"] for row in rows] == sorted(best, key=lambda key: (-best[key], key))  # ties: by key


@pytest.fixture(scope="module")
def retriever(tmp_path_factory) -> Path:
    return save_tiny_retriever("clip", tmp_path_factory.mktemp("clip") / "clip")


def _transfer_run(shared: Path, out: Path) -> tuple[Path, str]:
    """A VHs N=5 run of the shared tiny model voting with an Eq. 3 ranking whose top head scores
    differently under Eq. 1 and Eq. 3 on these documents (so the two definitions are told apart):
    ``(run folder, that head)``."""
    from harness.lm_eval_plugin.rankings_io import ranking_document

    (reference,) = [p for p in (shared / "ref_vhs").iterdir() if p.is_dir()]
    tensors, _ = _records(reference / "icir_artifacts" / "vhs_single_n5")
    exact = (tensors["pointer_image_exact"] == tensors["target_image"][:, None, None]).mean(axis=0)
    eq3 = _eq3_grid(tensors)
    flat = int(np.flatnonzero((exact != eq3).ravel())[0])
    order = np.zeros(eq3.size)
    order[flat] = 1.0  # this head first, the rest by flat index
    ranking = out / "ranking.json"
    out.mkdir(parents=True)
    ranking.write_text(json.dumps(ranking_document(order.reshape(eq3.shape), "pointer", "cattok", "eq3")))
    args = eval_args(shared, "--tasks", "vhs_single_n5", "--output_path", str(out / "runs"),
                     model_args=f"heads_ranking={ranking}")
    assert icir_main(args) == 0
    (run,) = [p for p in (out / "runs").iterdir() if p.is_dir()]
    return run, _name(flat, eq3.shape[1])


def test_vhs_pointer_r1_is_the_transferred_heads_eq3_r1_everywhere(shared, retriever, tmp_path):
    run, head = _transfer_run(shared, tmp_path / "transfer")
    folder = run / "icir_artifacts" / "vhs_single_n5"
    tensors, scored = _records(folder)
    grid = _eq3_grid(tensors)
    layer, index = int(head[1:3]), int(head[4:6])
    expected = grid[layer, index]
    exact = (tensors["pointer_image_exact"] == tensors["target_image"][:, None, None]).mean(axis=0)
    assert exact[layer, index] != expected  # the exact score would print another number
    assert np.mean([row["pointer_hit"] for row in scored]) == pytest.approx(expected, abs=1e-12)
    assert {row["pointer_head"] for row in scored} == {head}

    (results_file,) = run.glob("results_*.json")
    results = json.loads(results_file.read_text())["results"]["vhs_single_n5"]
    assert results["pointer_r1,none"] == pytest.approx(expected, abs=1e-12)
    assert results["vote_r1@1,none"] == pytest.approx(expected, abs=1e-12)
    assert results["pointer_r1_exact,none"] == pytest.approx(exact[layer, index], abs=1e-12)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["pointer_top_head"] == head and summary["pointer_r1"] == pytest.approx(expected, abs=1e-12)

    out = tmp_path / "retrievers"
    assert icir_main(["retrievers", str(run), f"--retriever=clip={retriever}", "--tasks", "vhs_single_n5",
                      "--metadata", json.dumps({"vhs_data": str(shared / "vhs")}), "--output_path", str(out)]) == 0
    from harness.retrievers.run import table_2

    table = table_2(json.loads((out / "retrievers.json").read_text()))
    (row,) = table.rows
    assert row[f"{run.name} head"][0] == head
    assert row[f"{run.name} head"][1] == pytest.approx(expected, abs=1e-12)

    board_folder = tmp_path / "board"
    assert icir_main(["submit", str(run), "--leaderboard", str(board_folder)]) == 0
    site_folder = tmp_path / "site"
    assert icir_main(["leaderboard", "build", str(board_folder), "--out", str(site_folder)]) == 0
    (entry,) = json.loads((site_folder / "leaderboard.json").read_text())
    assert entry["vhs_n5_pointer_r1"] == pytest.approx(expected, abs=1e-12)
