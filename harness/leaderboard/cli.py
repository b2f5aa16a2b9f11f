"""``icir submit`` and ``icir leaderboard ACTION``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.leaderboard.bundle import submit
from harness.leaderboard.site import register_build
from harness.leaderboard.validate import load_config, validate
from harness.leaderboard.verify import register_verify
from harness.protocol import PROTOCOL
from icir_common import UserInputError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir submit``, ``icir leaderboard validate`` and ``icir leaderboard build``."""
    parser = subparsers.add_parser("submit", help="bundle a finished run as a leaderboard submission",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_folder", type=Path, metavar="RUN_FOLDER",
                        help="a run folder OUTPUT/<model> of icir eval --output_path OUTPUT")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, metavar="SUBMISSION", help="the submission folder to write")
    where.add_argument("--leaderboard", type=Path, metavar="DIR",
                       help="write it into leaderboard folder DIR, at results/<org__model>/<revision>/")
    parser.add_argument("--archive", action="store_true", help="also write SUBMISSION.tar.gz (deterministic)")
    parser.add_argument("--submitter", help="your name, shown on the leaderboard")
    parser.add_argument("--link", help="a link (paper, model card), http(s)://")
    parser.add_argument("--probes", action="store_true", help="include the writer probes (writer_probes/)")
    parser.set_defaults(func=run_submit)

    board = subparsers.add_parser("leaderboard", help="leaderboard tools: validate or verify a submission, build the site")
    actions = board.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser("validate", help="check a submission and recompute every reported number")
    check.add_argument("submission", type=Path, metavar="SUBMISSION", help="a submission folder or .tar.gz")
    check.add_argument("--config", type=Path, metavar="LEADERBOARD.json",
                       help='{"protocols": [...], "datasets": {task: [fingerprints]}} (default: '
                            f"protocol {PROTOCOL}, any fingerprint)")
    check.set_defaults(func=run_validate)
    register_build(actions)
    register_verify(actions)


def run_submit(args: argparse.Namespace) -> int:
    """``icir submit``: bundle the run, print where it went."""
    if args.link and not args.link.startswith(("http://", "https://")):
        raise UserInputError(f"--link {args.link!r} must start with http:// or https://")
    out = submit(args.run_folder, args.out or args.leaderboard, archive=args.archive, submitter=args.submitter,
                 link=args.link, probes=args.probes, leaderboard=args.leaderboard is not None)
    args.written = out  # where it went (with --leaderboard, chosen here), for options added after submit
    print(f"submission: {out}" + (f" (archive {out.with_name(out.name + '.tar.gz')})" if args.archive else ""))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """``icir leaderboard validate``: print the notes and every failure; 1 on any failure, else 0."""
    config = load_config(args.config)
    report = validate(args.submission, config)
    for note in report.notes:
        print(f"note: {note}")
    for line in report.failures:
        print(f"FAIL: {line}")
    if report.failures:
        print(f"{args.submission}: {len(report.failures)} failure(s)", file=sys.stderr)
        return 1
    print(f"{args.submission}: valid")
    return 0
