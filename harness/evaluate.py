"""`harness.evaluate`: lm-eval's ``simple_evaluate`` with our tasks and model, plus head artifacts.

lm-eval owns the loop (design.md): this module only registers the ``hf-multimodal-heads`` model
and the task folder (`harness.lm_eval_plugin.TASKS_DIR`), checks task names, chooses where the
activation store and the artifacts go, and after the run adds what lm-eval's per-task
aggregation cannot: the pooled head metrics of the ``icir_mcq`` group (one best head over both
haystack sizes, writer probes fit on both, as in the paper) and the artifact files.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from icir_mcq.errors import UserInputError

# Groups whose head metrics are pooled over their tasks (the paper reports ICIR-MCQ on all 6,000).
POOLED_GROUPS = {"icir_mcq": ("icir_mcq_n5", "icir_mcq_n6")}
MODEL_NAME = "hf-multimodal-heads"
ARTIFACTS_FOLDER = "icir_artifacts"
STORE_FOLDER = "activations"
TABLE_METRICS = ("pointer_r1", "pointer_top_head", "pointer_r1_median", "chance_r1", "writer_r1")


def parse_model_args(model_args: str | dict[str, Any] | None) -> dict[str, Any]:
    """Model arguments as a dict (lm-eval's ``key=value,key2=value2`` strings are parsed its way)."""
    from lm_eval.utils import simple_parse_args_string

    if model_args is None:
        return {}
    if isinstance(model_args, str):
        return simple_parse_args_string(model_args)
    return dict(model_args)


def run_folder(output_path: str | os.PathLike, model_args: dict[str, Any]) -> Path:
    """The folder lm-eval writes this model's results into (``OUTPUT/<sanitised model name>``)."""
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker
    from lm_eval.utils import sanitize_model_name

    output_path = Path(output_path)
    if output_path.suffix == ".json":
        return output_path.parent
    return output_path / sanitize_model_name(GeneralConfigTracker._get_model_name(model_args) or "model")


def with_defaults(model_args: dict[str, Any], output_path: str | os.PathLike | None) -> dict[str, Any]:
    """`model_args` with the default model filled in and, given an output path, the store beside the results."""
    from harness.lm_eval_plugin.default_model import default_model_path

    model_args = dict(model_args)
    model_args.setdefault("pretrained", str(default_model_path()))
    if output_path is not None:
        model_args.setdefault("store", str(run_folder(output_path, model_args) / STORE_FOLDER))
    return model_args


def task_manager(metadata: dict[str, Any], include_path: str | os.PathLike | None = None):
    """An lm-eval ``TaskManager`` of the shipped tasks (plus `include_path`), with `metadata`.

    lm-eval's own tasks are left out: ``hf-multimodal-heads`` needs documents with a cattok span,
    and indexing lm-eval's thousands of task files costs tens of seconds per run.
    """
    from lm_eval.tasks import TaskManager

    from harness.lm_eval_plugin import TASKS_DIR

    paths = [str(TASKS_DIR)] + ([str(include_path)] if include_path else [])
    return TaskManager(include_path=paths, include_defaults=False, metadata=metadata)


def check_task_names(tasks: Iterable[str], known: Sequence[str]) -> list[str]:
    """`tasks` (comma-separated entries split) if all are in `known`.

    Raises:
        UserInputError: an unknown name; the message suggests the closest names.
    """
    known = sorted(known)
    names = [name.strip() for entry in tasks for name in entry.split(",") if name.strip()]
    if not names:
        raise UserInputError(f"no task given; choose from {', '.join(known)}")
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}?" if close else f"choose from {', '.join(known)}"
            raise UserInputError(f"unknown task {name!r}; {hint}")
    return names


def finish_run(artifacts_dir: str | os.PathLike | None) -> dict[str, dict]:
    """Pool the groups of `POOLED_GROUPS` and write the artifacts of this process's analyses.

    Reads the analyses the run's aggregations computed (`analysis.computed_analyses`), then forgets
    them. Call it on the process that got lm-eval's results (rank 0).

    Returns:
        ``{task or group name: summary}`` (`artifacts.summary`), pooled groups included.
    """
    from harness.lm_eval_plugin.analysis import analysis_for, clear_analyses, computed_analyses
    from harness.lm_eval_plugin.artifacts import summary, write_artifacts

    analyses = {a.tasks[0]: a for a in computed_analyses() if len(a.tasks) == 1}
    for group, members in POOLED_GROUPS.items():
        if all(task in analyses for task in members):
            analyses[group] = analysis_for([item for task in members for item in analyses[task].items])
    summaries = {}
    for name, analysis in analyses.items():
        summaries[name] = summary(analysis, name)
        if artifacts_dir is not None:
            write_artifacts(analysis, Path(artifacts_dir) / name, name)
    clear_analyses()
    return summaries


def add_pooled_metrics(results: dict, summaries: dict[str, dict]) -> None:
    """Put the pooled group head metrics into lm-eval's ``results`` (``groups`` and ``results``)."""
    for group in POOLED_GROUPS:
        if group not in summaries:
            continue
        values = {f"{metric},none": summaries[group][metric] for metric in TABLE_METRICS}
        values["pointer_top_head,none"] = summaries[group]["pointer_top_head_index"]
        values.update({f"vote_r1@{k},none": v for k, v in summaries[group]["vote_r1"].items()})
        for section in ("results", "groups"):
            if group in results.get(section, {}):
                results[section][group].update(values)


def format_summaries(summaries: dict[str, dict], artifacts_dir: str | os.PathLike | None) -> str:
    """Human-readable head summary printed after lm-eval's table ("" without head metrics)."""
    if not summaries:
        return ""
    lines = ["", "Head metrics (readout position, best / median pointer head, chance, top-5 heads):"]
    for name, s in summaries.items():
        top = ", ".join(f"{head} {r1:.3f}" for head, r1 in s["top_pointer_heads"][:5])
        writer = "" if s["writer_r1"] is None else f"  writer_r1 {s['writer_r1']:.3f}"
        lines.append(
            f"  {name:<16} {s['position']:<6} pointer_r1 {s['pointer_r1']:.3f} ({s['pointer_top_head']})  "
            f"median {s['pointer_r1_median']:.3f}  chance {s['chance_r1']:.3f}{writer}  top: {top}"
        )
        lines.extend(f"    note: {note}" for note in s["notes"])
    if artifacts_dir is not None:
        lines.append(f"Artifacts (grids, rankings, top-K lists, writer probes, plots): {artifacts_dir}")
    return "\n".join(lines)


def evaluate(
    tasks: Sequence[str],
    model_args: str | dict[str, Any] | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    output_path: str | os.PathLike | None = None,
    model: str = MODEL_NAME,
    include_path: str | os.PathLike | None = None,
    **simple_evaluate_kwargs: Any,
) -> dict | None:
    """Run ``lm_eval.simple_evaluate`` on our tasks and add the pooled head metrics and artifacts.

    Args:
        tasks: task or group names from the shipped folder (``icir_mcq``, ``icir_mcq_n5``,
            ``vhs_single_n10``, ``vhs_single``...).
        model_args: ``hf-multimodal-heads`` arguments (dict or lm-eval string); ``pretrained``
            defaults to the tiny default model, ``store`` to ``OUTPUT/<model>/activations`` when
            `output_path` is given.
        metadata: task metadata, e.g. ``{"icir_mcq_data": DIR, "vhs_data": DIR}``.
        output_path: folder for the artifacts (``OUTPUT/<model>/icir_artifacts/<task>``); None
            writes none.
        model: lm-eval model name.
        include_path: a folder of further task YAMLs (for tasks built on ours).
        **simple_evaluate_kwargs: passed to ``simple_evaluate`` (``limit``, ``batch_size``,
            ``device``, ``gen_kwargs``, ``log_samples``...).

    Returns:
        lm-eval's results dict with pooled group metrics added and ``results["icir"]`` =
        ``{"artifacts": folder or None, "summaries": {name: summary}}``; None on processes other
        than rank 0 of a data-parallel run.

    Raises:
        UserInputError: unknown task names, a missing dataset folder, an unsupported model, ...
    """
    import lm_eval

    import harness.lm_eval_plugin  # noqa: F401  (registers the model with lm-eval)
    from harness.lm_eval_plugin.analysis import clear_analyses
    from harness.tasks.utils import check_data_folders

    model_args = parse_model_args(model_args)
    if model == MODEL_NAME:
        model_args = with_defaults(model_args, output_path)
    manager = task_manager(model_args | (metadata or {}), include_path)
    names = check_task_names(tasks, manager.all_tasks)
    check_data_folders(names, model_args | (metadata or {}))
    clear_analyses()
    results = lm_eval.simple_evaluate(
        model=model, model_args=model_args, tasks=names, task_manager=manager, **simple_evaluate_kwargs
    )
    if results is None:
        return None
    artifacts_dir = None if output_path is None else run_folder(output_path, model_args) / ARTIFACTS_FOLDER
    summaries = finish_run(artifacts_dir)
    add_pooled_metrics(results, summaries)
    results["icir"] = {"artifacts": None if artifacts_dir is None else str(artifacts_dir), "summaries": summaries}
    return results
