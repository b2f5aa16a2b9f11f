"""``icir eval``: lm-eval's ``run`` command for the ICIR-MCQ / VHs tasks and ``hf-multimodal-heads``.

Every argument after ``icir eval`` is an lm-eval ``run`` flag (``--tasks``, ``--model_args``,
``--limit``, ``--batch_size``, ``--device``, ``--output_path``, ``--log_samples``, ``--metadata``,
``--gen_kwargs``, ``--seed``...), parsed and validated by lm-eval's own parser and
``EvaluatorConfig``; the run is lm-eval's ``simple_evaluate`` and its results are saved by
lm-eval's ``EvaluationTracker`` and printed with its table. ``icir eval`` adds:

- ``--model`` defaults to ``hf-multimodal-heads``, ``pretrained`` to the default tiny model;
- tasks come from the shipped task folder (plus ``--include_path``); a misspelt name is an error
  with suggestions; lm-eval's own tasks are not indexed (the model needs cattok spans);
- with ``--output_path OUT``, ``store`` defaults to ``OUT/<model>/activations`` (rerunning the
  same command resumes) and artifacts go to ``OUT/<model>/icir_artifacts/<task>/``;
- the pooled ``icir_mcq`` head metrics (added to the saved results and the group table) and a
  head summary naming the top heads ``LxxHyy``.

Datasets: ``--metadata icir_mcq_data=DIR vhs_data=DIR`` or ``ICIR_MCQ_DATA`` / ``ICIR_VHS_DATA``.
Data parallel on CPUs: ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2
-m harness.eval_cli ARGS`` (drop ``ACCELERATE_USE_CPU`` on GPUs). W&B / Trackio logging flags of
lm-eval are not supported here.
"""

from __future__ import annotations

import argparse
import sys

from icir_mcq.errors import UserInputError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir eval`` (all arguments are lm-eval ``run`` flags)."""
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


def lm_eval_config(argv: list[str]):
    """lm-eval's ``EvaluatorConfig`` for `argv` (lm-eval ``run`` flags), with our defaults filled in.

    Raises:
        UserInputError: no or unknown task names (checked before any model is touched).
    """
    from lm_eval._cli import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    from harness.evaluate import MODEL_NAME, check_task_names, task_manager, with_defaults

    namespace = HarnessCLI()._parser.parse_args(["run", *argv])
    namespace.model = namespace.model or MODEL_NAME
    namespace.tasks = check_task_names(namespace.tasks or [], task_manager({}, namespace.include_path).all_tasks)
    if namespace.model == MODEL_NAME:
        namespace.model_args = with_defaults(namespace.model_args or {}, namespace.output_path)
    return EvaluatorConfig.from_cli(namespace)


def run(args: argparse.Namespace) -> int:
    """Run the evaluation, save lm-eval's results and the artifacts, print the tables (rank 0)."""
    argv = list(args.lm_eval_args)
    if not argv or argv[0] in ("-h", "--help"):
        from lm_eval._cli import HarnessCLI

        print(__doc__)
        HarnessCLI()._parser.parse_args(["run", "--help"])
        return 0

    from lm_eval.loggers import EvaluationTracker
    from lm_eval.utils import make_table, setup_logging

    from harness.evaluate import evaluate, format_summaries

    cfg = lm_eval_config(argv)
    setup_logging()
    if cfg.output_path:
        cfg.hf_hub_log_args["output_path"] = cfg.output_path
    tracker = EvaluationTracker(**cfg.hf_hub_log_args)
    results = evaluate(
        cfg.tasks,
        cfg.model_args,
        metadata=cfg.metadata,
        output_path=cfg.output_path,
        model=cfg.model,
        include_path=cfg.include_path,
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
        random_seed=cfg.seed[0] if cfg.seed else None,
        numpy_random_seed=cfg.seed[1] if cfg.seed else None,
        torch_random_seed=cfg.seed[2] if cfg.seed else None,
        fewshot_random_seed=cfg.seed[3] if cfg.seed else None,
        confirm_run_unsafe_code=cfg.confirm_run_unsafe_code,
    )
    if results is None:  # not rank 0
        return 0
    samples = results.pop("samples") if cfg.log_samples else None
    tracker.save_results_aggregated(results=results, samples=samples)
    if samples is not None:
        for task_name in results["configs"]:
            tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    if tracker.push_results_to_hub or tracker.push_samples_to_hub:
        tracker.recreate_metadata_card()
    print(f"{cfg.model} ({cfg.model_args}), gen_kwargs: ({cfg.gen_kwargs}), limit: {cfg.limit}, "
          f"batch_size: {cfg.batch_size}")
    print(make_table(results))
    if "groups" in results:
        print(make_table(results, "groups"))
    print(format_summaries(results["icir"]["summaries"], results["icir"]["artifacts"]))
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
