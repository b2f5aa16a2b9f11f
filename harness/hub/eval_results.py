"""A submission's headline numbers as Hugging Face ``.eval_results/*.yaml`` entries for the model's repo.

The Hub's evaluation-results format (https://huggingface.co/docs/hub/eval-results): a model repo
holds YAML lists under ``.eval_results/``, one item per score, each naming a *benchmark* dataset
repo (one with an ``eval.yaml``, as ``icir publish`` uploads) and one of the tasks that file
declares. The Hub shows them on the model page and on the benchmark's leaderboard; anyone can
add them to any model with a pull request to the model repo (docs/hub.md).

Every task is one metric of one config, ``<config>_<metric>`` (`task_id`), because an entry
carries a single value and no metric name: ``n5_acc``, ``n5_pointer_r1``, ``all_writer_r1``
(``all``: n5 and n6 pooled, the paper's headline), ``single_needle_n10_vote_r1``... The same
names are what `harness.hub.publish` declares in each benchmark's ``eval.yaml``
(`benchmark_tasks`), so the two always agree.

Entries are built and serialised with huggingface_hub's own `EvalResultEntry` and
`eval_result_entries_to_yaml`, and read back with `parse_eval_result_entries`.
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResultEntry, eval_result_entries_to_yaml
from huggingface_hub.constants import EVAL_RESULTS_FOLDER

from harness.constants import ICIR_MCQ_GROUP, icir_mcq_unit
from harness.leaderboard.entries import load_entry
from harness.leaderboard.schema import MANIFEST
from icir_common import UserInputError, atomic_file, read_json

# The Hub dataset repos the entries point at unless told otherwise (``icir publish --repo-id``
# of the two benchmarks; change them with ``--eval-results-dataset`` / ``--eval-results-vhs-dataset``).
DEFAULT_DATASET_REPO = "icir-heads/ICIR-MCQ"
DEFAULT_VHS_DATASET_REPO = "icir-heads/VHs-spans"

KINDS = ("icir_mcq", "vhs")  # the icir_common.BUILD_MARKER kinds that are benchmarks
POOLED_CONFIG = "all"  # the ICIR-MCQ config of every built config's rows together (the lm-eval group)
SPLIT = "test"

# (metric in the task id, column of harness.leaderboard.entries.COLUMNS) for ICIR-MCQ.
ICIR_METRICS: tuple[tuple[str, str], ...] = (
    ("acc", "icir_mcq_acc"),
    ("pointer_r1", "pointer_r1"),
    ("pointer_r1_exact", "pointer_r1_exact"),
    ("writer_r1", "writer_r1"),
)
# metric -> VHs column field (``vhs_n{N}_{field}``, entries.VHS_FIELDS) of the single-needle configs;
# the multi-needle configs are scored by accuracy only.
VHS_SINGLE_METRICS: tuple[str, ...] = ("acc", "pointer_r1", "vote_r1")
VHS_MULTI_METRICS: tuple[str, ...] = ("acc",)


def task_id(config: str, metric: str) -> str:
    """The benchmark task of `metric` on `config`: ``f"{config}_{metric}"`` (module docstring)."""
    return f"{config}_{metric}"


def benchmark_tasks(kind: str, configs: Sequence[str]) -> list[tuple[str, str]]:
    """``[(task id, config)]`` a benchmark of `kind` (``icir_mcq`` or ``vhs``) with `configs` declares.

    ICIR-MCQ: every metric of `ICIR_METRICS` per config, and per metric on `POOLED_CONFIG` when
    there is more than one config. VHs: `VHS_SINGLE_METRICS` per ``single_needle_n*`` config,
    `VHS_MULTI_METRICS` per ``multi_needle_n*`` one.

    Raises:
        ValueError: an unknown `kind`.
    """
    if kind == "icir_mcq":
        scopes = list(configs) + ([POOLED_CONFIG] if len(configs) > 1 else [])
        return [(task_id(config, metric), config) for config in scopes for metric, _ in ICIR_METRICS]
    if kind == "vhs":
        return [(task_id(config, metric), config) for config in configs
                for metric in (VHS_SINGLE_METRICS if config.startswith("single_needle") else VHS_MULTI_METRICS)]
    raise ValueError(f"unknown benchmark kind {kind!r} (expected one of {', '.join(KINDS)})")


def _icir_config(units: dict[str, list[str]]) -> str | None:
    """The ICIR-MCQ config of the headline unit `harness.leaderboard.entries.load_entry` reports."""
    unit = icir_mcq_unit(units)
    if unit == ICIR_MCQ_GROUP and len(units[unit]) > 1:
        return POOLED_CONFIG
    return None if unit is None else units[unit][0].removeprefix(f"{ICIR_MCQ_GROUP}_")


def _date(folder: Path, manifest: dict[str, Any]) -> str | None:
    """ISO-8601 UTC time of the run: lm-eval's ``date`` (epoch seconds) in the first results file."""
    paths = sorted(set(manifest.get("results", {}).values()))
    if not paths:
        return None
    stamp = read_json(folder / paths[0]).get("date")
    if not isinstance(stamp, (int, float)):
        return None
    moment = datetime.datetime.fromtimestamp(stamp, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _notes(row: dict[str, Any], extra: str = "") -> str:
    if row.get("on_protocol"):
        status = "on protocol"
    else:
        status = "off protocol: " + "; ".join(row.get("deviations") or ["(no deviation recorded)"])
    return (f"icir submit, protocol {row['protocol']} ({status}); model revision {row['revision']}; "
            f"{row['badge']}{extra}")


def headline_entries(submission_folder: str | os.PathLike, dataset_repo_id: str | None = None,
                     vhs_repo_id: str | None = None) -> list[EvalResultEntry]:
    """The `EvalResultEntry` items of a submission's headline row, ICIR-MCQ first, then VHs per N.

    Values come from ``harness.leaderboard.entries.load_entry(folder, None).row`` (the leaderboard's
    own row, so the Hub and the leaderboard show the same numbers); None values are skipped. Each
    entry's ``notes`` names the protocol version and status and the model revision; ``date`` is
    the run's lm-eval date; ``source_url`` is the submission's ``--link`` when it has one.

    Raises:
        UserInputError: an unreadable submission file (as `load_entry` raises it).
    """
    folder = Path(submission_folder)
    manifest = read_json(folder / MANIFEST)
    row = load_entry(folder, None).row
    common: dict[str, Any] = {"date": _date(folder, manifest)}
    if row.get("link"):
        common.update(source_url=row["link"], source_name="icir submit")
    entries: list[EvalResultEntry] = []
    config = _icir_config(manifest.get("units", {}))
    if config is not None:
        for metric, column in ICIR_METRICS:
            if row.get(column) is not None:
                entries.append(EvalResultEntry(dataset_id=dataset_repo_id or DEFAULT_DATASET_REPO,
                                               task_id=task_id(config, metric), value=row[column],
                                               notes=_notes(row), **common))
    for n in row.get("vhs_sizes", []):
        for metric in VHS_SINGLE_METRICS:
            value = row.get(f"vhs_n{n}_{metric}")
            if value is None:
                continue
            extra = f"; best K = {row.get(f'vhs_n{n}_vote_k')}" if metric == "vote_r1" else ""
            entries.append(EvalResultEntry(dataset_id=vhs_repo_id or DEFAULT_VHS_DATASET_REPO,
                                           task_id=task_id(f"single_needle_n{n}", metric), value=value,
                                           notes=_notes(row, extra), **common))
    return entries


def write_eval_results(submission_folder: str | os.PathLike, out_dir: str | os.PathLike,
                       dataset_repo_id: str | None = None, *, vhs_repo_id: str | None = None) -> list[Path]:
    """Write the submission's headline numbers as ``.eval_results/*.yaml`` files; return their paths.

    One file per benchmark dataset, ``OUT/.eval_results/<org>__<name>.yaml`` (``OUT`` itself when
    it is already named ``.eval_results``), a YAML list in the Hub's format as huggingface_hub's
    `eval_result_entries_to_yaml` writes it (docs: ``hf upload`` that folder to the model repo as a
    pull request). `dataset_repo_id` is the ICIR-MCQ benchmark repo (default
    `DEFAULT_DATASET_REPO`), `vhs_repo_id` the VHs one (default `DEFAULT_VHS_DATASET_REPO`).
    Each file is written whole or not at all (`icir_common.atomic_file`); a submission without
    any headline number writes nothing and returns ``[]``.

    Raises:
        UserInputError: an unreadable submission file, or a folder that cannot be written.
    """
    out = Path(out_dir)
    folder = out if out.name == EVAL_RESULTS_FOLDER else out / EVAL_RESULTS_FOLDER
    by_dataset: dict[str, list[EvalResultEntry]] = {}
    for entry in headline_entries(submission_folder, dataset_repo_id, vhs_repo_id):
        by_dataset.setdefault(entry.dataset_id, []).append(entry)
    written = []
    for dataset_id, entries in by_dataset.items():
        path = folder / f"{dataset_id.replace('/', '__')}.yaml"
        text = yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=False, allow_unicode=True)
        try:
            with atomic_file(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UserInputError(f"cannot write {path}: {err.strerror or err}; choose another --eval-results "
                                 "folder") from None
        written.append(path)
    return written


def extend_submit(subparsers: argparse._SubParsersAction) -> None:
    """Add ``--eval-results DIR`` (and the two benchmark repo ids) to the ``icir submit`` parser.

    After the submission is written, `write_eval_results` writes its entries into ``DIR``. The
    options are added from here, after `harness.leaderboard.cli` registered ``submit``, so that
    ``harness.leaderboard`` need not import ``harness.hub`` (which imports it): the harness's
    subpackages stay acyclic (tests/test_layering.py). Does nothing when no ``submit`` exists.
    """
    parser = subparsers.choices.get("submit")
    if parser is None:
        return
    parser.add_argument("--eval-results", type=Path, metavar="DIR",
                        help=f"also write the headline numbers as DIR/{EVAL_RESULTS_FOLDER}/*.yaml for the model's "
                             "Hub repo (docs/hub.md)")
    parser.add_argument("--eval-results-dataset", metavar="ORG/NAME", default=None,
                        help=f"the ICIR-MCQ benchmark repo the entries name (default {DEFAULT_DATASET_REPO})")
    parser.add_argument("--eval-results-vhs-dataset", metavar="ORG/NAME", default=None,
                        help=f"the VHs benchmark repo the entries name (default {DEFAULT_VHS_DATASET_REPO})")
    submit_func = parser.get_default("func")

    def run_submit_with_eval_results(args: argparse.Namespace) -> int:
        code = int(submit_func(args) or 0)
        if code == 0 and args.eval_results is not None:
            paths = write_eval_results(args.written, args.eval_results, args.eval_results_dataset,
                                       vhs_repo_id=args.eval_results_vhs_dataset)
            for path in paths:
                print(f"eval results: {path}")
            if not paths:
                print("eval results: the submission has no headline number; nothing written")
        return code

    parser.set_defaults(func=run_submit_with_eval_results)
