"""`harness.evaluate`: lm-eval's ``simple_evaluate`` on our tasks and model, then the analysis stage.

lm-eval owns the loop (docs/design.md): this module registers the ``hf-multimodal-heads`` model
and the task folder (`harness.lm_eval_plugin.TASKS_DIR`), checks task names and dataset folders
before any model loads, chooses where the activation store and the artifacts go, and after the
run calls the analysis stage (`harness.analyze.analyze_results`), which adds the head metrics to
lm-eval's results and writes the artifacts.

A run's files land in ``OUTPUT/<model name>/`` (`run_folder`): lm-eval's ``results_*.json`` (and
``samples_*.jsonl``), ``activations/`` (the store) and ``icir_artifacts/<task or group>/``.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.constants import ARTIFACTS_FOLDER, MODEL_NAME, STORE_FOLDER
from harness.model_names import model_name
from icir_common import UserInputError

PATH_ARGS = ("store", "heads_ranking", "writer_probes", "writer_config")


def parse_model_args(model_args: str | dict[str, Any] | None) -> dict[str, Any]:
    """Model arguments as a dict (lm-eval's ``key=value,key2=value2`` strings are parsed its way)."""
    from lm_eval.utils import simple_parse_args_string

    if model_args is None:
        return {}
    if isinstance(model_args, str):
        return simple_parse_args_string(model_args)
    return dict(model_args)


def parse_metadata(text: str) -> dict[str, Any]:
    """Task metadata given on a command line: a JSON object (``'{"vhs_data": "DIR"}'``, as lm-eval's
    ``--metadata`` takes it) or ``key=value,key2=value2`` (lm-eval's model-argument form).

    Raises:
        UserInputError: neither form, naming what was given.
    """
    import json

    from lm_eval.utils import simple_parse_args_string

    text = text.strip()
    try:
        value = json.loads(text) if text.startswith("{") else simple_parse_args_string(text)
    except (json.JSONDecodeError, ValueError) as err:
        raise UserInputError(f"--metadata {text!r} is neither a JSON object nor key=value pairs ({err})") from None
    if not isinstance(value, dict):
        raise UserInputError(f"--metadata {text!r} is not a JSON object")
    return value


def run_folder(output_path: str | os.PathLike, model_args: dict[str, Any]) -> Path:
    """``OUTPUT/<model name>``: where this model's results, store and artifacts go."""
    from harness.demo_model import default_model_path

    return Path(output_path) / model_name(model_args.get("pretrained") or default_model_path())


def with_defaults(model_args: dict[str, Any], output_path: str | os.PathLike | None) -> dict[str, Any]:
    """`model_args` with the default model filled in, given an output path the store in the run
    folder, and the file arguments (`PATH_ARGS`) made absolute."""
    from harness.demo_model import default_model_path

    model_args = dict(model_args)
    model_args.setdefault("pretrained", str(default_model_path()))
    if output_path is not None:
        model_args.setdefault("store", str(run_folder(output_path, model_args) / STORE_FOLDER))
    # The results record these paths: absolute, so `icir analyze` works from any working folder.
    for key in PATH_ARGS:
        if model_args.get(key):
            model_args[key] = str(Path(model_args[key]).expanduser().resolve())
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



def task_requests(tasks: Sequence[str], metadata: Mapping[str, Any], limit: int | None = None, rank: int = 0,
                  world_size: int = 1) -> dict[str, list]:
    """``{task: [lm-eval Instance, ...]}`` in doc order: each task's requests as lm-eval builds
    them for ``icir eval`` (same records, prompts and image inputs), without loading a model.

    Args:
        tasks: task names (comma-separated entries split).
        metadata: lm-eval ``--metadata`` (``vhs_data``, ``icir_mcq_data``, ``coco_root``).
        limit: the first `limit` documents of each task, as lm-eval's ``--limit``.
        rank, world_size: lm-eval's document sharding across processes.

    Raises:
        UserInputError: an unknown task, a missing dataset folder (`check_data_folders`), or a
            config the folder was not built with.
    """
    from harness.tasks.utils import check_data_folders

    manager = task_manager(dict(metadata))
    names = check_task_names(tasks, manager.all_tasks)
    check_data_folders(names, dict(metadata))
    try:
        task_dict = manager.load(list(names))["tasks"]
    except (FileNotFoundError, ValueError) as err:
        raise UserInputError(f"cannot load {', '.join(names)}: {err} (was haystack size N built in the VHs folder?)")
    requests = {}
    for name in names:
        task = task_dict[name]
        task.build_all_requests(limit=limit, rank=rank, world_size=world_size)
        requests[name] = sorted(task.instances, key=lambda i: i.doc_id)
    return requests


# Keyword arguments of transformers' from_pretrained that HFLM passes on (beyond its own parameters).
FROM_PRETRAINED_ARGS = ("device_map", "low_cpu_mem_usage", "quantization_config", "use_safetensors",
                        "local_files_only", "cache_dir", "token")


def known_model_args() -> set[str]:
    """Every argument ``hf-multimodal-heads`` takes: its own, ``hf-multimodal``'s and ``hf``'s, and
    the ``from_pretrained`` keywords of `FROM_PRETRAINED_ARGS` (``writer_*`` are checked on their own)."""
    import inspect

    from lm_eval.models.hf_vlms import HFMultimodalLM
    from lm_eval.models.huggingface import HFLM

    from harness.lm_eval_plugin.model import HFMultimodalHeadsLM

    names = set(FROM_PRETRAINED_ARGS)
    for cls in (HFMultimodalHeadsLM, HFMultimodalLM, HFLM):
        parameters = inspect.signature(cls.__init__).parameters.values()
        names |= {p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD}
    return names - {"self"}


def check_arguments(model_args: dict[str, Any], output_path, limit) -> None:
    """Check, before any model loads, what can be checked without it: argument names, ``--limit``,
    ``image_budget``, ``--output_path``, ``dtype``, ``attn_implementation`` and the ``store`` folder
    (`harness.lm_eval_plugin.model.check_load_arguments`), the writer settings, and the ranking and
    probe files against the model's config (its L x H).

    Raises:
        UserInputError: the first problem found, naming the argument or file.
    """
    from harness.lm_eval_plugin.model import check_architecture, check_load_arguments, image_side
    from harness.lm_eval_plugin.rankings_io import load_head_ranking, load_writer_probes
    from harness.metrics.writer import WriterProbeConfig

    known = known_model_args()
    for name in model_args:
        if name not in known and not name.startswith("writer_"):
            close = difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise UserInputError(f"unknown model argument {name!r} for {MODEL_NAME}{hint}")
    if limit is not None and not float(limit) > 0:
        raise UserInputError(f"--limit must be a positive number of documents (or a fraction in (0, 1)), got {limit}")
    if output_path is not None and Path(output_path).exists() and not Path(output_path).is_dir():
        raise UserInputError(f"--output_path {output_path} is a file; give a folder")
    side, _ = image_side(model_args.get("image_budget"), str(model_args["pretrained"]))
    if side is not None and side <= 0:
        raise UserInputError(f"image_budget must be a positive side in pixels, got {side}")
    check_load_arguments(model_args)
    WriterProbeConfig.from_arguments(model_args)
    _, shape = check_architecture(str(model_args["pretrained"]), model_args.get("revision"),
                                  bool(model_args.get("trust_remote_code", False)),
                                  str(model_args.get("untested_architecture", False)).lower() in ("true", "1"))
    if model_args.get("heads_ranking"):
        load_head_ranking(model_args["heads_ranking"], *shape)
    if model_args.get("writer_probes"):
        load_writer_probes(model_args["writer_probes"], *shape)


def evaluate(
    tasks: Sequence[str],
    model_args: str | dict[str, Any] | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    output_path: str | os.PathLike | None = None,
    model: str = MODEL_NAME,
    include_path: str | os.PathLike | None = None,
    overwrite: bool = False,
    analyze: bool = True,
    **simple_evaluate_kwargs: Any,
) -> dict | None:
    """Run ``lm_eval.simple_evaluate`` on our tasks, then the analysis stage on its results.

    Args:
        tasks: task or group names from the shipped folder (``icir_mcq``, ``icir_mcq_n5``,
            ``vhs_single_n10``, ``vhs_single``...).
        model_args: ``hf-multimodal-heads`` arguments (dict or lm-eval string); ``pretrained``
            defaults to the shipped demo model, ``store`` to ``OUTPUT/<model>/activations`` when
            `output_path` is given (else a temporary folder removed after the analysis).
        metadata: task metadata, e.g. ``{"icir_mcq_data": DIR, "vhs_data": DIR}``.
        output_path: folder of the run folders (``OUTPUT/<model>/icir_artifacts/<task>``); None
            writes no artifacts.
        model: lm-eval model name.
        include_path: a folder of further task YAMLs (for tasks built on ours).
        overwrite: replace artifact folders that hold another run's artifacts (else refused).
        analyze: run the analysis stage (False: lm-eval's results only; the store keeps the
            captures, as ``icir leaderboard verify`` reads them for a sample of documents).
        **simple_evaluate_kwargs: passed to ``simple_evaluate`` (``limit``, ``batch_size``,
            ``device``, ``gen_kwargs``, ``log_samples``...).

    Returns:
        lm-eval's results dict with the head metrics added (`analyze.analyze_results`) and
        ``results["icir"]`` = ``{"artifacts": folder or None, "summaries": {name: summary}}``;
        None on processes other than rank 0 of a data-parallel run.

    Raises:
        UserInputError: unknown task names, a missing dataset folder, an unsupported model,
            ``use_cache`` (lm-eval's response cache has no head captures), ...
    """
    import lm_eval

    import harness.lm_eval_plugin.model  # noqa: F401  (registers the model with lm-eval)
    from harness.analyze import analyze_results
    from harness.tasks.utils import check_data_folders

    if simple_evaluate_kwargs.get("use_cache"):
        raise UserInputError("--use_cache answers documents from lm-eval's response cache, which holds no head "
                             "captures, so the head metrics would be missing: drop it (a run with the same "
                             "store=DIR or --output_path resumes from its activation store instead)")
    model_args = parse_model_args(model_args)
    temporary = None
    if model == MODEL_NAME:
        model_args = with_defaults(model_args, output_path)
        if "store" not in model_args:
            if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                raise UserInputError(
                    f"data-parallel runs of {MODEL_NAME} need a store folder every process sees: "
                    "pass output_path (or --output_path) or model_args store=DIR"
                )
            temporary = model_args["store"] = tempfile.mkdtemp(prefix="icir-store-")
    manager = task_manager(model_args | (metadata or {}), include_path)
    names = check_task_names(tasks, manager.all_tasks)
    check_data_folders(names, model_args | (metadata or {}))
    if model == MODEL_NAME:
        check_arguments(model_args, output_path, simple_evaluate_kwargs.get("limit"))
    try:
        results = lm_eval.simple_evaluate(
            model=model, model_args=model_args, tasks=names, task_manager=manager, **simple_evaluate_kwargs
        )
        if results is None or model != MODEL_NAME or not analyze:
            return results
        artifacts_dir = None if output_path is None else run_folder(output_path, model_args) / ARTIFACTS_FOLDER
        analyze_results(results, model_args, artifacts_dir, overwrite)
        return results
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
