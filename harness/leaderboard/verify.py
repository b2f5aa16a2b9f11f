"""``icir leaderboard verify``: re-run a seeded sample of a submission's documents and compare.

With the model's weights at hand, a reviewer re-runs `docs` documents of every task (drawn by
``numpy.random.default_rng(seed)``, sorted) through the same eval path as ``icir eval``
(`harness.evaluate` with lm-eval's ``samples``), under the submission's protocol settings:
pointer mode, readout positions, image side, dtype, attention kernel, transferred ranking,
generation kwargs and seeds. The weights must be the submission's (weights sha256 of a local
folder, or the Hub commit). Per field the agreement is the fraction of equal entries:

- ``answer`` and ``correct``: per document; they must agree on at least `ANSWER_AGREEMENT`.
- ``pointer_image_exact`` and ``pointer_image_eq3``: per document and head (the image each head points
  to, exact and Eq. 3); at least `HEAD_AGREEMENT`.

The tolerances allow for bf16 kernels across GPUs, where a near-tie between two images can flip a
head's argmax (docs/leaderboard.md); fp32 on the same kernel agrees exactly. Every document that
disagrees in any field is named, passing or not. Writer records are not re-run: a writer fit
needs every training document (the validator recomputes writer R@1 from the submitted picks).

A passing run can write a verification record (``--record``) binding the result to the sha256
of the submission's ``submission.json``; the leaderboard marks the entry *verified* from it.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.activation_store import file_sha256
from harness.leaderboard.schema import MANIFEST
from harness.leaderboard.validate import validate
from icir_common import UserInputError, read_json, write_json

ANSWER_AGREEMENT = 0.95
HEAD_AGREEMENT = 0.99
DOCUMENT_FIELDS = ("answer", "correct")
HEAD_FIELDS = ("pointer_image_exact", "pointer_image_eq3")
VERIFICATION_FORMAT = "icir-verification/1"


@dataclass
class Verification:
    """What `verify` found.

    Attributes:
        agreement: ``{field: fraction of equal entries}`` over the sampled documents.
        mismatches: ``{field: ["task:doc_id", ...]}`` documents that disagree in the field.
        documents: ``{task: [doc_id, ...]}`` the sample.
        failures: lines saying why the verification failed (empty: it passed).
    """

    agreement: dict[str, float] = field(default_factory=dict)
    mismatches: dict[str, list[str]] = field(default_factory=dict)
    documents: dict[str, list[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether every field met its tolerance and the weights were the submission's."""
        return not self.failures


def sample_documents(counts: Mapping[str, int], docs: int, seed: int) -> dict[str, list[int]]:
    """``{task: sorted doc ids}``: `docs` ids of each task drawn without replacement (all when fewer)."""
    rng = np.random.default_rng(seed)
    return {task: sorted(rng.choice(n, size=min(docs, n), replace=False).tolist()) for task, n in sorted(counts.items())}


def protocol_model_args(manifest: Mapping[str, Any], root: Path, override: Mapping[str, Any]) -> dict[str, Any]:
    """The ``hf-multimodal-heads`` arguments of the submission's run, `override` on top."""
    settings, model = manifest["protocol"]["settings"], manifest["model"]
    args: dict[str, Any] = {
        "pretrained": model["id"],
        "pointer_mode": settings["pointer_mode"],
        "readout": "/".join(settings["readout"]),
        "dtype": str(model["dtype"]).removeprefix("torch."),
        "attn_implementation": model["attn_implementation"],
    }
    if model.get("revision"):
        args["revision"] = model["revision"]
    images = settings.get("image_inputs") or {}
    if images.get("side_source") == "user":
        args["image_budget"] = images["side"]
    if "heads_ranking" in manifest:
        args["heads_ranking"] = str(root / manifest["heads_ranking"]["file"])
    return {**args, **override}


def _compare(mine: Any, theirs: Any) -> float:
    mine, theirs = np.asarray(mine), np.asarray(theirs)
    return float((mine == theirs).mean()) if mine.shape == theirs.shape else 0.0


def verify(submission: str | Path, data: Mapping[str, str], docs: int = 20, seed: int = 0,
           model_args: Mapping[str, Any] | None = None, device: str | None = None) -> Verification:
    """Re-run a seeded sample of `submission`'s documents and compare them with it (module docstring).

    Args:
        submission: a submission folder (its validation failures are failures here too).
        data: task metadata naming the dataset folders (``{"icir_mcq_data": DIR, "vhs_data": DIR}``).
        docs: documents per task.
        seed: the sample's seed.
        model_args: arguments over the protocol's (``pretrained=`` where the weights live here).
        device: torch device; default: ``model_args``' ``device``, else cuda when there is one, else cpu.

    Raises:
        UserInputError: a submission whose manifest or records cannot be read, or any error of
            the eval path (an unknown model, a missing dataset folder).
    """
    import torch

    from harness.activation_store import SETTINGS_FILE, ActivationStore
    from harness.analysis import record_answer
    from harness.evaluation import evaluate
    from harness.metrics.pointer import pointer_votes

    root = Path(submission)
    if not root.is_dir():
        raise UserInputError(f"{root} is not a submission folder; run icir leaderboard validate on it")
    report = validate(root)
    manifest = read_json(root / MANIFEST)
    if any(line.startswith(f"{MANIFEST}:") for line in report.failures):
        raise UserInputError(f"{root}: {report.failures[0]}; run icir leaderboard validate")
    submitted = {task: _submitted(root, manifest, task) for task in manifest["tasks"]}
    counts = {task: manifest["datasets"][task]["documents"] for task in manifest["tasks"]}
    # A submission that fails validation is still compared, so the reviewer sees which documents differ.
    found = Verification(documents=sample_documents(counts, docs, seed),
                         failures=[f"does not validate: {line}" for line in report.failures])
    settings = manifest["protocol"]["settings"]
    with tempfile.TemporaryDirectory(prefix="icir-verify-") as store:
        args = protocol_model_args(manifest, root, {**(model_args or {}), "store": store})
        args["device"] = device or args.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")
        seeds = settings.get("seeds") or {}
        kwargs = {f"{key.removesuffix('_seed')}_random_seed" if key != "random_seed" else key: value
                  for key, value in seeds.items() if value is not None}
        evaluate(sorted(found.documents), args, metadata=dict(data), samples=found.documents, batch_size=1,
                 gen_kwargs=settings.get("gen_kwargs"), analyze=False, **kwargs)
        stored_settings = read_json(Path(store) / SETTINGS_FILE)
        opened = ActivationStore(store, stored_settings)
        _check_identity(stored_settings, manifest["model"], found)
        rows = {field: [] for field in DOCUMENT_FIELDS + HEAD_FIELDS}
        for task, ids in found.documents.items():
            # lm-eval numbers the sampled documents 0..k-1 in dataset order (ids are sorted)
            stored = opened.load(task, range(len(ids)), ["pointer", "pointer_eq3"])
            mine_pointer = {"pointer_image_exact": pointer_votes([d.tensors["pointer"] for d in stored], 0),
                            "pointer_image_eq3": pointer_votes([d.tensors["pointer_eq3"] for d in stored], 0)}
            for index, (doc_id, doc) in enumerate(zip(ids, stored)):
                answer, correct = record_answer(doc.record)
                where = f"{task}:{doc_id}"
                theirs = submitted[task].get(doc_id)
                if theirs is None:  # a sampled document the submission lacks disagrees in every field
                    for name in rows:
                        rows[name].append((where, 0.0))
                    continue
                for name, value in (("answer", answer), ("correct", correct)):
                    rows[name].append((where, float(theirs["document"].get(name) == value)))
                if theirs["heads"] is not None:  # documents without a target image carry no head records
                    for name in HEAD_FIELDS:
                        rows[name].append((where, _compare(mine_pointer[name][index], theirs["heads"][name])))
    for name, values in rows.items():
        if not values:
            continue
        found.agreement[name] = float(np.mean([v for _, v in values]))
        found.mismatches[name] = [where for where, v in values if v < 1.0]
        needed = ANSWER_AGREEMENT if name in DOCUMENT_FIELDS else HEAD_AGREEMENT
        if found.agreement[name] < needed:
            found.failures.append(f"{name}: agreement {found.agreement[name]:.4f} below {needed} "
                                  f"(documents {', '.join(found.mismatches[name][:10])})")
    return found


def _check_identity(settings: Mapping[str, Any], model: Mapping[str, Any], found: Verification) -> None:
    identity = settings.get("identity") or {}
    for key in ("weights_sha256", "commit"):
        if model.get(key) is not None and identity.get(key) != model[key]:
            found.failures.append(f"model {key} {identity.get(key)} is not the submission's {model[key]}: "
                                  "verify with the submitted weights")


def _submitted(root: Path, manifest: Mapping[str, Any], task: str) -> dict[int, dict[str, Any]]:
    """``{doc_id: {"document": documents.jsonl row, "heads": {field: [L, H]} or None}}`` of one task,
    read and shape-checked by the validator's own reader (`Recomputation.task_records`).

    Raises:
        UserInputError: the task's per-document records cannot be read, naming the file and why.
    """
    from harness.leaderboard.checks import Report
    from harness.leaderboard.recompute import Recomputation

    listed = {entry["path"] for entry in manifest["files"] if (root / entry["path"]).is_file()}
    problems = Report()
    records = Recomputation(root, manifest, listed, problems).task_records(task)
    if records is None:
        raise UserInputError(f"{root}: {problems.failures[0]}; run icir leaderboard validate")
    scored = [row for row in records.documents if row.get("target_image") is not None]
    heads = {row["doc_id"]: {"pointer_image_exact": records.pointer[i], "pointer_image_eq3": records.pointer_eq3[i]}
             for i, row in enumerate(scored)}
    return {row["doc_id"]: {"document": row, "heads": heads.get(row["doc_id"])} for row in records.documents}


def write_record(path: Path, submission: Path, found: Verification, docs: int, seed: int) -> Path:
    """Write the verification record (format `VERIFICATION_FORMAT`) the leaderboard reads; return `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {
        "format": VERIFICATION_FORMAT, "passed": found.passed,
        "manifest_sha256": file_sha256(Path(submission) / MANIFEST), "docs": docs, "seed": seed,
        "agreement": found.agreement, "mismatches": found.mismatches, "documents": found.documents,
        "tolerance": {"answers": ANSWER_AGREEMENT, "heads": HEAD_AGREEMENT}, "failures": found.failures,
    })
    return path


def register_verify(actions: argparse._SubParsersAction) -> None:
    """Add ``icir leaderboard verify``."""
    parser = actions.add_parser("verify", help="re-run a seeded sample of a submission's documents and compare",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", type=Path, metavar="SUBMISSION", help="a submission folder")
    parser.add_argument("--docs", type=int, default=20, help="documents re-run per task (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the document sample (default 0)")
    parser.add_argument("--model_args", default="", metavar="ARGS",
                        help="model arguments over the submission's protocol, e.g. pretrained=/weights/here")
    parser.add_argument("--metadata", default="{}", metavar="JSON",
                        help='the dataset folders, as for icir eval: {"icir_mcq_data": DIR, "vhs_data": DIR}')
    parser.add_argument("--device", help="torch device (default: cuda when there is one, else cpu)")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="write the verification record here (a leaderboard's "
                             "verifications/<org__model>/<revision>.json)")
    parser.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    """``icir leaderboard verify``: print the agreement per field and every mismatch; 1 on failure, else 0."""
    from harness.evaluation import parse_metadata, parse_model_args

    if args.docs < 1:
        raise UserInputError(f"--docs must be at least 1, got {args.docs}")
    metadata = parse_metadata(args.metadata)
    found = verify(args.submission, metadata, args.docs, args.seed, parse_model_args(args.model_args), args.device)
    for name, value in found.agreement.items():
        mismatched = found.mismatches.get(name) or []
        print(f"{name:18s} agreement {value:.4f}" + (f"  differs: {', '.join(mismatched)}" if mismatched else ""))
    for line in found.failures:
        print(f"FAIL: {line}")
    if args.record:
        print(f"verification record: {write_record(args.record, args.submission, found, args.docs, args.seed)}")
    total = sum(len(ids) for ids in found.documents.values())
    print(f"{args.submission}: {'verified' if found.passed else 'NOT verified'} on {total} re-run documents")
    return 0 if found.passed else 1
