"""``icir retrievers RUN_FOLDER [...] --retriever KIND=PATH [...] --tasks vhs_single_n10``: Table 2.

Scores external text-to-image retrievers (CLIP, SigLIP, a Qwen3-VL-Embedding-style VLM
embedder; `harness.retrievers.encoders`) inside every haystack of the runs' VHs documents and
prints them beside each run's single pointer head. Everything a user can get wrong (the
retriever folders, the runs, the tasks, the VHs folder and its fingerprint) is checked before
any retriever loads.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.retrievers.encoders import RETRIEVER_KINDS
from icir_common import UserInputError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir retrievers``."""
    parser = subparsers.add_parser(
        "retrievers", help="external retrievers (CLIP, SigLIP, VLM embedder) on the runs' VHs documents (Table 2)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_folders", nargs="+", type=Path, metavar="RUN_FOLDER",
                        help="run folders OUTPUT/<model> of icir eval with the VHs tasks (same documents)")
    parser.add_argument("--retriever", action="append", required=True, metavar="KIND=PATH",
                        help=f"KIND one of {', '.join(RETRIEVER_KINDS)}; PATH a model folder or Hub id (repeatable)")
    parser.add_argument("--tasks", default="vhs_single_n10", help="comma-separated vhs_single_n{N} tasks (default N=10)")
    parser.add_argument("--metadata", default="{}", help='task metadata: JSON ({"vhs_data": DIR}) or vhs_data=DIR')
    parser.add_argument("--output_path", type=Path, default=None,
                        help="write retrievers.json (per-document picks) and table_2.md into this folder")
    parser.add_argument("--leaderboard", type=Path, default=None, metavar="DIR",
                        help="also write one record per retriever to DIR/retrievers/ for icir leaderboard build")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when there is one, else cpu)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default 32)")
    parser.add_argument("--json", action="store_true", help="print the table's rows as JSON instead of markdown")
    parser.set_defaults(func=run_retrievers)


def run_retrievers(args: argparse.Namespace) -> int:
    """Check every input, score each retriever, write and print Table 2."""
    from harness.evaluation import parse_metadata
    from harness.protocol import model_identity
    from harness.report import find_runs
    from harness.retrievers.encoders import RetrieverSpec, load_retriever
    from harness.retrievers.run import (
        LEADERBOARD_FOLDER, RESULTS_FILE, TABLE_FILE, leaderboard_records, load_haystacks, results_record,
        retriever_label, retriever_picks, run_documents, table_2)
    from icir_common import atomic_file, write_json

    metadata = parse_metadata(args.metadata)
    if args.batch_size < 1:
        raise UserInputError(f"--batch-size must be at least 1, got {args.batch_size}")
    specs = [RetrieverSpec.parse(text) for text in args.retriever]
    labels = [retriever_label(spec) for spec in specs]
    if len(set(labels)) != len(labels):
        raise UserInputError(f"--retriever names one model twice ({', '.join(labels)})")
    model_types = [spec.check() for spec in specs]
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    runs = find_runs(args.run_folders)
    documents = run_documents(runs, tasks)
    load_haystacks(documents, metadata)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    scored = []
    for spec, model_type in zip(specs, model_types):
        retriever = load_retriever(spec, device, args.batch_size)
        identity = {**model_identity(spec.path, None, getattr(retriever.model.config, "_commit_hash", None)),
                    "model_type": model_type}
        picks = {task: retriever_picks(retriever, part.docs, f"{spec.kind} {task}") for task, part in documents.items()}
        scored.append((spec, identity, retriever.settings(), picks))
        del retriever
    record = results_record(runs, documents, scored)
    table = table_2(record)
    print(json.dumps(table.to_json(), indent=2) if args.json else table.markdown())
    if args.output_path is not None:
        write_json(args.output_path / RESULTS_FILE, record)
        with atomic_file(args.output_path / TABLE_FILE) as tmp:
            tmp.write_text(table.markdown() + "\n")
        print(f"retrievers: {args.output_path / RESULTS_FILE}, {args.output_path / TABLE_FILE}")
    if args.leaderboard is not None:
        for name, entry in leaderboard_records(record).items():
            write_json(args.leaderboard / LEADERBOARD_FOLDER / name, entry, sort_keys=True)
        print(f"leaderboard records: {args.leaderboard / LEADERBOARD_FOLDER}/")
    return 0
