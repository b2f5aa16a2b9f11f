"""Reading submitted files without trusting them: the failure report, JSON and safetensors loaders."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from harness.leaderboard.schema import TOLERANCE


def _bad_numbers(value: Any, where: str) -> Iterator[str]:
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{where}: {value} (NaN or inf)"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _bad_numbers(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _bad_numbers(item, f"{where}[{index}]")


def close_enough(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=TOLERANCE, abs_tol=TOLERANCE)


class Report:
    """What `validate` found: one line per failure (the submission is refused on any) and notes."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.notes: list[str] = []

    def fail(self, line: str) -> None:
        """Record one failure line."""
        self.failures.append(line)

    def compare(self, where: str, reported: Any, recomputed: Any) -> None:
        """Fail when a reported value differs from its recomputation (relative and absolute `TOLERANCE`)."""
        if not close_enough(reported, recomputed):
            self.fail(f"{where}: reported {reported}, recomputed from the per-document records {recomputed}")


def load_json(root: Path, relative: str, listed: set[str], report: Report) -> Any:
    if relative not in listed:
        report.fail(f"{relative}: missing")
        return None
    try:
        value = json.loads((root / relative).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        report.fail(f"{relative}: not JSON ({err})")
        return None
    for line in _bad_numbers(value, relative):
        report.fail(line)
    return value


def load_tensors(root: Path, relative: str, report: Report) -> dict[str, np.ndarray] | None:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(str(root / relative))
    except (SafetensorError, OSError, ValueError, TypeError) as err:
        report.fail(f"{relative}: not a readable safetensors file ({err})")
        return None
    for name, array in tensors.items():
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            report.fail(f"{relative}: tensor {name!r} holds {int((~np.isfinite(array)).sum())} NaN or inf values")
    return tensors
