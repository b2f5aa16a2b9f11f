"""``icir report --table N RUN_FOLDER ...``: the paper's tables, from the artifacts of finished runs.

Every number is read from what ``icir eval --output_path OUTPUT`` left in ``OUTPUT/<model>/``
(`harness.artifacts`): lm-eval's ``results_*.json`` (the newest file holding a task gives its
``acc``) and ``icir_artifacts/<task or group>/`` (summary, pointer and writer grids, votes).
Nothing is recomputed from the activation store. One run folder is one model (named by its
folder); several run folders give one row group per model.

Pointer numbers use the Eq. 3 proxy grids (``pointer_r1_eq3.json``), as the paper's tables do
and as protocol ``icir-heads/2``'s ``pointer_r1`` does; the exact score (Eq. 1,
``pointer_r1_exact.json``) is shown alongside where a column fits, always labelled. ICIR-MCQ is
the pooled group ``icir_mcq`` when the run has it, else its ``icir_mcq_n*`` task. Top-K head sets
use K = min(``--top_k``, L*H) (the paper: 100 of 1,152 heads).

Tables (paper captions; App. C, G, I, J):

- 1: top-5 pointer heads by R@1 on ICIR-MCQ, median and chance (Table 1, §4.2).
- 2: VHs N=10 R@1 of the single pointer head transferred from ICIR-MCQ, and the top-K vote R@1
  of the pointer (and writer) ranking (Table 2 left half, §4.3; App. H).
- 3: top-5 writer heads by held-out-pool writer R@1 on ICIR-MCQ, median, pool size, chance
  (Table 3, §5.2).
- 4: cross-model ranking similarity of every pair of runs (same L x H): Pearson and Spearman of
  the per-head R@1 grids with paired head-bootstrap 95% intervals, layer-max correlation, and top-K
  overlap against chance K^2/(L*H), for the pointer (Eq. 3) and the writer grids (Table 4, App. C.2,
  E.2). ``icir compare RUN_A RUN_B ...`` prints it.
- 5: R@1 of the transferred top pointer head on VHs at each haystack size present (Table 5, C.3).
- 6: top pointer head R@1 and base-model accuracy on ICIR-MCQ and VHs N=10 (Table 6, C.4).
- 10: readout-position control: per position, Spearman rho and top-K overlap against the cattok
  ranking, best R@1, and the mean R@1 of the fixed cattok top-K set (retained: divided by its
  cattok value), for the pointer and, where probes were fit there, the writer (Table 10, App. G).
- 11: the overlap heads (pointer top-K and writer top-K) by pointer rank, with both ranks and
  R@1 (Table 11, App. I).
- 13: pointer-writer discovery: top pointer head R@1, top-K overlap, chance K^2/(L*H), ratio
  (Table 13, App. J.1).
- 15: image vs text retrieval heads: each ranking's top-3 heads and the heads in both top-10s,
  with their rank in each ranking and a character label; top-10 overlap against chance, the
  layers of each top-10 (Table 15, App. K). Needs the run's ``text_needle`` task.

A table whose artifacts a run lacks raises `icir_common.UserInputError` naming the run folder and
the run to make.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.constants import ARTIFACTS_FOLDER, ICIR_MCQ_GROUP, ICIR_MCQ_TASKS, TOP_K_SETS, icir_mcq_unit, vhs_single_size
from icir_common import UserInputError, flat_head_name, parse_head_name

TABLES = (1, 2, 3, 4, 5, 6, 10, 11, 13, 15)
CROSS_MODEL_KS = (3, 5, 10, 100)  # Table 4's top-K sizes (App. C.2)
TOP_N = 5  # Tables 1 and 3 list the top-5 heads
VHS_SIZE = 10  # Tables 2 and 6: Visual Haystacks N=10
REFERENCE_POSITION = "cattok"  # Table 10 compares every position with the cattok
NEEDS_RANKING = "needs heads_ranking"
FULL_READOUT = "cattok/+1/+2/+3/+4/mid/last"


# ---------------------------------------------------------------------------- run folders


@dataclass
class Run:
    """One finished run folder ``OUTPUT/<model>/`` (one model) and the files it holds."""

    folder: Path
    name: str

    @property
    def artifacts(self) -> Path:
        """The run's ``icir_artifacts/`` folder."""
        return self.folder / ARTIFACTS_FOLDER

    def has(self, unit: str) -> bool:
        """Whether the run wrote the artifacts of `unit` (a task or group)."""
        return (self.artifacts / unit / "summary.json").is_file()

    def read(self, unit: str, file: str, missing: str) -> dict:
        """``icir_artifacts/<unit>/<file>`` as JSON; `missing` says what to run when it is not there."""
        path = self.artifacts / unit / file
        if not path.is_file():
            raise UserInputError(f"{self.folder}: no {path.relative_to(self.folder)}; {missing}")
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise UserInputError(f"{path} is not valid JSON ({err}); rerun icir analyze {self.folder}") from None

    def units(self) -> set[str]:
        """Names of the tasks and groups the run wrote artifacts of."""
        return {p.name for p in self.artifacts.iterdir() if self.has(p.name)} if self.artifacts.is_dir() else set()

    def summary(self, unit: str) -> dict:
        """The unit's ``summary.json`` (`harness.artifacts.summary`)."""
        return self.read(unit, "summary.json", f"run icir analyze {self.folder}")

    def icir_unit(self) -> str:
        """The ICIR-MCQ unit: the pooled group when present, else the first ``icir_mcq_n*`` task."""
        unit = icir_mcq_unit(self.units())
        if unit is not None:
            return unit
        raise UserInputError(
            f"{self.folder} has no ICIR-MCQ artifacts ({ARTIFACTS_FOLDER}/{ICIR_MCQ_GROUP} or "
            f"{'/'.join(ICIR_MCQ_TASKS)}); run icir eval --tasks {ICIR_MCQ_GROUP} --output_path {self.folder.parent}"
        )

    def vhs_sizes(self) -> list[int]:
        """Haystack sizes N of the ``vhs_single_n{N}`` tasks this run has artifacts of."""
        return sorted(n for unit in self.units() if (n := vhs_single_size(unit)))

    def vhs_unit(self, size: int) -> str:
        """``vhs_single_n{size}``, or an error saying how to run it with the ICIR-MCQ ranking."""
        unit = f"vhs_single_n{size}"
        if self.has(unit):
            return unit
        raise UserInputError(f"{self.folder} has no {ARTIFACTS_FOLDER}/{unit}; run {self.transfer_command(unit)}")

    def transfer_command(self, task: str) -> str:
        """The §4.3 transfer run: a VHs task voting with an ICIR-MCQ run's ranking and probes."""
        unit = icir_mcq_unit(self.units())
        source = self.artifacts / unit if unit else Path("<ICIR-MCQ run>") / ARTIFACTS_FOLDER / ICIR_MCQ_GROUP
        probes = f",writer_probes={source / 'writer_probes'}" if (source / "writer_probes").is_dir() else ""
        return (f"icir eval --tasks {task} --model_args heads_ranking={source / 'pointer_ranking.json'}{probes} "
                f"--output_path {self.folder.parent}")

    def metric(self, task: str, metric: str) -> float:
        """``<metric>,none`` of `task` from the newest ``results_*.json`` that holds the task."""
        for path in sorted(self.folder.glob("results_*.json"), reverse=True):
            results = json.loads(path.read_text())
            row = results.get("results", {}).get(task) or results.get("groups", {}).get(task)
            if row is not None:
                if f"{metric},none" not in row:
                    raise UserInputError(f"{path} has no {metric} for {task}; rerun icir eval --tasks {task}")
                return float(row[f"{metric},none"])
        raise UserInputError(f"{self.folder}: no results_*.json holds {task}; run icir eval --tasks {task} "
                             f"--output_path {self.folder.parent}")


def _is_run_folder(folder: Path) -> bool:
    return (folder / ARTIFACTS_FOLDER).is_dir() or any(folder.glob("results_*.json"))


def find_runs(folders: list[Path]) -> list[Run]:
    """Run folders as `Run`s, named by their folder (parent/folder where two names clash).

    A run folder holds ``icir_artifacts/`` or lm-eval's ``results_*.json``; a folder that holds
    neither but has run folders inside (``OUTPUT``) stands for those, one model each.
    """
    found: list[Path] = []
    for folder in folders:
        if not folder.is_dir():
            raise UserInputError(f"run folder {folder} does not exist "
                                 f"(pass OUTPUT/<model> of icir eval --output_path OUTPUT)")
        inner = [folder] if _is_run_folder(folder) else sorted(
            p for p in folder.iterdir() if p.is_dir() and _is_run_folder(p))
        if not inner:
            raise UserInputError(f"{folder} is no run folder (no {ARTIFACTS_FOLDER}/ or results_*.json): pass "
                                 f"OUTPUT/<model> of icir eval --output_path OUTPUT")
        found.extend(inner)
    names = [f.name for f in found]
    return [Run(f, f.name if names.count(f.name) == 1 else f"{f.parent.name}/{f.name}") for f in found]


# ---------------------------------------------------------------------------- grids


def grid_from_names(values: dict[str, float], what: str):
    """``{LxxHyy: R@1}`` (`rankings.grid_by_name`) back to a float64 ``[L, H]`` grid."""
    import numpy as np

    heads = {parse_head_name(name): float(v) for name, v in values.items()}
    n_layers, n_heads = (max(index[i] for index in heads) + 1 for i in (0, 1))
    if len(heads) != n_layers * n_heads:
        raise UserInputError(f"{what}: {len(heads)} heads do not fill a {n_layers} x {n_heads} grid")
    grid = np.empty((n_layers, n_heads))
    for (layer, head), value in heads.items():
        grid[layer, head] = value
    return grid


def pointer_grids(run: Run, unit: str, score: str = "eq3") -> tuple[dict[str, Any], float]:
    """``({position: [L, H] grid}, chance)`` of one pointer score (``pointer_r1_{exact,eq3}.json``)."""
    file = f"pointer_r1_{score}.json"
    data = run.read(unit, file, f"rerun icir analyze {run.folder}")
    grids = {p: grid_from_names(g, f"{run.artifacts / unit / file} [{p}]") for p, g in data["grids"].items()}
    return grids, float(data["chance"])


def writer_fits(run: Run, unit: str) -> dict[str, dict]:
    """``{position: fit details}`` of the held-out writer probes (``writer_r1.json``), grids as arrays."""
    summary = run.summary(unit)
    why = next((n for n in summary.get("notes", []) if n.startswith("writer_r1 not computed")), None)
    missing = (f"{why}; " if why else "") + (
        f"writer probes are fit on ICIR-MCQ runs with 'train' and 'eval' documents: run icir eval --tasks "
        f"{ICIR_MCQ_GROUP} --output_path {run.folder.parent} without a small --limit"
    )
    data = run.read(unit, "writer_r1.json", missing)
    return {p: {**fit, "writer_r1": grid_from_names(fit["writer_r1"], f"{run.artifacts / unit}/writer_r1.json [{p}]")}
            for p, fit in data.items()}


def top_k(grid, k: int) -> int:
    """The paper's top-K (100) capped at the number of heads L*H."""
    return min(k, grid.size)


def every_head_note(run: Run, k: int, n_heads: int) -> list[str]:
    """A note when the top-K sets hold every head (a small model): the overlaps then say nothing."""
    if k < n_heads:
        return []
    return [f"{run.name}: K = {k} is every head of the model, so every top-K set holds all heads; pass "
            f"--top_k well below {n_heads} (the paper: 100 of 1,152 heads)"]


def _top_list(grid, n: int) -> list:
    """`rankings.top_head_values`, imported when a table needs it (``icir --help`` loads no scipy)."""
    from harness.metrics.rankings import top_head_values

    return top_head_values(grid, n)


def _spearman(a, b) -> float | None:
    """`rankings.spearman` of two grids; None where one is constant (rho undefined)."""
    from harness.metrics.rankings import spearman

    return None if a.min() == a.max() or b.min() == b.max() else spearman(a, b)


def _mean_over(grid, heads) -> float:
    return float(grid.ravel()[heads].mean())


# ---------------------------------------------------------------------------- tables


@dataclass
class Table:
    """One table: rows of ``{column: value}`` (float, int, str, None, or ``[head, R@1]``)."""

    number: int
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The rows as JSON (NaN as null)."""
        def clean(v):
            if isinstance(v, float) and math.isnan(v):
                return None
            return [clean(x) for x in v] if isinstance(v, list) else v

        return {"table": self.number, "title": self.title, "columns": self.columns,
                "rows": [{c: clean(row.get(c)) for c in self.columns} for row in self.rows], "notes": self.notes}

    def markdown(self) -> str:
        """A markdown table: R@1 with 3 decimals, heads as ``LxxHyy (R@1)``, missing as "–"."""
        lines = [f"Table {self.number}: {self.title}", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(format_cell(row.get(c)) for c in self.columns) + " |" for row in self.rows]
        return "\n".join(lines + ([""] + [f"- {note}" for note in self.notes] if self.notes else []))


def format_cell(value: Any) -> str:
    """How `Table.markdown` prints one value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (bool, int)):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list):
        return f"{value[0]} ({format_cell(value[1])})"
    return str(value)


def _tops(prefix: str, n: int = TOP_N) -> list[str]:
    return [f"{prefix}{i}" for i in range(1, n + 1)]


def table_1(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 1 (§4.2): top-5 pointer heads by ICIR-MCQ R@1 (Eq. 3; exact below), median, chance."""
    import numpy as np

    rows = []
    for run in runs:
        unit = run.icir_unit()
        position = run.summary(unit)["position"]
        for score, label in (("eq3", "Eq. 3"), ("exact", "exact")):
            grids, chance = pointer_grids(run, unit, score)
            grid = grids[position]
            tops = dict(zip(_tops("Top-"), _top_list(grid, TOP_N)))
            rows.append({"Model": run.name, "Data": unit, "Score": label, **tops,
                         "Median": float(np.median(grid)), "Chance": chance})
    return Table(1, "Top-5 pointer heads by attention-mass R@1 on ICIR-MCQ; cells LxxHyy (R@1)",
                 ["Model", "Data", "Score", *_tops("Top-"), "Median", "Chance"], rows)


def _vhs_r1(summary: dict, score: str) -> list | str:
    """``[head, R@1]`` of the transferred top head on a VHs unit, or `NEEDS_RANKING` (§4.3)."""
    suffix = f"_{score}"
    if summary.get(f"pointer_r1{suffix}") is None:
        return NEEDS_RANKING
    return [summary[f"pointer_top_head{suffix}"], float(summary[f"pointer_r1{suffix}"])]


def table_2(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 2 left half (§4.3, App. H): VHs single-head R@1 of the ICIR-MCQ head and top-K votes."""
    size = options.vhs_size
    rows, notes, votes = [], [], {}
    for run in runs:
        unit = run.vhs_unit(size)
        summary = run.summary(unit)
        vote = run.read(unit, "vote_r1.json", f"rerun icir analyze {run.folder}")
        votes[run.name] = vote
        rows.append({"Model": run.name, "Head R@1 (Eq. 3)": _vhs_r1(summary, "eq3"),
                     "Head R@1 (exact)": _vhs_r1(summary, "exact"), "Chance": float(summary["chance_r1"])})
        notes.append(f"{run.name}: votes with {vote.get('pointer_ranking')}"
                     + (f"; writer votes with {vote['writer_ranking']}" if vote.get("writer") else ""))
        if summary.get("pointer_r1") is None:
            notes.append(f"{run.name}: {unit} ran without heads_ranking; run {run.transfer_command(unit)}")
    columns = ["Model", "Head R@1 (Eq. 3)", "Head R@1 (exact)", "Chance"]
    for kind, label in (("pointer", "Vote@"), ("writer", "Writer vote@")):
        ks = sorted({int(k) for v in votes.values() for k in (v.get(kind) or {})})
        columns += [f"{label}{k}" for k in ks]
        for row in rows:
            curve = votes[row["Model"]].get(kind) or {}
            row.update({f"{label}{k}": curve.get(str(k)) for k in ks})
    return Table(2, f"Image retrieval R@1 on Visual Haystacks (N={size}) of the single pointer head transferred "
                    "from ICIR-MCQ, and top-K majority-vote R@1", columns, rows, notes)


def table_3(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 3 (§5.2): top-5 writer heads by writer R@1 on the ICIR-MCQ held-out pool."""
    import numpy as np

    rows = []
    for run in runs:
        unit = run.icir_unit()
        fit = writer_fits(run, unit)[run.summary(unit)["position"]]
        grid = fit["writer_r1"]
        rows.append({"Model": run.name, "Data": unit, **dict(zip(_tops("Top-"), _top_list(grid, TOP_N))),
                     "Median": float(np.median(grid)), "Pool size": fit.get("pool_size"), "Chance": fit.get("chance")})
    return Table(3, "Top-5 writer heads by writer R@1 on the ICIR-MCQ held-out image pool; cells LxxHyy (R@1)",
                 ["Model", "Data", *_tops("Top-"), "Median", "Pool size", "Chance"], rows)


def table_5(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 5 (App. C.3): transferred top pointer head R@1 on VHs at each haystack size present."""
    sizes = sorted({n for run in runs for n in run.vhs_sizes()})
    if not sizes:
        raise UserInputError(f"{runs[0].folder} has no vhs_single_n* artifacts; run "
                             f"{runs[0].transfer_command('vhs_single')}")
    rows = []
    for run in runs:
        summaries = {n: run.summary(f"vhs_single_n{n}") for n in run.vhs_sizes()}
        if not summaries:
            raise UserInputError(f"{run.folder} has no vhs_single_n* artifacts; "
                                 f"run {run.transfer_command('vhs_single')}")
        heads = sorted({s["pointer_top_head"] for s in summaries.values() if s.get("pointer_r1") is not None})
        for score, label in (("eq3", "Eq. 3"), ("exact", "exact")):
            cells = {f"N={n}": _vhs_r1(s, score) for n, s in summaries.items()}
            cells = {c: v if isinstance(v, str) else v[1] for c, v in cells.items()}
            rows.append({"Model": run.name, "Head": "/".join(heads) or None, "Score": label, **cells})
    return Table(5, "R@1 of the top ICIR-MCQ pointer head on Visual Haystacks across haystack sizes "
                    "(cattok-position readout)", ["Model", "Head", "Score", *(f"N={n}" for n in sizes)], rows)


def table_6(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 6 (App. C.4): top pointer head R@1 next to the model's own accuracy (ICIR-MCQ, VHs N=10)."""
    size, rows = options.vhs_size, []
    for run in runs:
        icir, vhs = run.icir_unit(), run.vhs_unit(size)
        summary = run.summary(icir)
        eq3, exact = pointer_grids(run, icir, "eq3")[0], pointer_grids(run, icir, "exact")[0]
        position = summary["position"]
        rows.append({
            "Model": run.name,
            "ICIR-MCQ head R@1 (Eq. 3)": _top_list(eq3[position], 1)[0],
            "ICIR-MCQ head R@1 (exact)": _top_list(exact[position], 1)[0],
            "ICIR-MCQ acc": run.metric(icir, "acc"),
            f"VHs N={size} head R@1 (Eq. 3)": _vhs_r1(run.summary(vhs), "eq3"),
            f"VHs N={size} head R@1 (exact)": _vhs_r1(run.summary(vhs), "exact"),
            f"VHs N={size} acc": run.metric(vhs, "acc"),
        })
    return Table(6, f"Top pointer head retrieval R@1 and base-model accuracy on ICIR-MCQ and Visual Haystacks "
                    f"(N={size}); accuracy as a fraction", list(rows[0]), rows)


def _position_row(grid, reference, k: int) -> dict:
    """rho and top-K overlap (count) against the cattok grid, best R@1, mean R@1 of the cattok top-K."""
    from harness.metrics.rankings import head_ranking, top_k_overlap

    fixed = head_ranking(reference)[:k]
    base = _mean_over(reference, fixed)
    mean = _mean_over(grid, fixed)
    return {"rho": _spearman(grid, reference), "overlap": round(top_k_overlap(grid, reference, k) * k),
            "best": float(grid.max()), "mean": mean, "retained": mean / base if base else None}


def _readout_grids(run: Run, unit: str) -> tuple[dict, dict]:
    """The Eq. 3 and exact grids of every readout position, checked for a sweep with the cattok."""
    eq3, exact = pointer_grids(run, unit, "eq3")[0], pointer_grids(run, unit, "exact")[0]
    hint = (f"rerun icir eval --tasks {unit} --model_args readout={FULL_READOUT} "
            f"--output_path <a new OUTPUT> (App. G)")
    if len(eq3) < 2:
        raise UserInputError(f"{run.folder}: {unit} was captured at one readout position ({', '.join(eq3)}); {hint}")
    if REFERENCE_POSITION not in eq3:
        raise UserInputError(f"{run.folder}: {unit} has no {REFERENCE_POSITION} readout to compare with; {hint}")
    return eq3, exact


def table_10(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 10 (App. G): pointer and writer rankings at each readout position against the cattok."""
    rows, small = [], []
    for run in runs:
        unit = run.icir_unit()
        eq3, exact = _readout_grids(run, unit)
        fits = writer_fits(run, unit) if (run.artifacts / unit / "writer_r1.json").is_file() else {}
        writer_ref = fits.get(REFERENCE_POSITION, {}).get("writer_r1")
        k = top_k(eq3[REFERENCE_POSITION], options.top_k)
        small += every_head_note(run, k, eq3[REFERENCE_POSITION].size)
        for position, grid in eq3.items():
            p = _position_row(grid, eq3[REFERENCE_POSITION], k)
            row = {"Model": run.name, "Position": position, "K": k, "Pointer rho": p["rho"],
                   "Pointer overlap": p["overlap"], "Best R@1": p["best"],
                   "Best R@1 (exact)": float(exact[position].max()),
                   "Cattok top-K mean R@1": p["mean"], "Pointer retained": p["retained"]}
            if position in fits and writer_ref is not None:
                w = _position_row(fits[position]["writer_r1"], writer_ref, k)
                row.update({"Best writer R@1": w["best"], "Writer rho": w["rho"], "Writer overlap": w["overlap"],
                            "Writer retained": w["retained"]})
            rows.append(row)
    columns = ["Model", "Position", "K", "Pointer rho", "Pointer overlap", "Best R@1", "Best R@1 (exact)",
               "Cattok top-K mean R@1", "Pointer retained", "Best writer R@1", "Writer rho", "Writer overlap",
               "Writer retained"]
    notes = [("rho: Spearman over all heads against the cattok ranking (– where a grid is constant); overlap: "
              "heads shared by the two top-K sets; retained: mean R@1 of the cattok top-K set at the position "
              "divided by its cattok value; writer columns only at positions with fitted probes")]
    return Table(10, "Readout-position control (pointer ranking: Eq. 3)", columns, rows, notes + small)


def _discovery_grids(run: Run) -> tuple[str, Any, Any, Any]:
    """``(unit, Eq. 3 grid, exact grid, writer grid)`` of the ICIR-MCQ unit at its reported position."""
    unit = run.icir_unit()
    position = run.summary(unit)["position"]
    writer = writer_fits(run, unit)
    if position not in writer:
        raise UserInputError(f"{run.folder}: {unit}/writer_r1.json has no {position} fit; "
                             f"rerun icir analyze {run.folder}")
    eq3, exact = pointer_grids(run, unit, "eq3")[0], pointer_grids(run, unit, "exact")[0]
    return unit, eq3[position], exact[position], writer[position]["writer_r1"]


def _discovery_top_k(run: Run, options: argparse.Namespace, notes: list[str]) -> tuple[str, Any, Any, Any, int]:
    """`_discovery_grids` plus the run's K (`top_k`); a note goes to `notes` when K is every head."""
    unit, pointer, exact, writer = _discovery_grids(run)
    k = top_k(pointer, options.top_k)
    notes += every_head_note(run, k, pointer.size)
    return unit, pointer, exact, writer, k


def table_11(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 11 (App. I): heads in both the pointer and the writer top-K, by pointer rank."""
    from harness.metrics.rankings import set_partition

    rows, notes = [], []
    for run in runs:
        _, pointer, exact, writer, k = _discovery_top_k(run, options, notes)
        part = set_partition(pointer, writer, k)
        for head in part.overlap:
            layer, index = parse_head_name(head)
            rows.append({"Model": run.name, "Head": head, "Pointer rank": part.pointer_rank[head],
                         "Writer rank": part.writer_rank[head], "Pointer R@1": float(pointer[layer, index]),
                         "Pointer R@1 (exact)": float(exact[layer, index]), "Writer R@1": float(writer[layer, index])})
        notes.append(f"{run.name}: {len(part.overlap)} overlap heads of the top-{k} "
                     f"({len(part.pointer_only)} pointer-only, {len(part.writer_only)} writer-only)")
    return Table(11, "Overlap heads (pointer top-K and writer top-K, cattok readout) by pointer rank",
                 ["Model", "Head", "Pointer rank", "Writer rank", "Pointer R@1", "Pointer R@1 (exact)", "Writer R@1"],
                 rows, notes)


def table_13(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 13 (App. J.1): top pointer head R@1, pointer-writer top-K overlap, chance K^2/(L*H)."""
    from harness.metrics.rankings import chance_overlap, top_k_overlap

    rows, notes = [], []
    for run in runs:
        unit, pointer, exact, writer, k = _discovery_top_k(run, options, notes)
        overlap = round(top_k_overlap(pointer, writer, k) * k)
        chance = chance_overlap(k, *pointer.shape)
        rows.append({"Model": run.name, "Data": unit, "Heads": int(pointer.size),
                     "Top-1 R@1 (Eq. 3)": _top_list(pointer, 1)[0], "Top-1 R@1 (exact)": _top_list(exact, 1)[0],
                     "K": k, "Overlap": overlap, "Chance": chance, "Ratio": overlap / chance})
    return Table(13, "Pointer-writer discovery on ICIR-MCQ: overlap counts heads in both top-K lists; "
                     "chance is K^2/(L*H)",
                 ["Model", "Data", "Heads", "Top-1 R@1 (Eq. 3)", "Top-1 R@1 (exact)", "K", "Overlap", "Chance",
                  "Ratio"], rows, notes)


def table_4(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 4 (App. C.2): per pair of runs and ranking, grid correlations with intervals and top-K overlap."""
    from harness.metrics.rankings import chance_overlap, correlation, correlation_ci, top_k_overlap

    if len(runs) < 2:
        raise UserInputError("Table 4 compares models: pass at least two run folders")
    grids = {}
    for run in runs:
        _, pointer, _, writer = _discovery_grids(run)
        grids[run.name] = {"pointer": pointer, "writer": writer}
    shapes = {name: g["pointer"].shape for name, g in grids.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape[0]} x {shape[1]}" for name, shape in shapes.items())
        raise UserInputError(f"Table 4 compares rankings of models of the same shape (L x H); got {listed}")
    rows = []
    for i, first in enumerate(runs):
        for second in runs[i + 1:]:
            for ranking in ("pointer", "writer"):
                a, b = grids[first.name][ranking], grids[second.name][ranking]
                row = {"Models": f"{first.name} vs {second.name}", "Ranking": ranking}
                for method, column in (("pearson", "Pearson"), ("spearman", "Spearman")):
                    row[column] = float(correlation(a.ravel(), b.ravel(), method))
                    low, high = correlation_ci(a, b, method)
                    row[f"{column} 95% CI"] = None if math.isnan(low) else f"[{low:.3f}, {high:.3f}]"
                row["Layer-max Pearson"] = float(correlation(a.max(axis=1), b.max(axis=1), "pearson"))
                for k in CROSS_MODEL_KS:
                    kk = top_k(a, k)
                    row[f"Top-{k}"] = f"{round(top_k_overlap(a, b, kk) * kk)}/{kk} ({chance_overlap(kk, *a.shape):.1f})"
                rows.append(row)
    heads = next(iter(grids.values()))["pointer"].size
    notes = [f"K is capped at the models' {heads} heads"] if heads < max(CROSS_MODEL_KS) else []
    return Table(4, "Cross-model ranking similarity on ICIR-MCQ (cattok): correlations over all heads with "
                    "paired head-bootstrap 95% intervals; Top-K: shared heads/K (chance K^2/(L*H))",
                 ["Models", "Ranking", "Pearson", "Pearson 95% CI", "Spearman", "Spearman 95% CI",
                  "Layer-max Pearson", *(f"Top-{k}" for k in CROSS_MODEL_KS)], rows, notes)


TEXT_TOP_K = 10  # Table 15's top-10 sets (App. K)
SHOWN_PER_RANKING = 3  # Table 15 lists each ranking's top-3 heads and the heads in both top-10s


def find_text_unit(run: Run) -> str | None:
    """The run's text needle unit (App. K): the first of `TEXT_NEEDLE_TASKS` it has artifacts of."""
    from harness.constants import TEXT_NEEDLE_TASKS

    return next((t for t in TEXT_NEEDLE_TASKS if (run.artifacts / t / "text_retrieval.json").is_file()), None)


def missing_text_unit(run: Run) -> str:
    """What to run when `run` has no text needle unit."""
    from harness.constants import TEXT_NEEDLE_TASKS

    task = TEXT_NEEDLE_TASKS[0]
    return (f"{run.folder} has no {ARTIFACTS_FOLDER}/{task}/text_retrieval.json; run icir eval --tasks {task} "
            f"--metadata '{{\"text_needle_data\": DIR}}' --output_path {run.folder.parent} (DIR from icir build-needle)")


def head_character(image_rank: int, text_rank: int, k: int = TEXT_TOP_K) -> str:
    """Table 15's "Character" of a head from its 1-based ranks (docs/protocol.md, App. K): "Mixed"
    when both ranks are within 2K, else "Image-specific" or "Text-specific" by the better rank."""
    if image_rank <= 2 * k and text_rank <= 2 * k:
        return "Mixed"
    return "Image-specific" if image_rank < text_rank else "Text-specific"


def table_15(runs: list[Run], options: argparse.Namespace) -> Table:
    """Table 15 (App. K): image pointer ranking (ICIR-MCQ, Eq. 3) beside the text needle ranking."""
    import numpy as np

    from harness.metrics.rankings import chance_overlap, head_ranking

    rows, notes = [], []
    for run in runs:
        unit = run.icir_unit()
        image = pointer_grids(run, unit, "eq3")[0][run.summary(unit)["position"]]
        task = find_text_unit(run)
        if task is None:
            raise UserInputError(missing_text_unit(run))
        text_file = run.read(task, "text_retrieval.json", f"rerun icir analyze {run.folder}")
        text = grid_from_names(text_file["grids"][text_file["score"]], f"{run.artifacts / task}/text_retrieval.json")
        if text.shape != image.shape:
            raise UserInputError(f"{run.folder}: the {task} grid is {text.shape}, the {unit} grid {image.shape}; "
                                 "rerun both tasks on the same model")
        image_order, text_order = head_ranking(image), head_ranking(text)
        image_rank, text_rank = (np.argsort(order) + 1 for order in (image_order, text_order))
        k = min(TEXT_TOP_K, image.size)
        both = [h for h in image_order[:k] if h in set(text_order[:k].tolist())]
        shown = list(dict.fromkeys([*image_order[:SHOWN_PER_RANKING], *text_order[:SHOWN_PER_RANKING], *both]))
        n_heads = image.shape[1]
        for head in shown:
            rows.append({"Model": run.name, "Head": flat_head_name(int(head), n_heads),
                         "Image rank": int(image_rank[head]), "Text rank": int(text_rank[head]),
                         "Character": head_character(int(image_rank[head]), int(text_rank[head]), k),
                         "Image R@1 (Eq. 3)": float(image.ravel()[head]), "Needle mass": float(text.ravel()[head])})
        layers = {name: sorted({int(h) // n_heads for h in order[:k]}) for name, order in
                  (("image", image_order), ("text", text_order))}
        notes += [
            f"{run.name}: top-{k} overlap {len(both)}/{k} (chance {chance_overlap(k, *image.shape):.1f}); the top image "
            f"head ranks {int(text_rank[image_order[0]])} for text, the top text head ranks "
            f"{int(image_rank[text_order[0]])} for image",
            f"{run.name}: image top-{k} in layers {layers['image'][0]}-{layers['image'][-1]}, text top-{k} in layers "
            f"{layers['text'][0]}-{layers['text'][-1]} ({unit} pointer ranking vs {task}, {text_file['n_docs']} documents)",
        ]
    notes.append(f"Character: Mixed when both ranks are within {2 * TEXT_TOP_K}, else Image- or Text-specific by the "
                 "better rank (docs/protocol.md); Image R@1 is the Eq. 3 pointer score on ICIR-MCQ, needle mass the "
                 "mean attention on the needle sentence at the last prefill token")
    return Table(15, "Image vs text retrieval rankings: each head's rank by ICIR-MCQ pointer R@1 and by attention mass "
                     "on the text needle", ["Model", "Head", "Image rank", "Text rank", "Character",
                                            "Image R@1 (Eq. 3)", "Needle mass"], rows, notes)


BUILDERS = {1: table_1, 2: table_2, 3: table_3, 4: table_4, 5: table_5, 6: table_6, 10: table_10, 11: table_11,
            13: table_13, 15: table_15}


def build_table(number: int, folders: list[Path], top_k: int = TOP_K_SETS, vhs_size: int = VHS_SIZE) -> Table:
    """Table `number` of the paper from the run folders `folders` (one model each).

    Raises:
        UserInputError: an unknown table, a folder that is no run folder, or missing artifacts.
    """
    if number not in BUILDERS:
        raise UserInputError(f"no report for table {number}; choose one of {', '.join(map(str, TABLES))}")
    if top_k < 1:
        raise UserInputError(f"--top_k must be at least 1, got {top_k}")
    options = argparse.Namespace(top_k=top_k, vhs_size=vhs_size)
    return BUILDERS[number](find_runs(folders), options)


# ---------------------------------------------------------------------------- CLI


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir report --table N [--json] RUN_FOLDER [RUN_FOLDER ...]``."""
    parser = subparsers.add_parser(
        "report",
        help="print one of the paper's tables (1, 2, 3, 4, 5, 6, 10, 11, 13, 15) from finished runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_folders", nargs="+", type=Path, metavar="RUN_FOLDER",
                        help="run folders OUTPUT/<model> of icir eval --output_path OUTPUT (one model each)")
    parser.add_argument("--table", type=int, required=True, choices=TABLES, help="the paper's table number")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of markdown")
    parser.add_argument("--top_k", type=int, default=TOP_K_SETS,
                        help=f"size of the top-K head sets of tables 10, 11, 13 (default {TOP_K_SETS}; capped at L*H)")
    parser.add_argument("--vhs_size", type=int, default=VHS_SIZE,
                        help=f"Visual Haystacks haystack size N of tables 2 and 6 (default {VHS_SIZE})")
    parser.add_argument("--plot", type=Path, metavar="PNG",
                        help="table 10 only: also draw best R@1 and rank correlation per readout position")
    parser.set_defaults(func=run_report)
    compare = subparsers.add_parser(
        "compare", help="cross-model ranking similarity (Table 4) and image vs text retrieval heads (Table 15)",
        description="Table 4 for two or more run folders of models of the same L x H (App. C.2); Table 15 for "
                    "every run folder that also ran text_needle (App. K).")
    compare.add_argument("run_folders", nargs="+", type=Path, metavar="RUN_FOLDER",
                         help="run folders OUTPUT/<model> (Table 4: two or more of the same L x H)")
    compare.add_argument("--json", action="store_true", help="print the rows as JSON instead of markdown")
    compare.set_defaults(func=run_compare, top_k=TOP_K_SETS, vhs_size=VHS_SIZE)


def run_report(args: argparse.Namespace) -> int:
    """Print the table as markdown, or its rows as JSON with ``--json``."""
    if args.plot is not None and args.table != 10:
        raise UserInputError(f"--plot draws table 10 (readout positions), not table {args.table}")
    table = build_table(args.table, args.run_folders, top_k=args.top_k, vhs_size=args.vhs_size)
    print(json.dumps(table.to_json(), indent=2) if args.json else table.markdown())
    if args.plot is not None:
        print(f"figure: {plot_table_10(table, args.plot)}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """``icir compare``: Table 4 with two or more runs, Table 15 for the runs with a text needle task."""
    from harness.constants import TEXT_NEEDLE_TASKS

    runs = find_runs(args.run_folders)
    with_text = [run for run in runs if find_text_unit(run)]
    if len(runs) < 2 and not with_text:
        raise UserInputError(f"icir compare needs two run folders of the same L x H (Table 4), or a run with "
                             f"{TEXT_NEEDLE_TASKS[0]} (Table 15): {missing_text_unit(runs[0])}")
    tables = []
    if len(runs) >= 2:
        tables.append(table_4(runs, args))
    if with_text:
        tables.append(table_15(with_text, args))
    if args.json:
        print(json.dumps([table.to_json() for table in tables], indent=2))
    else:
        print("\n\n".join(table.markdown() for table in tables))
    return 0


PLOTTED_10 = {"best pointer R@1 (Eq. 3)": "Best R@1", "pointer rho vs cattok": "Pointer rho",
              "best writer R@1": "Best writer R@1", "writer rho vs cattok": "Writer rho"}


def plot_table_10(table: Table, path: Path) -> Path:
    """Table 10's best R@1 and Spearman rho against the cattok per position, per model (`plots`)."""
    from harness.plots import plot_readout_positions

    series: dict[str, dict[str, dict[str, float | None]]] = {}
    for row in table.rows:
        for quantity, column in PLOTTED_10.items():
            value = row.get(column)
            valid = isinstance(value, (int, float)) and not math.isnan(value)
            series.setdefault(row["Model"], {}).setdefault(quantity, {})[row["Position"]] = value if valid else None
    plot_readout_positions(series, path)
    return path
