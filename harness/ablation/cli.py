"""``icir ablate``: the set-partition ablation grid on VHs (paper §6, App. I).

Model arguments as for ``icir eval``; ``--rankings`` is an ICIR-MCQ run's
``icir_artifacts/icir_mcq`` folder (its pointer and writer rankings). Results go to
``OUTPUT/<model>/ablation/`` (`harness.ablation.results`); Table 14 and the dose-response path
are printed at the end. A killed run resumes where it stopped when rerun with the same arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.ablation.arms import DEFAULT_KS, DEFAULT_SEEDS, DEFAULT_TOP
from harness.ablation.run import ABLATION_FOLDER
from icir_common import UserInputError

ABLATION_PROTOCOL = {"intervention": "zero each ablated head's slice of the o_proj input from the first anchor "
                                     "token to the last prefill position (§6.1)",
                     "answer": "greedy, first answer token from the last prefill position (App. A)"}


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserInputError(f"{option} takes comma-separated integers, got {text!r}") from None
    if not values:
        raise UserInputError(f"{option} is empty")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir ablate``."""
    parser = subparsers.add_parser("ablate", help="the set-partition head-ablation grid on VHs (§6)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rankings", type=Path, required=True, metavar="DIR",
                        help="an ICIR-MCQ run's icir_artifacts/icir_mcq folder (pointer_ranking.json, "
                             "writer_ranking.json)")
    parser.add_argument("--tasks", required=True, help="comma-separated vhs_single_n{N} tasks")
    parser.add_argument("--model_args", default="", help="as for icir eval (pretrained=..., image_budget=...)")
    parser.add_argument("--metadata", default="{}", help='task metadata: JSON ({"vhs_data": DIR}) or vhs_data=DIR')
    parser.add_argument("--output_path", type=Path, required=True, help="results go to OUTPUT/<model>/ablation/")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when there is one, else cpu)")
    parser.add_argument("--ks", default=",".join(map(str, DEFAULT_KS)), help="head budgets K (default 5..30)")
    parser.add_argument("--random-seeds", default=",".join(map(str, DEFAULT_SEEDS)), help="random-control seeds")
    parser.add_argument("--top", type=int, default=DEFAULT_TOP, help="size of the top-K sets partitioned (100)")
    parser.add_argument("--limit", type=int, default=None, help="documents per task (default: all)")
    parser.add_argument("--through-generation", action="store_true",
                        help="keep zeroing the heads at every generated token (App. I.1)")
    parser.add_argument("--compare", type=Path, metavar="PREFILL_RUN",
                        help="with --through-generation: the prefill-only run folder (OUTPUT/<model>) of the same "
                             "grid; writes Table 12 (App. I.1)")
    parser.add_argument("--full-forwards", action="store_true",
                        help="one full forward per cell instead of sharing each document's prefix")
    parser.add_argument("--cell-batch", type=int, default=None,
                        help="cells per suffix forward (default 12, or 8 where each cell needs its own copy "
                             "of the prefix cache)")
    parser.set_defaults(func=run_ablate)


def run_ablate(args: argparse.Namespace) -> int:
    """``icir ablate``: run or resume the grid, write the results, print Table 14."""
    from harness.ablation.results import write_results
    from harness.ablation.run import AblationSpec, run_grid
    from harness.evaluation import parse_metadata, parse_model_args
    from harness.model_names import model_name
    from harness.protocol import PROTOCOL, dataset_fingerprint, versions

    metadata = parse_metadata(args.metadata)
    import torch

    model_args = parse_model_args(args.model_args)
    model_args["device"] = args.device or model_args.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.compare is not None and not args.through_generation:
        raise UserInputError("--compare compares a --through-generation run with a prefill-only one; "
                             "add --through-generation")
    if args.compare is not None and not (args.compare / ABLATION_FOLDER / "outcomes").is_dir():
        raise UserInputError(f"{args.compare} holds no {ABLATION_FOLDER}/outcomes/; pass the run folder "
                             "OUTPUT/<model> of the prefill-only icir ablate")
    if args.limit is not None and args.limit < 1:
        raise UserInputError(f"--limit must be at least 1, got {args.limit}")
    from harness.demo_model import default_model_path

    pretrained = model_args["pretrained"] = str(model_args.get("pretrained") or default_model_path())
    spec = AblationSpec(
        tasks=[t.strip() for t in args.tasks.split(",") if t.strip()], rankings=args.rankings,
        output=args.output_path / model_name(pretrained), model_args=model_args, metadata=metadata,
        ks=_ints(args.ks, "--ks"), seeds=_ints(args.random_seeds, "--random-seeds"), top=args.top, limit=args.limit,
        through_generation=args.through_generation, share_prefix=not args.full_forwards, cell_batch=args.cell_batch,
    )
    grid, logs, settings = run_grid(spec)
    from harness.ablation.run import rank_and_world

    if rank_and_world()[0] != 0:  # the first process writes the results of all
        return 0
    deviations = [f"--{name} {value}" for name, value, default in (
        ("ks", list(spec.ks), list(DEFAULT_KS)), ("random-seeds", list(spec.seeds), list(DEFAULT_SEEDS)),
        ("top", spec.top, DEFAULT_TOP), ("limit", spec.limit, None)) if value != default]
    if spec.through_generation:
        deviations.append("--through-generation (App. I.1 variant; the protocol ablates the prefill only)")
    protocol = {
        "protocol": PROTOCOL, "on_protocol": not deviations, "deviations": deviations,
        "ablation": {**ABLATION_PROTOCOL, "ks": list(spec.ks), "seeds": list(spec.seeds), "top": spec.top,
                     "through_generation": spec.through_generation, "rankings": settings["rankings"]},
        "model": settings["capture"], "versions": versions(),
        "datasets": {task: {"documents": len(log.done),
                            "fingerprint": dataset_fingerprint([log.done[d]["fingerprint"] for d in sorted(log.done)])}
                     for task, log in logs.items()},
    }
    from harness.ablation.results import table14

    stats = write_results(spec.folder, grid, logs, protocol)
    print(f"\nprotocol {PROTOCOL}" + (" (on protocol)" if not deviations else f"; OFF-PROTOCOL: {'; '.join(deviations)}"))
    for note in grid.notes:
        print(f"note: {note}")
    print("\nTable 14 (accuracy minus the random-control mean):\n")
    print(table14(stats))
    if args.compare is not None:
        from harness.ablation.results import table12
        from harness.ablation.run import OutcomeLog
        from icir_common import atomic_file

        prefill = {task: OutcomeLog(args.compare / ABLATION_FOLDER / "outcomes" / f"{task}.jsonl", read_only=True)
                   for task in logs}
        text = table12(grid, logs, prefill)
        with atomic_file(spec.folder / "table12.md") as tmp:
            tmp.write_text(text)
        print("Table 12 (zeroing through generation against the prefill only):\n")
        print(text)
    print(f"dose-response: {spec.folder / 'dose_response.png'}")
    print(f"cells and per-sample outcomes: {spec.folder / 'cells.parquet'}, {spec.folder / 'outcomes.parquet'}")
    return 0


if __name__ == "__main__":  # ``accelerate launch -m harness.ablation.cli ARGS``: one process per rank
    from harness.cli import main

    sys.exit(main(["ablate", *sys.argv[1:]]))
