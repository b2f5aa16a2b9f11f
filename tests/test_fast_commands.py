"""The commands that run no model import neither torch, transformers, lm-eval nor datasets.

Each command runs in a fresh interpreter (``harness.cli.main`` under ``sys.executable -c``), which
then reports which of those libraries it imported: ``icir --help``, ``icir COMMAND --help`` of
every command and sub-command the parser has (``icir eval --help`` prints lm-eval's own flags, so
it may import lm-eval, but none of the others), and ``icir report`` / ``icir compare`` / ``icir
leaderboard validate`` / ``icir leaderboard build`` on real runs: the shared reference run
(tests/lm_eval_helpers.py), a full ``icir_mcq_n5`` run of the tiny model and its submission.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lm_eval_helpers import full_run

from harness.cli import build_parser
from harness.cli import main as icir_main
from harness.leaderboard.entries import entry_key
from harness.leaderboard.schema import MANIFEST

HEAVY_LIBRARIES = ("torch", "transformers", "lm_eval", "datasets")  # seconds to import, each
# Prints the command's exit code and the libraries of `HEAVY_LIBRARIES` it imported, as the last line of stdout.
PROBE = """
import json, sys
from harness.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exit:
    code = exit.code
sys.stdout.flush()
print("\\n" + json.dumps({"code": code, "imported": [m for m in json.loads(sys.argv[2]) if m in sys.modules]}))
"""


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and sub-command of `parser`, depth first (``("leaderboard", "validate")``)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(*prefix, name), *_commands(sub, (*prefix, name))]
    return found


def imported_heavy_libraries(argv: list[str]) -> list[str]:
    """The `HEAVY_LIBRARIES` ``icir ARGV`` imports in a fresh interpreter (the command must succeed)."""
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv), json.dumps(HEAVY_LIBRARIES)],
                            capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, f"icir {' '.join(argv)} exited {report['code']}: {result.stderr[-2000:]}"
    return report["imported"]


def test_the_walk_sees_the_sub_commands():
    commands = _commands(build_parser())
    assert {("report",), ("leaderboard", "validate"), ("leaderboard", "build"), ("demo-model", "eval")} <= set(commands)


def test_top_level_help():
    assert imported_heavy_libraries(["--help"]) == []


@pytest.mark.parametrize("command", _commands(build_parser()), ids=" ".join)
def test_command_help(command):
    imported = imported_heavy_libraries([*command, "--help"])
    allowed = {"lm_eval"} if command == ("eval",) else set()  # lm-eval's parser gives icir eval's flags
    assert set(imported) <= allowed


@pytest.fixture(scope="module")
def runs(shared, tmp_path_factory) -> dict[str, Path]:
    """The shared reference run, a full ``icir_mcq_n5`` run, its submission and a leaderboard of it."""
    root = tmp_path_factory.mktemp("fast_commands")
    full = full_run(shared, root / "runs", "icir_mcq_n5")
    submission = root / "submission"
    assert icir_main(["submit", str(full), "--out", str(submission)]) == 0
    board = root / "board"
    target = board / "results" / entry_key(json.loads((submission / MANIFEST).read_text()))
    shutil.copytree(submission, target)
    (reference,) = [p for p in (shared / "ref_mcq").iterdir() if p.is_dir()]
    return {"reference": reference, "full": full, "submission": submission, "board": board, "site": root / "site"}


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["report", "--table", "1", "{full}"],
    ["report", "--table", "3", "--json", "{full}", "{reference}"],
    ["report", "--table", "13", "{full}"],
    ["compare", "{full}", "{reference}"],
    ["leaderboard", "validate", "{submission}"],
    ["leaderboard", "build", "{board}", "--out", "{site}"],
], ids=lambda argv: " ".join(argv[:3]))
def test_commands_on_real_runs(runs, argv):
    assert imported_heavy_libraries([arg.format(**runs) for arg in argv]) == []
