"""The ``icir`` command. Each part of the package adds its own subcommands.

A subcommand module exposes ``register(subparsers)``, which adds parsers whose ``func``
default takes the parsed ``argparse.Namespace`` and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that contribute subcommands, in the order they appear in ``icir --help``.
SUBCOMMAND_MODULES = (
    "icir_mcq.cli",
    "vhs_adapter.cli",
    "harness.eval_cli",
    "harness.demo",
    "harness.demo_model.cli",
    "harness.report",
    "harness.ablation.cli",
    "harness.retrievers.cli",
    "harness.leaderboard.cli",
    "harness.hub.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="icir",
        description="Build ICIR-MCQ / Visual Haystacks folders and measure pointer and writer heads of LVLMs.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``icir`` console script; returns the process exit code.

    Errors a user can fix (``UserInputError``) print one clear line and exit with status 2
    instead of a traceback.
    """
    from icir_common import UserInputError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserInputError as err:
        print(f"icir {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
