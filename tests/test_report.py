"""`icir report --table N`: every printed number recomputed by hand from the artifact files.

Runs are real: the shared reference runs (tests/lm_eval_helpers.py: ``icir_mcq_n5`` on 19
documents, then ``vhs_single_n5`` with its ranking and probes), one model folder holding both
(an ICIR-MCQ run then a VHs run, as ``--output_path`` gives when both go to one OUTPUT), an
``icir_mcq_n5`` run captured at three readout positions (Table 10) and a VHs run without
``heads_ranking``. Expected rows are built with numpy / scipy from the JSON files alone and
compared with the ``--json`` rows and with the markdown cells.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from lm_eval_helpers import eval_args

from harness.cli import main as icir_main

pytestmark = pytest.mark.slow

UNIT = "icir_mcq_n5"


@pytest.fixture(scope="module")
def mcq(shared) -> Path:
    return shared / "ref_mcq" / "model"


@pytest.fixture(scope="module")
def both(shared, tmp_path_factory) -> Path:
    """One model folder holding the ICIR-MCQ run and then the VHs transfer run."""
    folder = tmp_path_factory.mktemp("both") / "model"
    for run in ("ref_mcq", "ref_vhs"):
        shutil.copytree(shared / run / "model", folder, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("activations"))
    return folder


@pytest.fixture(scope="module")
def readout(shared, tmp_path_factory) -> Path:
    """``icir_mcq_n5`` captured at cattok, +1 and last (App. G)."""
    import harness

    out = tmp_path_factory.mktemp("readout")
    harness.evaluate(["icir_mcq_n5"], {"pretrained": str(shared / "model"), "image_budget": 64,
                                       "readout": "cattok/+1/last"},
                     metadata={"icir_mcq_data": str(shared / "mcq")}, output_path=out, limit=12, device="cpu")
    return out / "model"


# ---------------------------------------------------------------------------- by-hand helpers


def load(folder: Path, unit: str, file: str):
    return json.loads((folder / "icir_artifacts" / unit / file).read_text())


def grid(by_name: dict) -> np.ndarray:
    """``{LxxHyy: v}`` -> [L, H], parsing the names by hand."""
    cells = {(int(n[1:n.index("H")]), int(n[n.index("H") + 1:])): v for n, v in by_name.items()}
    out = np.zeros((max(c[0] for c in cells) + 1, max(c[1] for c in cells) + 1))
    for (layer, head), v in cells.items():
        out[layer, head] = v
    return out


def name(flat: int, n_heads: int) -> str:
    return f"L{flat // n_heads:02d}H{flat % n_heads:02d}"


def order(g: np.ndarray) -> np.ndarray:
    return np.argsort(-g.ravel(), kind="stable")  # ties: smaller flat index first


def tops(g: np.ndarray, n: int) -> list:
    return [[name(i, g.shape[1]), g.ravel()[i]] for i in order(g)[:n]]


def pointer(folder: Path, unit: str, score: str, position: str = "cattok") -> np.ndarray:
    return grid(load(folder, unit, f"pointer_r1_{score}.json")["grids"][position])


def writer(folder: Path, position: str = "cattok") -> np.ndarray:
    return grid(load(folder, UNIT, "writer_r1.json")[position]["writer_r1"])


def newest_acc(folder: Path, task: str) -> float:
    for path in sorted(folder.glob("results_*.json"))[::-1]:
        results = json.loads(path.read_text())["results"]
        if task in results:
            return results[task]["acc,none"]
    raise AssertionError(task)


def fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, list):
        return f"{v[0]} ({v[1]:.3f})"
    if isinstance(v, (float, np.floating)):
        return f"{v:.3f}"
    return str(v)


def same(a, b) -> bool:
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(b, (float, np.floating)) and b is not None:
        return a == pytest.approx(float(b), abs=1e-12)
    return a == b


def report(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = icir_main(["report", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def check(capsys, table: int, folders: list[Path], expected: list[dict], *extra: str) -> dict:
    """The ``--json`` rows equal `expected` (missing keys: None) and so do the markdown cells."""
    args = ["--table", str(table), *map(str, folders), *extra]
    rc, out, err = report(capsys, *args, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["table"] == table and len(doc["rows"]) == len(expected)
    for row, want in zip(doc["rows"], expected):
        assert set(want) <= set(doc["columns"])
        for column in doc["columns"]:
            assert same(row[column], want.get(column)), (column, row[column], want.get(column))
    rc, out, err = report(capsys, *args)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"Table {table}: ")
    header = lines.index("| " + " | ".join(doc["columns"]) + " |")
    cells = [line[2:-2].split(" | ") for line in lines[header + 2: header + 2 + len(expected)]]
    assert cells == [[fmt(want.get(c)) for c in doc["columns"]] for want in expected]
    return doc


def error(capsys, *args: str) -> str:
    rc, out, err = report(capsys, *args)
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("icir report: error: ")
    return err


# ---------------------------------------------------------------------------- tables


def test_table_1_top_pointer_heads(capsys, mcq, shared):
    expected = []
    for score, label in (("eq3", "Eq. 3"), ("exact", "exact")):
        g = pointer(mcq, UNIT, score)
        expected.append({"Model": "model", "Data": UNIT, "Score": label,
                         **{f"Top-{i + 1}": t for i, t in enumerate(tops(g, 5))},
                         "Median": float(np.median(g)), "Chance": load(mcq, UNIT, "pointer_r1_eq3.json")["chance"]})
    # the Eq. 3 top head is the one the run ranks by (pointer_ranking.json)
    assert expected[0]["Top-1"][0] == load(mcq, UNIT, "pointer_ranking.json")["ranking"][0]
    check(capsys, 1, [mcq], expected)
    check(capsys, 1, [shared / "ref_mcq"], expected)  # OUTPUT holding one model folder


def test_table_2_vhs_transfer_and_votes(capsys, both, mcq):
    head = load(mcq, UNIT, "pointer_ranking.json")["ranking"][0]
    layer, index = int(head[1:3]), int(head[4:6])
    votes = load(both, "vhs_single_n5", "vote_r1.json")
    row = {"Model": "model", "Chance": load(both, "vhs_single_n5", "pointer_r1_eq3.json")["chance"]}
    for score, label in (("eq3", "Eq. 3"), ("exact", "exact")):
        row[f"Head R@1 ({label})"] = [head, pointer(both, "vhs_single_n5", score)[layer, index]]
    row.update({f"Vote@{k}": v for k, v in votes["pointer"].items()})
    row.update({f"Writer vote@{k}": v for k, v in votes["writer"].items()})
    doc = check(capsys, 2, [both], [row], "--vhs_size", "5")
    assert doc["columns"][4:] == [f"Vote@{k}" for k in votes["pointer"]] + [f"Writer vote@{k}" for k in votes["writer"]]


def test_table_2_without_heads_ranking_says_so(capsys, shared, tmp_path):
    assert icir_main(eval_args(shared, "--tasks", "vhs_single_n5", "--output_path", str(tmp_path))) == 0
    doc = json.loads(report(capsys, "--table", "2", str(tmp_path / "model"), "--vhs_size", "5", "--json")[1])
    assert doc["rows"][0]["Head R@1 (Eq. 3)"] == doc["rows"][0]["Head R@1 (exact)"] == "needs heads_ranking"
    assert any("heads_ranking=" in note for note in doc["notes"])


def test_table_3_top_writer_heads(capsys, mcq):
    fit = load(mcq, UNIT, "writer_r1.json")["cattok"]
    g = writer(mcq)
    row = {"Model": "model", "Data": UNIT, **{f"Top-{i + 1}": t for i, t in enumerate(tops(g, 5))},
           "Median": float(np.median(g)), "Pool size": fit["pool_size"], "Chance": fit["chance"]}
    assert fit["chance"] == pytest.approx(1 / fit["pool_size"])
    check(capsys, 3, [mcq], [row])


def test_table_5_and_6_transferred_head_and_accuracy(capsys, both, mcq):
    head = load(mcq, UNIT, "pointer_ranking.json")["ranking"][0]
    layer, index = int(head[1:3]), int(head[4:6])
    vhs = {s: pointer(both, "vhs_single_n5", s)[layer, index] for s in ("eq3", "exact")}
    rows = [{"Model": "model", "Head": head, "Score": label, "N=5": vhs[s]} for s, label in
            (("eq3", "Eq. 3"), ("exact", "exact"))]
    check(capsys, 5, [both], rows)
    row = {"Model": "model", "ICIR-MCQ head R@1 (Eq. 3)": tops(pointer(both, UNIT, "eq3"), 1)[0],
           "ICIR-MCQ head R@1 (exact)": tops(pointer(both, UNIT, "exact"), 1)[0],
           "ICIR-MCQ acc": newest_acc(both, UNIT), "VHs N=5 head R@1 (Eq. 3)": [head, vhs["eq3"]],
           "VHs N=5 head R@1 (exact)": [head, vhs["exact"]], "VHs N=5 acc": newest_acc(both, "vhs_single_n5")}
    check(capsys, 6, [both], [row], "--vhs_size", "5")


def _position_row(g: np.ndarray, ref: np.ndarray, k: int) -> dict:
    fixed = order(ref)[:k]
    constant = g.min() == g.max() or ref.min() == ref.max()
    mean = g.ravel()[fixed].mean()
    return {"rho": None if constant else scipy.stats.spearmanr(g.ravel(), ref.ravel()).statistic,
            "overlap": len(set(order(g)[:k]) & set(fixed)), "best": g.max(), "mean": mean,
            "retained": mean / ref.ravel()[fixed].mean()}


@pytest.mark.parametrize("k", [5, 100])
def test_table_10_readout_positions(capsys, readout, k):
    positions = list(load(readout, UNIT, "pointer_r1_eq3.json")["grids"])
    assert positions == ["cattok", "+1", "last"]
    ref, wref = pointer(readout, UNIT, "eq3"), writer(readout)
    kk = min(k, ref.size)
    rows = []
    for position in positions:
        p = _position_row(pointer(readout, UNIT, "eq3", position), ref, kk)
        w = _position_row(writer(readout, position), wref, kk)
        rows.append({"Model": "model", "Position": position, "K": kk, "Pointer rho": p["rho"],
                     "Pointer overlap": p["overlap"], "Best R@1": p["best"],
                     "Best R@1 (exact)": pointer(readout, UNIT, "exact", position).max(),
                     "Cattok top-K mean R@1": p["mean"], "Pointer retained": p["retained"],
                     "Best writer R@1": w["best"], "Writer rho": w["rho"], "Writer overlap": w["overlap"],
                     "Writer retained": w["retained"]})
    assert rows[0]["Pointer rho"] == pytest.approx(1.0) and rows[1]["Pointer rho"] is not None
    check(capsys, 10, [readout], rows, "--top_k", str(k))


@pytest.mark.parametrize("k", [5, 100])
def test_table_11_overlap_heads(capsys, mcq, k):
    p, e, w = pointer(mcq, UNIT, "eq3"), pointer(mcq, UNIT, "exact"), writer(mcq)
    kk = min(k, p.size)
    p_rank = {i: r + 1 for r, i in enumerate(order(p))}
    w_rank = {i: r + 1 for r, i in enumerate(order(w))}
    shared_heads = [i for i in order(p)[:kk] if w_rank[i] <= kk]
    rows = [{"Model": "model", "Head": name(i, p.shape[1]), "Pointer rank": p_rank[i], "Writer rank": w_rank[i],
             "Pointer R@1": p.ravel()[i], "Pointer R@1 (exact)": e.ravel()[i], "Writer R@1": w.ravel()[i]}
            for i in shared_heads]
    doc = check(capsys, 11, [mcq], rows, "--top_k", str(k))
    only = kk - len(rows)
    note = f"model: {len(rows)} overlap heads of the top-{kk} ({only} pointer-only, {only} writer-only)"
    every = [f"model: K = {kk} is every head of the model, so every top-K set holds all heads; pass --top_k well "
             f"below {p.size} (the paper: 100 of 1,152 heads)"] if kk == p.size else []
    assert doc["notes"] == every + [note]


def test_table_13_discovery_overlap_and_chance(capsys, mcq):
    p, e, w = pointer(mcq, UNIT, "eq3"), pointer(mcq, UNIT, "exact"), writer(mcq)
    overlap = len(set(order(p)[:5]) & set(order(w)[:5]))
    chance = 5 ** 2 / p.size
    row = {"Model": "model", "Data": UNIT, "Heads": p.size, "Top-1 R@1 (Eq. 3)": tops(p, 1)[0],
           "Top-1 R@1 (exact)": tops(e, 1)[0], "K": 5, "Overlap": overlap, "Chance": chance,
           "Ratio": overlap / chance}
    check(capsys, 13, [mcq], [row], "--top_k", "5")


def test_several_models_give_one_row_group_each(capsys, mcq, readout):
    doc = json.loads(report(capsys, "--table", "1", str(mcq), str(readout), "--json")[1])
    # both folders are named "model": the parent tells them apart
    names = [row["Model"] for row in doc["rows"]]
    assert names == ["ref_mcq/model"] * 2 + [f"{readout.parent.name}/model"] * 2
    assert doc["rows"][2]["Top-1"] == tops(pointer(readout, UNIT, "eq3"), 1)[0]


# ---------------------------------------------------------------------------- errors


def test_missing_artifacts_name_the_folder_and_the_run_to_make(capsys, shared, mcq, tmp_path):
    vhs = shared / "ref_vhs" / "model"
    err = error(capsys, "--table", "1", str(vhs))
    assert str(vhs) in err and "icir eval --tasks icir_mcq" in err
    err = error(capsys, "--table", "2", str(mcq))
    assert str(mcq) in err and "vhs_single_n10" in err and "heads_ranking=" in err and "pointer_ranking.json" in err
    err = error(capsys, "--table", "5", str(mcq))
    assert "vhs_single_n*" in err and "heads_ranking=" in err
    err = error(capsys, "--table", "10", str(mcq))
    assert "one readout position (cattok)" in err and "readout=cattok/+1/+2/+3/+4/mid/last" in err
    no_writer = tmp_path / "model"
    shutil.copytree(mcq, no_writer, ignore=shutil.ignore_patterns("activations", "writer_r1.json"))
    for table in ("3", "11", "13"):
        err = error(capsys, "--table", table, str(no_writer))
        assert str(no_writer) in err and "writer_r1.json" in err and "icir eval --tasks icir_mcq" in err
    assert "does not exist" in error(capsys, "--table", "1", str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    assert "no run folder" in error(capsys, "--table", "1", str(tmp_path / "empty"))
    with pytest.raises(SystemExit):  # argparse: a table this command does not make
        icir_main(["report", "--table", "7", str(mcq)])


def test_table_10_plot_draws_the_table(capsys, readout, tmp_path, monkeypatch):
    """--plot draws each model's best R@1 and rho per position: the lines hold the table's numbers."""
    import harness.plots as plots
    from harness.report import build_table, plot_table_10

    assert icir_main(["report", "--table", "10", str(readout), "--plot", str(tmp_path / "positions.png")]) == 0
    assert "figure:" in capsys.readouterr().out and (tmp_path / "positions.png").stat().st_size > 0
    drawn, original = {}, plots.plot_readout_positions

    def spy(series, path):
        figure = original(series, path)
        drawn.update({line.get_label(): list(line.get_ydata()) for line in figure.axes[0].get_lines()})
        return figure

    monkeypatch.setattr(plots, "plot_readout_positions", spy)
    table = build_table(10, [readout])
    plot_table_10(table, tmp_path / "again.png")
    assert drawn["model: best pointer R@1 (Eq. 3)"] == pytest.approx([row["Best R@1"] for row in table.rows])
    assert drawn["model: best writer R@1"] == pytest.approx([row["Best writer R@1"] for row in table.rows])
    assert icir_main(["report", "--table", "1", str(readout), "--plot", str(tmp_path / "x.png")]) == 2
