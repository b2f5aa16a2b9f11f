"""Two data-parallel CPU processes, and a run killed mid-way then resumed, give the reference numbers.

The reference is the one-process ``icir eval`` of ``icir_mcq_n5`` (19 documents, so the two
processes get 10 and 9 documents and lm-eval pads the second) in tests/lm_eval_helpers.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lm_eval_helpers import LIMIT, VHS_DOCS, icir_args, results_of, vhs_args
from safetensors import safe_open

from harness.cli import main as icir_main

pytestmark = pytest.mark.slow


def _metrics(out: Path) -> dict:
    return results_of(out)["results"]["icir_mcq_n5"]


def _stored_docs(store: Path, task: str = "icir_mcq_n5") -> dict[str, list[int]]:
    """Doc ids per shard file name."""
    stored = {}
    for shard in sorted((store / "shards" / task).glob("r*.safetensors")):
        with safe_open(shard, framework="pt") as handle:
            stored[shard.name] = sorted(int(k) for k in json.loads(handle.metadata()["records"]))
    return stored


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_cpu_processes_match_one(shared, tmp_path):
    out = tmp_path / "dp"
    launcher = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(_free_port()), "-m", "harness.eval_cli",
    ]
    done = subprocess.run(launcher + icir_args(shared, out)[1:], env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _metrics(out) == _metrics(shared / "ref_mcq")
    (store,) = out.glob("*/activations")
    stored = _stored_docs(store)
    by_rank = {rank: sorted(d for name, ids in stored.items() if name.startswith(rank) for d in ids)
               for rank in ("r000", "r001")}
    assert by_rank == {"r000": list(range(0, LIMIT, 2)), "r001": list(range(1, LIMIT, 2))}


def _kill_after_two_shards(args: list[str], out: Path, task: str) -> dict[str, list[int]]:
    """Start ``icir eval ARGS``, kill -9 it once two shards of `task` are written; the shards then."""
    killed = subprocess.Popen([sys.executable, "-m", "harness.eval_cli", *args[1:]], env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and killed.poll() is None:
            stores = list(out.glob("*/activations"))
            if stores and len(_stored_docs(stores[0], task)) >= 2:
                break
            time.sleep(0.05)
    finally:
        killed.kill()
        killed.wait()
    assert not list(out.glob("*/results_*.json"))
    (store,) = out.glob("*/activations")
    return _stored_docs(store, task)


@pytest.mark.parametrize("task", ["icir_mcq_n5", "vhs_single_n5"])
def test_killed_run_resumes_to_the_same_numbers(shared, tmp_path, task):
    """Killed mid-way and rerun: nothing recomputed, the rest captured, the reference numbers; a third
    run on the same store captures nothing (``make demo`` twice)."""
    out = tmp_path / "resume"
    make_args, reference, n_docs = {
        "icir_mcq_n5": (icir_args, "ref_mcq", LIMIT), "vhs_single_n5": (vhs_args, "ref_vhs", VHS_DOCS)
    }[task]
    args = make_args(shared, out, model_args="store_flush=2")
    before = _kill_after_two_shards(args, out, task)
    first = sorted(d for ids in before.values() for d in ids)
    assert 0 < len(first) < n_docs, "the run was not stopped mid-way"

    assert icir_main(args) == 0
    (store,) = out.glob("*/activations")
    after = _stored_docs(store, task)
    assert {name: after[name] for name in before} == before  # nothing recomputed or rewritten
    resumed = sorted(d for name, ids in after.items() if name not in before for d in ids)
    assert resumed == sorted(set(range(n_docs)) - set(first))
    expected = results_of(shared / reference)["results"][task]
    assert results_of(out)["results"][task] == expected

    assert icir_main(args) == 0
    assert _stored_docs(store, task) == after
    assert results_of(out)["results"][task] == expected
