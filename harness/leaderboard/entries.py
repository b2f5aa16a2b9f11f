"""Leaderboard entries: the row and the per-model figures of each submission in a leaderboard folder.

A leaderboard folder follows MTEB's results-repository layout, so it can live as a Hub dataset
that takes submissions as pull requests::

    results/<org__model>/<revision>/          one submission folder (``icir submit``)
    verifications/<org__model>/<revision>.json  a reviewer's ``icir leaderboard verify --record``

``<revision>`` is the model's Hub commit (or revision), else ``sha256-<first 12 hex digits of the
weights sha256>`` for a local model. An entry is *verified* when its verification record passed
and names the sha256 of the submission's ``submission.json``; else *self-reported*.

Every value of a row comes from the submission's own files (which `validate` recomputed), by
the column names of `COLUMNS`; the VHs columns repeat per haystack size N (`vhs_columns`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.activation_store import file_sha256
from harness.constants import POINTER_SCORES, TOP_K_SETS, VOTE_KS, icir_mcq_unit, vhs_single_size
from harness.leaderboard.schema import MANIFEST
from icir_common import UserInputError, read_json

RESULTS_FOLDER = "results"
VERIFICATIONS_FOLDER = "verifications"
VERIFIED, SELF_REPORTED = "verified", "self-reported"

# (column, heading) of the headline table, in order; every column is sortable.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("model", "Model"),
    ("revision", "Revision"),
    ("family", "Family"),
    ("badge", "Status"),
    ("shape", "L x H"),
    ("icir_mcq_acc", "ICIR-MCQ acc"),
    ("pointer_head", "Best pointer head"),
    ("pointer_r1", "Pointer R@1"),
    ("pointer_r1_exact", "Pointer R@1 (exact, Eq. 1)"),
    ("pointer_r1_median", "Median head R@1"),
    ("writer_head", "Best writer head"),
    ("writer_r1", "Writer R@1"),
    ("overlap", "Pointer-writer overlap@K"),
    ("overlap_chance", "Overlap chance K²/(L·H)"),
    ("ablation_drop", "Ablation drop (overlap − random)"),
)
VHS_FIELDS: tuple[tuple[str, str], ...] = (
    ("acc", "VHs N={n} acc"),
    ("pointer_r1", "VHs N={n} pointer R@1"),
    ("vote_r1", "VHs N={n} best vote R@1"),
    ("vote_k", "VHs N={n} best K"),
)


def vhs_columns(sizes: list[int]) -> list[tuple[str, str]]:
    """``[(column, heading)]`` of the VHs columns for haystack sizes `sizes` (``vhs_n{N}_{field}``)."""
    return [(f"vhs_n{n}_{field}", heading.format(n=n)) for n in sizes for field, heading in VHS_FIELDS]


@dataclass(frozen=True)
class Entry:
    """One submission as the leaderboard shows it.

    Attributes:
        key: ``<org__model>/<revision>``, its path under ``results/`` (also its page's name).
        row: ``{column: value}`` for `COLUMNS`, the VHs columns of its sizes, and ``submitter``,
            ``link``, ``protocol``, ``on_protocol``, ``deviations``, ``n_parameters``,
            ``architecture``, ``overlap_k``, ``vhs_sizes``, ``vhs_vote_r1`` (``{N: {K: R@1}}``),
            ``dataset_fingerprints`` (``{task: fingerprint}`` of the evaluated documents).
        grids: ``{"pointer_exact": [L][H], "pointer_eq3": [L][H], "writer": [L][H] | None}`` R@1 of
            each head on ICIR-MCQ (``LxxHyy`` is row xx, column yy); ``row["pointer_score"]`` names
            the one that ``pointer_r1`` and the best pointer head use (protocol ``icir-heads/2``: eq3).
        vote_curves: ``{unit: {"pointer": {K: R@1}, "writer": {K: R@1} | None}}`` per VHs task.
        chance: ``{"pointer": chance R@1 of ICIR-MCQ, "writer": 1 / pool size or None}``.
        dose_response: the ablation grid's ``cells.json`` rows (`harness.ablation.stats.CellStats.row`)
            when submitted, else None; the row's ``ablation_drop`` is the mean over the overlap
            arm's cells of the random-control mean accuracy minus the arm's (positive: the overlap
            heads matter more than random ones, §6.2).
    """

    key: str
    row: dict[str, Any]
    grids: dict[str, Any]
    vote_curves: dict[str, dict[str, Any]]
    chance: dict[str, float | None]
    dose_response: list[dict[str, Any]] | None


def name_of(model: dict[str, Any]) -> str:
    """The ``<org__model>`` folder name of a manifest's model entry: the name its run folder had
    on the submitter's machine (`harness.model_names.model_name`: a Hub id as ``org__name``, a
    local folder's last component, ``icir-demo-model`` for the shipped model)."""
    return str(model["name"])


def revision_of(model: dict[str, Any]) -> str:
    """The ``<revision>`` folder name of a manifest's model entry (module docstring)."""
    if model.get("commit"):
        return str(model["commit"])
    if model.get("weights_sha256"):
        return f"sha256-{model['weights_sha256'][:12]}"
    return str(model.get("revision") or "unknown").replace("/", "__")


def entry_key(manifest: dict[str, Any]) -> str:
    """``<org__model>/<revision>`` of a manifest: where the submission belongs under ``results/``."""
    return f"{name_of(manifest['model'])}/{revision_of(manifest['model'])}"


def _grid(document: dict[str, Any] | None, position: str, n_layers: int, n_heads: int) -> list[list[float]] | None:
    """``{position: {LxxHyy: R@1}}`` (or ``{LxxHyy: R@1}``) as an ``[L][H]`` list."""
    if document is None:
        return None
    names = document.get(position, document)
    return [[names.get(f"L{layer:02d}H{head:02d}") for head in range(n_heads)] for layer in range(n_layers)]


def _result_row(root: Path, manifest: dict[str, Any], unit: str) -> dict[str, Any]:
    """lm-eval's results row of `unit` (a group's row lives in its first task's results file)."""
    tasks = manifest["units"][unit]
    results = read_json(root / manifest["results"][tasks[0]])["results"]
    return {key.split(",")[0]: value for key, value in results.get(unit, {}).items()}


def load_entry(folder: Path, verification: Path | None) -> Entry:
    """The `Entry` of the (validated) submission folder `folder`.

    Args:
        verification: its verification record, or None (self-reported).

    Raises:
        UserInputError: an unreadable file of the submission or of the verification record.
    """
    manifest = read_json(folder / MANIFEST)
    model = manifest["model"]
    n_layers, n_heads = model["n_layers"], model["n_heads"]
    artifacts = folder / "artifacts"
    row: dict[str, Any] = {
        "model": name_of(model), "revision": revision_of(model), "family": model["model_type"],
        "architecture": model["architecture"], "n_parameters": model["n_parameters"],
        "shape": f"{n_layers} x {n_heads}", "badge": _badge(folder, verification),
        "submitter": manifest.get("submitter"), "link": manifest.get("link"),
        "protocol": manifest["protocol"]["protocol"], "on_protocol": manifest["protocol"]["on_protocol"],
        "deviations": manifest["protocol"]["deviations"], "ablation_drop": None,
        "dataset_fingerprints": {task: record["fingerprint"] for task, record in manifest["datasets"].items()},
    }
    grids: dict[str, Any] = {"pointer_exact": None, "pointer_eq3": None, "writer": None}
    chance: dict[str, float | None] = {"pointer": None, "writer": None}
    unit = icir_mcq_unit(manifest["units"])
    k = min(TOP_K_SETS, n_layers * n_heads)
    row.update({"icir_mcq_acc": None, "pointer_head": None, "pointer_r1": None, "pointer_r1_exact": None,
                "pointer_score": None,
                "pointer_r1_median": None, "writer_head": None, "writer_r1": None, "overlap": None,
                "overlap_chance": None, "overlap_k": k})
    if unit is not None:
        summary = read_json(artifacts / unit / "summary.json")
        position = summary["position"]
        overlap = summary.get("pointer_writer_overlap") or {}
        row.update({
            "icir_mcq_acc": _result_row(folder, manifest, unit).get("acc"),
            "pointer_head": summary["pointer_top_head"], "pointer_r1": summary["pointer_r1"],
            "pointer_r1_exact": summary["pointer_r1_exact"], "pointer_r1_median": summary["pointer_r1_median"],
            "pointer_score": summary["ranking_score"],
            "writer_head": summary.get("writer_top_head"), "writer_r1": summary.get("writer_r1"),
            "overlap": overlap.get("count"), "overlap_chance": overlap.get("chance"),
        })
        for score in POINTER_SCORES:
            document = read_json(artifacts / unit / f"pointer_r1_{score}.json")["grids"]
            grids[f"pointer_{score}"] = _grid(document, position, n_layers, n_heads)
        chance["pointer"] = summary["chance_r1"]
        writer_file = artifacts / unit / "writer_r1.json"
        if writer_file.is_file():
            fit = read_json(writer_file)[position]
            grids["writer"] = _grid(fit["writer_r1"], position, n_layers, n_heads)
            chance["writer"] = fit.get("chance")
    sizes, curves, votes = [], {}, {}
    for task in sorted((t for t in manifest["tasks"] if vhs_single_size(t)), key=vhs_single_size):
        n = vhs_single_size(task)
        sizes.append(n)
        summary = read_json(artifacts / task / "summary.json")
        curve = {int(kk): v for kk, v in summary["vote_r1"].items()}
        best_k = max(VOTE_KS, key=lambda kk: (curve.get(kk, -1.0), -kk))
        row.update({f"vhs_n{n}_acc": _result_row(folder, manifest, task).get("acc"),
                    f"vhs_n{n}_pointer_r1": summary["pointer_r1"], f"vhs_n{n}_vote_r1": curve.get(best_k),
                    f"vhs_n{n}_vote_k": best_k})
        votes[n] = curve
        writer = summary.get("writer_vote_r1")
        curves[task] = {"pointer": curve, "writer": None if writer is None else {int(kk): v for kk, v in writer.items()}}
    row["vhs_sizes"], row["vhs_vote_r1"] = sizes, votes
    dose = None
    if "ablation" in manifest:
        dose = read_json(folder / manifest["ablation"]["cells"])
        drops = [-r["minus_random"] for r in dose if r["arm"] == "overlap" and r["minus_random"] is not None]
        row["ablation_drop"] = sum(drops) / len(drops) if drops else None
    return Entry(entry_key(manifest), row, grids, curves, chance, dose)


def _badge(folder: Path, verification: Path | None) -> str:
    if verification is None or not verification.is_file():
        return SELF_REPORTED
    record = read_json(verification)
    passed = record.get("passed") is True and record.get("manifest_sha256") == file_sha256(folder / MANIFEST)
    return VERIFIED if passed else SELF_REPORTED


def submission_folders(leaderboard: Path) -> list[Path]:
    """Every ``results/<org__model>/<revision>/`` folder of `leaderboard`, sorted.

    Raises:
        UserInputError: no ``results/`` folder, or a folder of another depth holding a manifest.
    """
    results = Path(leaderboard) / RESULTS_FOLDER
    if not results.is_dir():
        raise UserInputError(f"{leaderboard} has no {RESULTS_FOLDER}/ folder; lay it out as "
                             f"{RESULTS_FOLDER}/<org__model>/<revision>/submission.json")
    folders = sorted(path.parent for path in results.rglob(MANIFEST))
    for folder in folders:
        if len(folder.relative_to(results).parts) != 2:
            raise UserInputError(f"{folder / MANIFEST} is not at {RESULTS_FOLDER}/<org__model>/<revision>/")
    return folders


def verification_path(leaderboard: Path, key: str) -> Path:
    """Where the verification record of entry `key` lives in `leaderboard`."""
    return Path(leaderboard) / VERIFICATIONS_FOLDER / f"{key}.json"

