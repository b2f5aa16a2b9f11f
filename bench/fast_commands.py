"""Start-up time of the ``icir`` commands that load no model, beside ``lm_eval --help``.

Each command runs in a fresh process, as a user types it: ``python -c pass`` (the interpreter
alone), ``lm_eval --help``, ``icir --help``, ``icir report --table 1 RUN`` and ``icir leaderboard
validate SUBMISSION``. The commands alternate in every round (so drift of a shared machine hits
all), after one warm-up round; the figure is the median wall-clock time over the rounds. Without
``--run`` / ``--submission``, a small full run is made first in a temporary folder: a 300-image toy
corpus, 60 ICIR-MCQ n5 samples, ``icir eval`` of the shipped demo model on them, ``icir submit``.

Targets: ``icir --help`` no slower than ``lm_eval --help``, ``icir report`` under 1.5 s on 2 cores.

Usage: ``python bench/fast_commands.py [--run OUTPUT/MODEL] [--submission DIR] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_REPORT_SECONDS = 1.5
TOY_IMAGES, SAMPLES, TASK = 300, 60, "icir_mcq_n5"


def console_script(name: str) -> str:
    """The console script `name` of this interpreter's environment (else the one on PATH)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        raise SystemExit(f"no {name} command next to {sys.executable} or on PATH")
    return found


def make_run(work: Path) -> tuple[Path, Path]:
    """A full ``icir_mcq_n5`` run of the demo model on a small toy build, and its submission."""
    from harness.cli import main

    toy, mcq, out, submission = work / "toy", work / "mcq", work / "eval", work / "submission"
    steps = [
        ["toy-corpus", str(toy), "--images", str(TOY_IMAGES), "--vhs-sizes", ""],
        ["build-mcq", "--coco", str(toy / "coco"), "--mmniah",
         str(toy / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"), "--out", str(mcq),
         "--configs", "n5", "--samples", str(SAMPLES), "--max-passage-chars", "60"],
        ["eval", "--tasks", TASK, "--device", "cpu", "--batch_size", "1", "--output_path", str(out),
         "--metadata", json.dumps({"icir_mcq_data": str(mcq)})],
    ]
    for argv in steps:
        if main(argv) != 0:
            raise SystemExit(f"icir {argv[0]} failed")
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    if main(["submit", str(run), "--out", str(submission)]) != 0:
        raise SystemExit("icir submit failed")
    return run, submission


def seconds(command: list[str]) -> float:
    """Wall-clock seconds of one run of `command` (its output discarded; it must succeed)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def medians(commands: dict[str, list[str]], repeats: int) -> dict[str, float]:
    """Median seconds of each command over `repeats` rounds in which the commands alternate, after one
    warm-up round."""
    for command in commands.values():
        seconds(command)
    times = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            times[name].append(seconds(command))
    return {name: statistics.median(values) for name, values in times.items()}


def measure(run: Path, submission: Path, repeats: int) -> None:
    """Time the commands (module docstring) on `run` and `submission`; print the medians and ratios."""
    icir = console_script("icir")
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "lm_eval --help": [console_script("lm_eval"), "--help"],
        "icir --help": [icir, "--help"],
        "icir report --table 1 RUN": [icir, "report", "--table", "1", str(run)],
        "icir leaderboard validate SUBMISSION": [icir, "leaderboard", "validate", str(submission)],
    }
    found = medians(commands, repeats)
    print(f"median wall-clock seconds of {repeats} rounds (run {run}, submission {submission}):")
    for name, value in found.items():
        print(f"  {name:<38}{value:>7.2f}")
    help_ratio = found["icir --help"] / found["lm_eval --help"]
    report = found["icir report --table 1 RUN"]
    print(f"icir --help / lm_eval --help: x{help_ratio:.2f} ({'within' if help_ratio <= 1 else 'OVER'} the target x1)")
    print(f"icir report --table 1: {report:.2f} s ({'within' if report < TARGET_REPORT_SECONDS else 'OVER'} the "
          f"{TARGET_REPORT_SECONDS} s target; x{report / found['python -c pass']:.1f} python -c pass)")


def main(argv: list[str] | None = None) -> int:
    """Make the run unless given, then measure (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a run folder OUTPUT/<model> with icir_artifacts (default: make one)")
    parser.add_argument("--submission", type=Path, help="an icir submit folder (default: submit the run made here)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds per command (default 5)")
    args = parser.parse_args(argv)
    if (args.run is None) != (args.submission is None):
        parser.error("pass both --run and --submission, or neither (a run is then made)")
    if args.run is not None:
        measure(args.run, args.submission, args.repeats)
        return 0
    with tempfile.TemporaryDirectory(prefix="icir-fast-commands-") as work:
        run, submission = make_run(Path(work))
        measure(run, submission, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
