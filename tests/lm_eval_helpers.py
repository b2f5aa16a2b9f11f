"""Shared material of the lm-eval plugin tests: one toy world, one tiny model, reference runs.

Built once per test session even with pytest-xdist (a file lock guards a folder shared by the
workers): a tiny random Qwen3-VL, an ICIR-MCQ folder and a VHs folder from the toy corpus, and
the same ICIR-MCQ folder with image paths only (``--no-embed-images``), and
two reference `icir eval` runs (ICIR-MCQ n5, then VHs n5 using the ICIR-MCQ run's pointer ranking
and writer probes, as in §4.3 / App. H).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from filelock import FileLock

from harness.cli import main as icir_main

LIMIT = 19  # odd: a 2-process run pads one rank
IMAGE_BUDGET = 64
VHS_DOCS = 8
MAX_GEN_TOKS = 4


def shared_root(tmp_path_factory) -> Path:
    """The folder every xdist worker of this session sees, and no other session: under xdist each
    worker's base temp sits inside the session's, else the base temp is the session's own (a folder
    shared across sessions would serve runs made by an older version of the package)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "lm_eval_shared"


def eval_args(root: Path, *extra: str, model_args: str = "") -> list[str]:
    """``icir eval`` arguments common to the tests (tiny model, CPU, small image budget)."""
    args = f"pretrained={root / 'model'},image_budget={IMAGE_BUDGET}" + (f",{model_args}" if model_args else "")
    return [
        "eval", "--device", "cpu", "--batch_size", "1", "--model_args", args,
        "--metadata", json.dumps({"icir_mcq_data": str(root / "mcq"), "vhs_data": str(root / "vhs")}),
        "--gen_kwargs", f"max_gen_toks={MAX_GEN_TOKS}", *extra,
    ]


def icir_args(root: Path, out: Path, *extra: str, model_args: str = "") -> list[str]:
    """``icir eval`` of ``icir_mcq_n5`` (first `LIMIT` documents) into ``out``."""
    return eval_args(root, "--tasks", "icir_mcq_n5", "--limit", str(LIMIT), "--output_path", str(out), *extra,
                     model_args=model_args)


def vhs_args(root: Path, out: Path, *extra: str, model_args: str = "") -> list[str]:
    """``icir eval`` of ``vhs_single_n5`` into ``out``, voting with the ICIR-MCQ reference run's ranking and probes."""
    probes = artifacts_of(root / "ref_mcq") / "icir_mcq_n5"
    transfer = f"heads_ranking={probes / 'pointer_ranking.json'},writer_probes={probes / 'writer_probes'}"
    return eval_args(root, "--tasks", "vhs_single_n5", "--output_path", str(out), *extra,
                     model_args=transfer + (f",{model_args}" if model_args else ""))


def full_run(root: Path, out: Path, tasks: str = "icir_mcq_n5", *extra: str, model: Path | None = None) -> Path:
    """``icir eval`` of every document of `tasks` on the tiny model (or `model`) into `out`; its run folder."""
    metadata = {"icir_mcq_data": str(root / "mcq"), "vhs_data": str(root / "vhs")}
    assert icir_main([
        "eval", "--device", "cpu", "--batch_size", "1",
        "--model_args", f"pretrained={model or root / 'model'},image_budget={IMAGE_BUDGET}",
        "--metadata", json.dumps(metadata), "--tasks", tasks, "--output_path", str(out), *extra,
    ]) == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


def rehash(folder: Path) -> None:
    """Update a submission manifest's sha256 and size of every listed file (as a careful tamperer would)."""
    from harness.activation_store import file_sha256
    from harness.leaderboard.bundle import write_manifest
    from harness.leaderboard.schema import MANIFEST

    manifest = json.loads((folder / MANIFEST).read_text())
    for entry in manifest["files"]:
        path = folder / entry["path"]
        entry["sha256"], entry["size"] = file_sha256(path), path.stat().st_size
    write_manifest(folder, manifest)


def results_of(out: Path) -> dict:
    """The newest lm-eval results JSON under ``out``."""
    files = sorted(out.glob("*/results_*.json"))
    assert files, f"no results file under {out}"
    return json.loads(files[-1].read_text())


def artifacts_of(out: Path) -> Path:
    """The ``icir_artifacts`` folder under ``out``."""
    (folder,) = out.glob("*/icir_artifacts")
    return folder


def build_shared(root: Path) -> Path:
    """Build (once, under a lock) the model, both dataset folders and the two reference runs."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with FileLock(str(root) + ".lock"):
        if (root / "done").exists():
            return root
        from harness.tiny_models import save_tiny
        from icir_mcq.build import build_icir_mcq
        from icir_mcq.toy import write_toy_corpus
        from vhs_adapter.build import build_vhs
        from vhs_adapter.toy_questions import write_toy_vhs_questions

        root.mkdir(parents=True, exist_ok=True)
        corpus = write_toy_corpus(root / "toy", 300, seed=0, overwrite=True)
        for folder, embed in (("mcq", True), ("mcq_paths", False)):
            build_icir_mcq(corpus.coco_root, [corpus.mmniah_file], root / folder, seed=0, samples=60,
                           max_passage_chars=60, embed_images=embed, overwrite=True)
        write_toy_vhs_questions(corpus.coco_root, root / "vhs_qa", seed=0, sizes=(5,), per_size=VHS_DOCS,
                                overwrite=True)
        build_vhs(root / "vhs_qa", corpus.coco_root, root / "vhs", sizes=[5], overwrite=True)
        save_tiny("qwen3_vl", root / "model", seed=0)
        assert icir_main(icir_args(root, root / "ref_mcq", "--log_samples")) == 0
        assert icir_main(vhs_args(root, root / "ref_vhs")) == 0
        (root / "done").touch()
    return root
