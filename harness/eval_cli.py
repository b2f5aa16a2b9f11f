"""``icir eval``: lm-eval's ``run`` command for the ICIR-MCQ / VHs tasks and ``hf-multimodal-heads``.

Every argument after ``icir eval`` is an lm-eval ``run`` flag (``--tasks``, ``--model_args``,
``--limit``, ``--batch_size``, ``--device``, ``--output_path``, ``--log_samples``, ``--metadata``,
``--gen_kwargs``, ``--seed``...), parsed and validated by lm-eval's own parser and
``EvaluatorConfig``; the run is lm-eval's ``simple_evaluate`` and its results are saved by
lm-eval's ``EvaluationTracker`` and printed with its table. ``icir eval`` adds:

- ``--model`` defaults to ``hf-multimodal-heads``, ``pretrained`` to the shipped demo model;
- tasks come from the shipped task folder (plus ``--include_path``); a misspelt name is an error
  with suggestions; lm-eval's own tasks are not indexed (the model needs cattok spans);
- with ``--output_path OUT``, the run folder is ``OUT/<model name>/`` (Hub id or the model
  folder's last component): ``store`` defaults to its ``activations/`` (rerunning the same
  command resumes and recomputes nothing already stored) and artifacts go to its
  ``icir_artifacts/<task or group>/``;
- ``--overwrite`` (ours): replace artifact folders that hold another run's artifacts; without
  it such a run is refused, so one folder never mixes two runs;
- the analysis stage (`harness.analyze`): head metrics added to lm-eval's saved results and
  tables (the ``icir_mcq`` group pooled over both configs), each logged sample's per-document
  record, and a head summary naming the top heads ``LxxHyy``.

``icir analyze RUN_FOLDER`` runs the same analysis stage on a finished run, from the run folder's
own ``activations/`` (or ``--store DIR``), refused when that store's model or capture settings are
not the ones the run recorded; it writes nothing until every results file is analysed.

Datasets: ``--metadata icir_mcq_data=DIR vhs_data=DIR`` or ``ICIR_MCQ_DATA`` / ``ICIR_VHS_DATA``.
Data parallel on CPUs: ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2
-m harness.eval_cli ARGS`` (drop ``ACCELERATE_USE_CPU`` on GPUs). W&B / Trackio logging flags of
lm-eval are refused in one line, as is ``--use_cache`` (lm-eval's response cache holds no head
captures).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.constants import MODEL_NAME
from icir_common import UserInputError, read_json

if TYPE_CHECKING:
    from harness.analyze import StagedAnalysis


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir eval`` (all arguments are lm-eval ``run`` flags) and ``icir analyze``."""
    parser = subparsers.add_parser(
        "eval",
        help="evaluate an LVLM on ICIR-MCQ / Visual Haystacks with lm-eval, reporting head metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        # No prefix character: every argument, "--tasks" and "-h" included, is lm-eval's.
        prefix_chars="\x00",
    )
    parser.add_argument("lm_eval_args", nargs="*", help="lm-eval run arguments")
    parser.set_defaults(func=run)
    analysis = subparsers.add_parser(
        "analyze",
        help="compute the head metrics and artifacts of a finished run (icir eval or lm_eval with store=DIR)",
        description="Run the analysis stage on RUN_FOLDER (OUTPUT/<model>, holding lm-eval's results_*.json): "
        "read its activation store (RUN_FOLDER/activations, or --store DIR) once, write icir_artifacts/, add the "
        "head metrics to the results JSON and each document's record to its samples files, and print the tables. "
        "A store whose model identity or capture settings differ from the run's protocol record is refused. A "
        "folder holding several runs (e.g. ICIR-MCQ, then VHs) has each task analysed from the newest results "
        "file holding it; nothing is written until every one is analysed.",
    )
    analysis.add_argument("run_folder", type=Path, help="the run folder OUTPUT/<model> (or OUTPUT holding one)")
    analysis.add_argument("--store", type=Path, default=None,
                          help="the activation store the run captured into (default: RUN_FOLDER/activations)")
    analysis.add_argument("--overwrite", action="store_true", help="replace artifact folders of another run")
    analysis.set_defaults(func=analyze)


def lm_eval_config(argv: list[str]):
    """lm-eval's ``EvaluatorConfig`` for `argv` (lm-eval ``run`` flags), with our defaults filled in.

    Raises:
        UserInputError: no or unknown task names (checked before any model is touched).
    """
    from lm_eval._cli import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    from harness.evaluation import check_task_names, task_manager, with_defaults

    namespace = HarnessCLI()._parser.parse_args(["run", *argv])
    namespace.model = namespace.model or MODEL_NAME
    namespace.tasks = check_task_names(namespace.tasks or [], task_manager({}, namespace.include_path).all_tasks)
    if namespace.model == MODEL_NAME:
        namespace.model_args = with_defaults(namespace.model_args or {}, namespace.output_path)
    return EvaluatorConfig.from_cli(namespace)


def _simple_evaluate_kwargs(cfg, tracker) -> dict:
    """lm-eval ``simple_evaluate`` keyword arguments from its own CLI config (as lm-eval's ``run``)."""
    seeds = cfg.seed or [None] * 4
    return dict(
        num_fewshot=cfg.num_fewshot,
        batch_size=cfg.batch_size,
        max_batch_size=cfg.max_batch_size,
        device=cfg.device,
        use_cache=cfg.use_cache,
        cache_requests=cfg.cache_requests.get("cache_requests", False),
        rewrite_requests_cache=cfg.cache_requests.get("rewrite_requests_cache", False),
        delete_requests_cache=cfg.cache_requests.get("delete_requests_cache", False),
        limit=cfg.limit,
        samples=cfg.samples,
        check_integrity=cfg.check_integrity,
        write_out=cfg.write_out,
        log_samples=cfg.log_samples,
        evaluation_tracker=tracker,
        system_instruction=cfg.system_instruction,
        apply_chat_template=cfg.apply_chat_template,
        fewshot_as_multiturn=cfg.fewshot_as_multiturn,
        gen_kwargs=cfg.gen_kwargs,
        predict_only=cfg.predict_only,
        random_seed=seeds[0],
        numpy_random_seed=seeds[1],
        torch_random_seed=seeds[2],
        fewshot_random_seed=seeds[3],
        confirm_run_unsafe_code=cfg.confirm_run_unsafe_code,
    )


def save_and_print(results: dict, tracker, header: str) -> None:
    """Save lm-eval's results (and logged samples) with its tracker; print its tables and the head summary.

    The chat template the model class rendered every prompt with (``config["chat_template"]``) is
    recorded in the tracker's ``chat_template`` / ``chat_template_sha`` fields, which lm-eval fills
    only under ``--apply_chat_template``."""
    from lm_eval.utils import hash_string, make_table

    from harness.analyze import format_summaries

    samples = results.pop("samples", None)
    template = results.get("config", {}).pop("chat_template", None)  # the model's (get_model_info)
    if template is not None and tracker.general_config_tracker.chat_template is None:
        tracker.general_config_tracker.chat_template = template
        tracker.general_config_tracker.chat_template_sha = hash_string(template)
    tracker.save_results_aggregated(results=results, samples=samples)
    if samples is not None:
        for task_name in results["configs"]:
            tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    if tracker.push_results_to_hub or tracker.push_samples_to_hub:
        tracker.recreate_metadata_card()
    print(header)
    if "icir" in results:
        from harness.protocol import header as protocol_header

        print(protocol_header(results["icir"]["protocol"]))
    print(make_table(results))
    if "groups" in results:
        print(make_table(results, "groups"))
    if "icir" in results:
        print(format_summaries(results["icir"]["summaries"], results["icir"]["artifacts"], results["icir"].get("text_heads")))


def run(args: argparse.Namespace) -> int:
    """Run the evaluation, save lm-eval's results and the artifacts, print the tables (rank 0)."""
    argv = list(args.lm_eval_args)
    if not argv or argv[0] in ("-h", "--help"):
        from lm_eval._cli import HarnessCLI

        print(__doc__)
        HarnessCLI()._parser.parse_args(["run", "--help"])
        return 0

    from lm_eval.loggers import EvaluationTracker
    from lm_eval.utils import setup_logging

    from harness.evaluation import evaluate
    from harness.model_names import model_name

    overwrite = "--overwrite" in argv  # ours, not lm-eval's: replace another run's artifact folders
    cfg = lm_eval_config([arg for arg in argv if arg != "--overwrite"])
    loggers = [flag for flag, value in (("--wandb_args", cfg.wandb_args), ("--trackio_args", cfg.trackio_args)) if value]
    if loggers:
        raise UserInputError(f"{' and '.join(loggers)}: icir eval does not log the head metrics through lm-eval's "
                             "loggers; drop the flag (the results JSON and icir_artifacts/ hold every metric)")
    setup_logging()
    if cfg.output_path:
        cfg.hf_hub_log_args["output_path"] = cfg.output_path
    tracker = EvaluationTracker(**cfg.hf_hub_log_args)
    results = evaluate(
        cfg.tasks, cfg.model_args, metadata=cfg.metadata, output_path=cfg.output_path, model=cfg.model,
        include_path=cfg.include_path, overwrite=overwrite, **_simple_evaluate_kwargs(cfg, tracker),
    )
    if results is None:  # not rank 0
        return 0
    if cfg.model == MODEL_NAME:  # the run folder is named after the model, not its absolute path
        tracker.general_config_tracker.model_name_sanitized = model_name(cfg.model_args["pretrained"])
    save_and_print(results, tracker, f"{cfg.model} ({cfg.model_args}), gen_kwargs: ({cfg.gen_kwargs}), "
                                     f"limit: {cfg.limit}, batch_size: {cfg.batch_size}")
    return 0


def _results_files(folder: Path) -> list[Path]:
    """The lm-eval ``results_*.json`` files of a run folder (or of the one run folder inside `folder`), oldest first."""
    files = sorted(folder.glob("results_*.json")) or sorted(folder.glob("*/results_*.json"))
    if not files:
        raise UserInputError(f"{folder} holds no lm-eval results_*.json (pass the run folder OUTPUT/<model>)")
    if len({f.parent for f in files}) > 1:
        folders = sorted({str(f.parent) for f in files})
        raise UserInputError(f"{folder} holds several run folders; pass one of {folders}")
    return files


def _read_results(path: Path) -> dict:
    """lm-eval's results JSON at `path`.

    Raises:
        UserInputError: not JSON (cut or edited) or no lm-eval results JSON, naming the file.
    """
    results = read_json(path, "the results file was cut or edited: restore it, or move it out of the run folder "
                              "and rerun icir eval")
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise UserInputError(f"{path} is no lm-eval results JSON (no results section); move it out of the run folder")
    return results


def _read_samples(path: Path) -> list[dict]:
    """The logged samples of an lm-eval ``samples_*.jsonl`` file, one JSON object a line.

    Raises:
        UserInputError: a line that is not a JSON object (a cut or edited file), naming the file and line.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(f"cannot read the samples file {path} ({err}); restore it, or delete it to analyse the "
                             f"run without its samples") from None
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            samples.append(json.loads(line))
        except ValueError as err:
            raise UserInputError(f"{path} line {number} does not read as JSON ({err}): the samples file was cut or "
                                 f"edited; restore it, or delete it to analyse the run without its samples") from None
        if not isinstance(samples[-1], dict):
            raise UserInputError(f"{path} line {number} is not a logged sample (a JSON object); restore the file")
    return samples


def _run_store(run: Path, explicit: Path | None, newest: dict) -> Path:
    """The activation store `icir analyze` reads: `explicit` (``--store``), else the run folder's own
    ``activations/``; never the path a results file recorded (a moved run folder's old path may
    hold another run's store). `newest`: the newest results JSON, whose ``store=`` the message names.

    Raises:
        UserInputError: the folder is no activation store (`analyze.read_capture_settings`).
    """
    from harness.activation_store import SETTINGS_FILE
    from harness.analyze import read_capture_settings
    from harness.constants import STORE_FOLDER
    from harness.evaluation import parse_model_args

    if explicit is not None:
        read_capture_settings(explicit)
        return explicit.resolve()
    store = run / STORE_FOLDER
    if not (store / SETTINGS_FILE).exists():
        recorded = parse_model_args(newest.get("config", {}).get("model_args")).get("store")
        raise UserInputError(
            f"{run} holds no activation store {STORE_FOLDER}/ (the analysis reads the run folder's own store); pass "
            f"--store DIR naming the store the run captured into" + (f" (it recorded store={recorded})" if recorded else "")
        )
    read_capture_settings(store)
    return store.resolve()


@dataclass
class _StagedFile:
    """One results file of ``icir analyze``, analysed and checked, not yet written (`_stage_file`)."""

    path: Path
    results: dict
    tasks: set[str]
    samples: dict[Path, str]  # samples file -> its task
    analysis: StagedAnalysis
    report: str  # the tables printed once it is written


def _report(results: dict) -> str:
    """What ``icir analyze`` prints for an analysed results dict: protocol line, lm-eval's tables, head summary."""
    from lm_eval.utils import hash_string, make_table

    from harness.analyze import format_summaries
    from harness.protocol import header as protocol_header

    parts = [protocol_header(results["icir"]["protocol"]), make_table(results)]
    if "groups" in results:
        parts.append(make_table(results, "groups"))
    icir = results["icir"]
    parts.append(format_summaries(icir["summaries"], icir["artifacts"], icir.get("text_heads")))
    return "\n".join(parts)


def _stage_file(results_file: Path, results: dict, done: set[str], store: Path, overwrite: bool) -> _StagedFile | None:
    """Analyse the tasks of one results file that no newer file of the folder holds, from `store`
    (checked against the file's protocol record: `analyze.check_store`); write nothing. None when
    every task of the file is held by a newer one.

    Raises:
        UserInputError: see `_read_samples`, `analyze.check_store` and `analyze.stage_analysis`.
    """
    from harness.analyze import check_store, stage_analysis
    from harness.constants import ARTIFACTS_FOLDER
    from harness.evaluation import parse_model_args

    counts = results.get("n-samples", {})
    tasks = set(counts) - done
    if not tasks:
        return None
    results["n-samples"] = {t: n for t, n in counts.items() if t in tasks}
    date_id = results_file.stem.removeprefix("results_")
    sample_files = {path: path.stem.removeprefix("samples_").removesuffix(f"_{date_id}")
                    for path in sorted(results_file.parent.glob(f"samples_*_{date_id}.jsonl"))}
    results["samples"] = {task: _read_samples(path) for path, task in sample_files.items()}
    model_args = parse_model_args(results.get("config", {}).get("model_args"))
    model_args["store"] = str(store)
    artifacts = results_file.parent / ARTIFACTS_FOLDER
    check_store(store, results, model_args, results_file, artifacts, overwrite)
    analysis = stage_analysis(results, model_args, artifacts, overwrite)
    results["n-samples"] = counts
    return _StagedFile(results_file, results, tasks, sample_files, analysis, _report(results))


def _write_file(staged: _StagedFile) -> None:
    """Write one staged results file: its artifacts, samples files and results JSON; print its tables."""
    from harness.analyze import write_analysis
    from icir_common import atomic_file, write_json

    results = staged.results
    write_analysis(staged.analysis)
    for path, task in staged.samples.items():
        with atomic_file(path) as tmp:
            lines = (json.dumps(sample, ensure_ascii=False) + "\n" for sample in results["samples"][task])
            tmp.write_text("".join(lines))
    del results["samples"]
    write_json(staged.path, results)
    print(staged.report)
    print(f"updated {staged.path} ({', '.join(sorted(staged.tasks))})"
          + (f" and {len(staged.samples)} samples file(s)" if staged.samples else ""))


def analyze(args: argparse.Namespace) -> int:
    """``icir analyze RUN_FOLDER [--store DIR]``: the analysis stage on every run of a run folder.

    Each task is analysed from the newest results file that holds it (older files that a newer
    run of the same task superseded are left as they are), from the run folder's own store (or
    ``--store``), which must have captured each analysed run (`analyze.check_store`). Every file
    is read, checked and analysed before anything is written: a refused input leaves the run
    folder as it was.

    Raises:
        UserInputError: a results or samples file that does not read, no store, a store of another
            run, or any refusal of the analysis stage (`analyze.stage_analysis`).
    """
    files = _results_files(args.run_folder)
    loaded = [(path, _read_results(path)) for path in files]
    store = _run_store(files[0].parent, args.store, loaded[-1][1])
    done: set[str] = set()
    staged = []
    for results_file, results in reversed(loaded):
        item = _stage_file(results_file, results, done, store, args.overwrite)
        if item is not None:
            staged.append(item)
            done |= item.tasks
    for item in staged:
        _write_file(item)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.eval_cli ARGS`` = ``icir eval ARGS`` (for ``accelerate launch -m``)."""
    try:
        return run(argparse.Namespace(lm_eval_args=list(sys.argv[1:] if argv is None else argv)))
    except UserInputError as err:
        print(f"icir eval: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
