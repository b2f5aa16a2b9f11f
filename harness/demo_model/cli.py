"""``icir demo-model train --out DIR [--seed S]`` and ``icir demo-model eval [--model DIR]``."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def _train(args: argparse.Namespace) -> int:
    # Imported here: `icir --help` should not pay for torch and transformers.
    from harness.demo_model.checkpoint import train_and_save

    summary = train_and_save(args.out, seed=args.seed, overwrite=args.overwrite)
    print(json.dumps(summary["evaluation"], indent=2))
    print(f"demo model written to {args.out} ({summary['seconds']['total']} s)")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from harness.demo_model import default_model_path
    from harness.demo_model.checkpoint import load_demo_model
    from harness.demo_model.measure import evaluate_demo, evaluation_draw

    model, processor = load_demo_model(args.model or default_model_path())
    with tempfile.TemporaryDirectory(prefix="demo-model-eval-") as work:
        draw = evaluation_draw(Path(work) / "toy", mcq_samples=args.samples, vhs_questions=args.samples,
                               seed=args.seed)
        print(json.dumps(evaluate_demo(model, processor, draw).summary(), indent=2))
    if args.out is None:
        return 0
    from harness.demo_model.pipeline import demo_grid

    print(f"\nThe ablation grid of the model on the demo's data, through icir eval and icir ablate ({args.out}):")
    return demo_grid(args.out, args.model or default_model_path())


def register(subparsers) -> None:
    """Add ``demo-model`` (``train``, ``eval``) to the ``icir`` command."""
    parser = subparsers.add_parser("demo-model", help="train or evaluate the known-answer demo LVLM")
    commands = parser.add_subparsers(dest="demo_model_command", required=True, metavar="ACTION")

    train = commands.add_parser("train", help="train the demo model on the toy world (CPU, minutes)")
    train.add_argument("--out", type=Path, required=True, help="checkpoint folder to write")
    train.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    train.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    train.set_defaults(func=_train)

    evaluate = commands.add_parser("eval", help="known-answer figures of a demo model on a fresh toy draw")
    evaluate.add_argument("--model", type=Path, help="checkpoint folder written by `demo-model train` "
                                                     "(default: the shipped demo model)")
    evaluate.add_argument("--samples", type=int, default=200, help="ICIR-MCQ samples and VHs questions (default 200)")
    evaluate.add_argument("--seed", type=int, default=20_260,
                          help="toy world seed of the evaluation draw (default 20260, the one `train` reports)")
    evaluate.add_argument("--out", type=Path, default=None,
                          help="also build the demo's data here, run icir eval and a small icir ablate grid on it, "
                               "and print Table 14 and the dose-response path")
    evaluate.set_defaults(func=_evaluate)
