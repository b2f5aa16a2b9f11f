"""The analysis stage around lm-eval's results: `harness.analysis` in, metrics and artifacts out.

`analyze_results` is the one step that runs after every evaluation (``icir eval``,
`harness.evaluate`) and in ``icir analyze RUN_FOLDER`` on a finished run (a plain ``lm_eval``
run with ``store=DIR`` included): it reads the run's documents from the activation store once
(`harness.analysis.analyse_run`), writes the artifacts (`harness.artifacts`), adds the head
metrics to lm-eval's results dict (``results`` and ``groups`` sections, key ``<metric>,none``,
so lm-eval's table and results JSON show them) and annotates lm-eval's logged samples with each
document's record (answer, correctness, target image, the top pointer head's pick; no paths).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

from harness.activation_store import SETTINGS_FILE
from harness.analysis import HeadAnalysis, RunAnalysis, RunSpec, analyse_run
from harness.artifacts import pointer_values, summary, write_artifacts, write_text_artifacts
from harness.constants import (
    POINTER_METRICS,
    VOTE_METRICS,
    WRITER_METRICS,
    WRITER_VOTE_METRICS,
)
from harness.metrics.rankings import top_head_values
from harness.metrics.writer import WriterProbeConfig
from harness.protocol import PROTOCOL_POINTER_MODE, merged_token_summary, protocol_record, write_protocol
from icir_common import UserInputError


def run_spec(results: dict, model_args: dict[str, Any]) -> RunSpec:
    """The `RunSpec` of an lm-eval run: its store, and each stored task's evaluated document count.

    Raises:
        UserInputError: the run had no ``store`` folder (a temporary store is gone after the run)
            or the folder holds no settings file.
    """
    store = model_args.get("store")
    if not store or not (Path(store) / SETTINGS_FILE).is_file():
        raise UserInputError(
            f"the run's activation store {store or '(temporary)'} is not there: head metrics are computed from it, "
            f"so run with --model_args store=DIR (icir eval sets it with --output_path)"
        )
    shards = Path(store) / "shards"
    tasks = {
        task: int(counts["effective"])
        for task, counts in sorted(results.get("n-samples", {}).items())
        if (shards / task).is_dir()
    }
    return RunSpec(Path(store), tasks, model_args.get("heads_ranking"), model_args.get("writer_probes"),
                   WriterProbeConfig.from_arguments(model_args),
                   model_args.get("pointer_mode", PROTOCOL_POINTER_MODE))


def _table_values(analysis: HeadAnalysis) -> dict[str, float | int]:
    """The unit's metrics for lm-eval's table: `POINTER_METRICS` that are defined, votes, writer."""
    pointer = pointer_values(analysis)
    values: dict[str, float | int] = {m: pointer[m] for m in POINTER_METRICS if pointer[m] is not None}
    values.update({metric: analysis.vote_r1[int(metric.split("@")[1])] for metric in VOTE_METRICS})
    if analysis.writer_r1 is not None:
        values["writer_r1"] = analysis.writer_best
    if analysis.writer_vote_r1 is not None:
        values.update({m: analysis.writer_vote_r1[int(m.split("@")[1])] for m in WRITER_VOTE_METRICS})
    return values


# lm-eval's table marks a metric with an arrow when higher is better; indices and chance get none.
HIGHER_IS_BETTER = {
    **dict.fromkeys(POINTER_METRICS + WRITER_METRICS + VOTE_METRICS + WRITER_VOTE_METRICS, True),
    **dict.fromkeys(("pointer_top_head", "pointer_top_head_eq3", "chance_r1"), None),
}


def add_to_results(results: dict, analyses: dict[str, HeadAnalysis]) -> None:
    """Put each unit's head metrics into lm-eval's ``results`` (and ``groups``) rows, in place."""
    for name, analysis in analyses.items():
        table = _table_values(analysis)
        values = {f"{metric},none": value for metric, value in table.items()}
        for section in ("results", "groups"):
            if name in results.get(section, {}):
                results[section][name].update(values)
        better = results.setdefault("higher_is_better", {}).setdefault(name, {})
        better.update({metric: HIGHER_IS_BETTER[metric] for metric in table})


def annotate_samples(samples: dict[str, list[dict]], run: RunAnalysis) -> None:
    """Add each document's record (`analysis.document_records`) to lm-eval's logged samples, in place."""
    for task, logged in samples.items():
        by_id = {row["doc_id"]: row for row in run.documents.get(task, [])}
        for sample in logged:
            row = by_id.get(int(sample["doc_id"]))
            if row is not None:
                sample.update({key: value for key, value in row.items() if key != "doc_id"})


def _same_run(old: dict, new: dict, tasks: list[str]) -> bool:
    """Whether two protocol records describe the same run of `tasks` (settings, model, documents)."""
    def key(record):
        return (record["settings"], {k: record["model"].get(k) for k in ("weights_sha256", "commit", "dtype")},
                {task: record["datasets"].get(task) for task in tasks})
    return key(old) == key(new)


def _check_unit_folder(folder: Path, record: dict, tasks: list[str], overwrite: bool) -> None:
    """Refuse to mix this run into another run's artifact folder; with `overwrite`, remove the old one."""
    from harness.protocol import PROTOCOL_FILE

    old_file = folder / PROTOCOL_FILE
    if not folder.exists():
        return
    try:
        same = _same_run(json.loads(old_file.read_text()), json.loads(json.dumps(record)), tasks)
    except (OSError, ValueError, KeyError, TypeError):
        same = False
    if same:
        return
    if not overwrite:
        raise UserInputError(
            f"{folder} holds the artifacts of another run (other settings, model or documents); pass --overwrite "
            f"(icir eval / icir analyze) to replace that folder, or choose another --output_path"
        )
    shutil.rmtree(folder)


def analyze_results(results: dict, model_args: dict[str, Any], artifacts_dir: Path | None,
                    overwrite: bool = False) -> dict[str, dict]:
    """Run the analysis stage on lm-eval's `results`; add metrics, samples' records, artifacts.

    Args:
        results: lm-eval's results dict (``n-samples``, ``results``, ``groups``, and
            ``samples`` when logged); updated in place, plus ``results["icir"]``.
        model_args: the ``hf-multimodal-heads`` arguments of the run (``store``,
            ``heads_ranking``, ``writer_probes``).
        artifacts_dir: folder of the per-unit artifact folders, or None for none.
        overwrite: replace a unit folder that holds another run's artifacts (else refused).

    Returns:
        ``{task or group name: summary}`` (`artifacts.summary`); the run's protocol record
        (`harness.protocol`) is ``results["icir"]["protocol"]`` and each unit's
        ``artifacts_dir/<unit>/protocol.json``; a text needle task's top-5 heads by needle mass
        are ``results["icir"]["text_heads"][task]`` (its artifacts: `artifacts.write_text_artifacts`).

    Raises:
        UserInputError: see `run_spec` and `analysis.analyse_run`; a unit folder of another run
            without `overwrite` (checked for every unit before any is written).
    """
    spec = run_spec(results, model_args)
    settings = json.loads((spec.store / SETTINGS_FILE).read_text())
    run = analyse_run(spec, tuple(settings["readout"]), settings)
    record = protocol_record(settings, model_args, results, run.datasets, spec.writer_config)
    if artifacts_dir is not None:
        for name, analysis in run.analyses.items():
            _check_unit_folder(Path(artifacts_dir) / name, record, analysis.tasks, overwrite)
        for task in run.text:
            _check_unit_folder(Path(artifacts_dir) / task, record, [task], overwrite)
    summaries = {}
    for name, analysis in run.analyses.items():
        summaries[name] = summary(analysis, name)
        tokens = [run.datasets[task]["visual_tokens_per_image"] for task in analysis.tasks]
        summaries[name]["visual_tokens_per_image"] = merged_token_summary(tokens)
        if artifacts_dir is not None:
            write_artifacts(analysis, Path(artifacts_dir) / name, name, run.documents.get(name))
            write_protocol(Path(artifacts_dir) / name, record)
    text_heads = {}
    for task, text in run.text.items():
        if artifacts_dir is not None:
            write_text_artifacts(text, Path(artifacts_dir) / task)
            write_protocol(Path(artifacts_dir) / task, record)
        text_heads[task] = top_head_values(text.grids[text.primary], 5)
        results["results"].setdefault(task, {})["needle_mass_top,none"] = text_heads[task][0][1]
    add_to_results(results, run.analyses)
    if results.get("samples"):
        annotate_samples(results["samples"], run)
    results["icir"] = {"artifacts": None if artifacts_dir is None else str(artifacts_dir), "summaries": summaries,
                       "protocol": record, "text_heads": text_heads}
    return summaries


def format_summaries(summaries: dict[str, dict], artifacts_dir: str | Path | None,
                     text_heads: dict[str, list] | None = None) -> str:
    """Human-readable head summary printed after lm-eval's table ("" without head metrics);
    `text_heads`: the text needle tasks' top heads by needle mass (``results["icir"]["text_heads"]``)."""
    lines = []
    for task, heads in (text_heads or {}).items():
        top = ", ".join(f"{head} {mass:.3f}" for head, mass in heads)
        lines.append(f"\nText retrieval heads ({task}, mean attention mass on the needle at the last prefill "
                     f"token; App. K): {top}")
    if not summaries:
        return "\n".join(lines)
    lines += ["", "Head metrics (readout position; pointer_r1 exact and Eq. 3, median, chance; top-5 exact heads):"]
    for name, s in summaries.items():
        top = ", ".join(f"{head} {r1:.3f}" for head, r1 in s["top_pointer_heads"][:5])
        writer = "" if s["writer_r1"] is None or math.isnan(s["writer_r1"]) else f"  writer_r1 {s['writer_r1']:.3f}"
        if s["pointer_r1"] is None:
            pointer = (f"pointer_r1_oracle {s['pointer_r1_oracle']:.3f} ({s['pointer_oracle_head']}, "
                       f"selected on the evaluation data)")
        else:
            pointer = (f"pointer_r1 {s['pointer_r1']:.3f} ({s['pointer_top_head']}) "
                       f"eq3 {s['pointer_r1_eq3']:.3f} ({s['pointer_top_head_eq3']})")
            if s["pointer_r1_oracle"] is not None:
                pointer += f"  oracle {s['pointer_r1_oracle']:.3f} ({s['pointer_oracle_head']})"
        lines.append(
            f"  {name:<16} {s['position']:<6} {pointer}  median {s['pointer_r1_median']:.3f}  "
            f"chance {s['chance_r1']:.3f}{writer}  exact~eq3 spearman {s['pointer_rank_spearman']:.2f}  top: {top}"
        )
        tokens = s.get("visual_tokens_per_image")
        if tokens:
            lines.append(f"    visual tokens per image: min {tokens['min']}, mean {tokens['mean']:.1f}, "
                         f"max {tokens['max']}")
        lines.extend(f"    note: {note}" for note in s["notes"])
    if artifacts_dir is not None:
        lines.append(f"Artifacts (grids, rankings, per-document records, writer probes, plots): {artifacts_dir}")
    return "\n".join(lines)
