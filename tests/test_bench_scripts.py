"""The GPU-shape benchmark runs on a CPU with --small (as CI runs it) and its two ablation routes agree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_shapes_small_runs_on_cpu(monkeypatch, capsys):
    gpu_shapes = _load("gpu_shapes")
    monkeypatch.setattr(gpu_shapes, "SIDE", 64)  # 4 visual tokens per image: the smoke test stays short
    assert gpu_shapes.main(["--small", "--repeats", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "identical outcomes: True" in out and "ablation grid full" in out and "icir_mcq capture" in out
