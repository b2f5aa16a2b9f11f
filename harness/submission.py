"""Leaderboard submissions: ``icir submit`` bundles a run, ``icir leaderboard validate`` checks one.

A submission folder::

    submission.json                 the manifest (`SCHEMA`): schema version, model, protocol record,
                                    versions, tasks, units, dataset fingerprints, submitter, link,
                                    and the sha256 and size of every other file
    results/<results_*.json>        lm-eval's results file(s): the newest holding each task
    heads_ranking.json              the heads_ranking=FILE a transfer run voted with (when it had one)
    artifacts/<task or group>/      the unit's JSON and safetensors artifacts (`harness.artifacts`);
                                    no PNG; writer_probes/ only with ``--probes``

JSON, JSONL and safetensors only: nothing that executes. ``--archive`` also writes
``SUBMISSION.tar.gz``, deterministic (sorted members, mtime 0, uid/gid 0, no names, gzip mtime 0).

`validate` recomputes every reported aggregate it can from the per-document records
(``documents.jsonl``, ``head_records.safetensors``): accuracy, pointer R@1 exact and Eq. 3 (best
head of a discovery task, the transferred ranking's top head on a transfer task), the median head,
the top head, the R@1 grids at the reported position, and vote R@1@K over the vote ranking.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.activation_store import file_sha256
from harness.constants import (
    ARTIFACTS_FOLDER,
    ICIR_MCQ_GROUP,
    ICIR_MCQ_TASKS,
    POOLED_GROUPS,
    VOTE_KS,
)
from harness.protocol import PROTOCOL, PROTOCOL_FILE
from icir_common import UserInputError

SCHEMA_VERSION = "icir-submission/1"
MANIFEST = "submission.json"
ALLOWED_SUFFIXES = (".json", ".jsonl", ".safetensors")
UNIT_SUFFIXES = (".json", ".jsonl", ".safetensors")
MAX_FILE_BYTES = 2 * 1024**3  # one file
MAX_TOTAL_BYTES = 8 * 1024**3  # a whole submission (archive members too)
MAX_FILES = 10_000
DEFAULT_PROTOCOLS = (PROTOCOL,)
TOLERANCE = 1e-9

_SHA = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_NULLABLE_STR = {"type": ["string", "null"]}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ICIR leaderboard submission manifest",
    "type": "object",
    "required": ["schema_version", "model", "protocol", "versions", "tasks", "units", "datasets", "results",
                 "files"],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "model": {
            "type": "object",
            "required": ["id", "source", "revision", "commit", "weights_sha256", "dtype", "attn_implementation",
                         "n_layers", "n_heads"],
            "additionalProperties": False,
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "source": {"enum": ["local", "hub"]},
                "revision": _NULLABLE_STR,
                "commit": _NULLABLE_STR,
                "weights_sha256": {"oneOf": [_SHA, {"type": "null"}]},
                "dtype": {"type": "string"},
                "attn_implementation": _NULLABLE_STR,
                "n_layers": {"type": "integer", "minimum": 1},
                "n_heads": {"type": "integer", "minimum": 1},
            },
        },
        "protocol": {
            "type": "object",
            "required": ["protocol", "on_protocol", "deviations", "settings", "model", "versions", "datasets"],
            "properties": {
                "protocol": {"type": "string"},
                "on_protocol": {"type": "boolean"},
                "deviations": {"type": "array", "items": {"type": "string"}},
                "settings": {"type": "object", "required": ["limit", "pointer_mode", "readout"]},
                "model": {"type": "object"},
                "versions": {"type": "object"},
                "datasets": {"type": "object"},
            },
        },
        "versions": {"type": "object", "additionalProperties": _NULLABLE_STR},
        "tasks": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
        "units": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        },
        "datasets": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["documents", "fingerprint"],
                "properties": {"documents": {"type": "integer", "minimum": 1}, "fingerprint": _SHA},
            },
        },
        "results": {"type": "object", "additionalProperties": {"type": "string"}},
        "heads_ranking": {
            "type": "object",
            "required": ["file", "source"],
            "additionalProperties": False,
            "properties": {"file": {"type": "string"}, "source": {"type": "string"}},
        },
        "submitter": {"type": "string"},
        "link": {"type": "string", "pattern": "^https?://"},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "sha256", "size"],
                "additionalProperties": False,
                "properties": {"path": {"type": "string", "minLength": 1}, "sha256": _SHA,
                               "size": {"type": "integer", "minimum": 0}},
            },
        },
    },
}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"cannot read {path}: {err}") from None


# ----------------------------------------------------------------------------------------------- submit


def _unit_folders(run_folder: Path) -> dict[str, Path]:
    artifacts = run_folder / ARTIFACTS_FOLDER
    units = {p.name: p for p in sorted(artifacts.iterdir()) if p.is_dir()} if artifacts.is_dir() else {}
    units = {name: p for name, p in units.items() if (p / PROTOCOL_FILE).is_file() and (p / "summary.json").is_file()}
    if not units:
        raise UserInputError(f"{run_folder} holds no artifacts ({ARTIFACTS_FOLDER}/<task>/protocol.json); "
                             "pass a run folder OUTPUT/<model> of icir eval --output_path OUTPUT")
    return units


def _results_by_task(run_folder: Path, tasks: list[str]) -> dict[str, Path]:
    """The newest ``results_*.json`` of `run_folder` holding each task."""
    found: dict[str, Path] = {}
    for path in sorted(run_folder.glob("results_*.json"), reverse=True):
        results = _read_json(path).get("results", {})
        for task in tasks:
            if task in results and task not in found:
                found[task] = path
    missing = [task for task in tasks if task not in found]
    if missing:
        raise UserInputError(f"{run_folder} has no results_*.json holding {', '.join(missing)}")
    return found


def _is_limit_run(record: Mapping[str, Any]) -> bool:
    settings = record.get("settings") or {}
    return settings.get("limit") is not None or any(str(d).startswith("--limit") for d in record.get("deviations", []))


def _model_entry(record: Mapping[str, Any]) -> dict:
    model = record["model"]
    return {
        "id": model.get("pretrained"), "source": model.get("source"), "revision": model.get("revision"),
        "commit": model.get("commit"), "weights_sha256": model.get("weights_sha256"), "dtype": model.get("dtype"),
        "attn_implementation": model.get("attn_implementation"), "n_layers": model.get("n_layers"),
        "n_heads": model.get("n_heads"),
    }


def _unit_files(folder: Path, probes: bool) -> list[Path]:
    files = [p for p in sorted(folder.iterdir()) if p.is_file() and not p.is_symlink() and p.suffix in UNIT_SUFFIXES]
    probe_dir = folder / "writer_probes"
    if probes and probe_dir.is_dir():
        files += [p for p in sorted(probe_dir.iterdir())
                  if p.is_file() and not p.is_symlink() and p.suffix in (".json", ".safetensors")]
    return files


def submit(run_folder: str | os.PathLike, out: str | os.PathLike, archive: bool = False,
           submitter: str | None = None, link: str | None = None, probes: bool = False) -> Path:
    """Write the submission folder of `run_folder` into `out` (module docstring); return `out`.

    Raises:
        UserInputError: no artifacts, a ``--limit`` run, units of different runs, `out` not empty.
    """
    run_folder, out = Path(run_folder), Path(out)
    if not run_folder.is_dir():
        raise UserInputError(f"run folder {run_folder} does not exist")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserInputError(f"{out} exists and is not empty; choose a new --out")
    units = _unit_folders(run_folder)
    records = {name: _read_json(folder / PROTOCOL_FILE) for name, folder in units.items()}
    for name, record in records.items():
        if _is_limit_run(record):
            raise UserInputError(f"{name} is a partial run (--limit {record['settings'].get('limit')}): "
                                 "a submission needs every document of each dataset")
        if record.get("protocol") is None or "model" not in record:
            raise UserInputError(f"{units[name] / PROTOCOL_FILE} is not a protocol record")
    first = next(iter(records.values()))
    key = ("protocol", "settings", "model", "versions")
    for name, record in records.items():
        if any(record.get(k) != first.get(k) for k in key):
            raise UserInputError(f"{name}'s protocol record differs from {next(iter(records))}'s: "
                                 "the run folder mixes runs; submit one run")
    tasks = sorted({task for name, folder in units.items() for task in _read_json(folder / "summary.json")["tasks"]})
    results = _results_by_task(run_folder, tasks)
    datasets: dict[str, dict] = {}
    for record in records.values():
        datasets.update(record.get("datasets", {}))
    protocol = {**first, "datasets": {task: datasets[task] for task in sorted(datasets)}}

    out.mkdir(parents=True, exist_ok=True)
    copies: list[tuple[Path, str]] = [(path, f"results/{path.name}") for path in sorted(set(results.values()))]
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": _model_entry(first),
        "protocol": protocol,
        "versions": first.get("versions", {}),
        "tasks": tasks,
        "units": {name: _read_json(folder / "summary.json")["tasks"] for name, folder in units.items()},
        "datasets": {task: {"documents": d["documents"], "fingerprint": d["fingerprint"]}
                     for task, d in protocol["datasets"].items() if task in tasks},
        "results": {task: f"results/{path.name}" for task, path in sorted(results.items())},
    }
    ranking = first["settings"].get("heads_ranking")
    if ranking:
        if not Path(ranking).is_file():
            raise UserInputError(f"the run voted with heads_ranking={ranking}, which is gone; "
                                 "the validator needs it to recompute the votes")
        copies.append((Path(ranking), "heads_ranking.json"))
        manifest["heads_ranking"] = {"file": "heads_ranking.json", "source": str(ranking)}
    for name, folder in units.items():
        copies += [(path, f"artifacts/{name}/{path.relative_to(folder).as_posix()}")
                   for path in _unit_files(folder, probes)]
    if submitter:
        manifest["submitter"] = submitter
    if link:
        manifest["link"] = link
    entries = []
    for source, relative in sorted(copies, key=lambda c: c[1]):
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        entries.append({"path": relative, "sha256": file_sha256(target), "size": target.stat().st_size})
    manifest["files"] = entries
    write_manifest(out, manifest)
    if archive:
        write_archive(out, out.with_name(out.name + ".tar.gz"))
    return out


def write_manifest(folder: Path, manifest: Mapping[str, Any]) -> Path:
    """Write the manifest (sorted keys, so the same run gives the same bytes); return its path."""
    path = Path(folder) / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def write_archive(folder: Path, path: Path) -> Path:
    """A deterministic ``.tar.gz`` of `folder` (members under ``folder.name/``, sorted, fixed metadata)."""
    folder = Path(folder)
    members = sorted(p for p in folder.rglob("*"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in [folder, *members]:
            name = folder.name if member == folder else f"{folder.name}/{member.relative_to(folder).as_posix()}"
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if member.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, member.stat().st_size
                with open(member, "rb") as handle:
                    tar.addfile(info, handle)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buffer.getvalue())
    return path


# ---------------------------------------------------------------------------------------------- validate


def _unsafe_name(name: str) -> bool:
    parts = Path(name).parts
    return name.startswith(("/", "\\")) or os.path.isabs(name) or ".." in parts or ".." in name.split("\\")


def extract_archive(archive: Path, into: Path) -> list[str]:
    """Extract `archive` into `into` unless a member is unsafe; return the failures (nothing extracted then)."""
    failures = []
    try:
        tar = tarfile.open(archive, "r:*")  # noqa: SIM115 (closed by the with below)
    except (OSError, tarfile.TarError) as err:
        return [f"{archive.name}: not a readable tar archive ({err})"]
    with tar:
        try:
            members = tar.getmembers()
        except (OSError, tarfile.TarError, EOFError) as err:
            return [f"{archive.name}: corrupt archive ({err})"]
        total = 0
        if len(members) > MAX_FILES:
            failures.append(f"{archive.name}: {len(members)} members (cap {MAX_FILES})")
        for member in members:
            if _unsafe_name(member.name):
                failures.append(f"archive member {member.name!r}: absolute path or '..' (path traversal)")
            if member.issym() or member.islnk():
                failures.append(f"archive member {member.name!r}: a link (links are not allowed)")
            elif not (member.isfile() or member.isdir()):
                failures.append(f"archive member {member.name!r}: not a regular file or folder")
            if member.size > MAX_FILE_BYTES:
                failures.append(f"archive member {member.name!r}: {member.size} bytes (cap {MAX_FILE_BYTES})")
            total += max(member.size, 0)
        if total > MAX_TOTAL_BYTES:
            failures.append(f"{archive.name}: {total} bytes in all (cap {MAX_TOTAL_BYTES})")
        if failures:
            return failures
        tar.extractall(into, filter="data")
    return failures


def _find_root(folder: Path) -> Path:
    if (folder / MANIFEST).exists():
        return folder
    children = [p for p in folder.iterdir()]
    if len(children) == 1 and children[0].is_dir() and not children[0].is_symlink():
        return children[0]
    return folder


def _walk(root: Path) -> tuple[list[str], list[str]]:
    """``(relative paths of regular files, failures for links and odd entries)`` under `root`."""
    files, failures = [], []
    for current, dirs, names in os.walk(root, followlinks=False):
        for name in sorted(dirs + names):
            path = Path(current) / name
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                failures.append(f"{relative}: a symlink (links are not allowed)")
                if name in dirs:
                    dirs.remove(name)
            elif name in names:
                if path.is_file():
                    files.append(relative)
                else:
                    failures.append(f"{relative}: not a regular file")
    return sorted(files), failures


def _bad_numbers(value: Any, where: str) -> Iterator[str]:
    if isinstance(value, float) and not math.isfinite(value):
        yield f"{where}: {value} (NaN or inf)"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _bad_numbers(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _bad_numbers(item, f"{where}[{index}]")


def _close(a: Any, b: Any) -> bool:
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
        if not _close(reported, recomputed):
            self.fail(f"{where}: reported {reported}, recomputed from the per-document records {recomputed}")


def load_config(path: str | os.PathLike | None) -> dict | None:
    """The leaderboard config ``{"protocols": [...], "datasets": {task: [fingerprints]}}``, or None.

    Raises:
        UserInputError: an unreadable file or one of another shape.
    """
    if path is None:
        return None
    config = _read_json(Path(path))
    if (not isinstance(config, dict) or not isinstance(config.get("protocols"), list)
            or not isinstance(config.get("datasets", {}), dict)):
        raise UserInputError(f"{path} is not a leaderboard config "
                             '({"protocols": [...], "datasets": {task: [fingerprints]}})')
    return config


def validate(submission: str | os.PathLike, config: Mapping[str, Any] | None = None) -> Report:
    """Every failure of `submission` (a folder or a ``.tar.gz``), as one line each."""
    path = Path(submission)
    if not path.exists() and not path.is_symlink():
        raise UserInputError(f"{path} does not exist")
    if path.is_dir():
        return _validate_folder(path, config)
    with tempfile.TemporaryDirectory(prefix="icir-submission-") as tmp:
        failures = extract_archive(path, Path(tmp))
        if failures:
            report = Report()
            report.failures = failures
            return report
        return _validate_folder(_find_root(Path(tmp)), config)


def _validate_folder(root: Path, config: Mapping[str, Any] | None) -> Report:
    import jsonschema

    report = Report()
    files, failures = _walk(root)
    for line in failures:
        report.fail(line)
    manifest = _load_json(root, MANIFEST, set(files), report)
    if manifest is None:
        return report
    errors = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(manifest), key=lambda e: list(e.path))
    for error in errors:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        report.fail(f"{MANIFEST}: schema: {where}: {error.message}")
    if errors:
        return report
    listed = _check_files(root, manifest, files, report)
    _check_protocol(manifest, config, report)
    for unit, tasks in manifest["units"].items():
        _check_unit(root, manifest, listed, unit, tasks, report)
    return report


def _check_files(root: Path, manifest: Mapping[str, Any], files: list[str], report: Report) -> set[str]:
    listed: set[str] = set()
    total = 0
    for entry in manifest["files"]:
        relative = entry["path"]
        if relative in listed:
            report.fail(f"{relative}: listed twice in the manifest")
        listed.add(relative)
        if _unsafe_name(relative):
            report.fail(f"{relative}: absolute path or '..' in the manifest")
            continue
        if not relative.endswith(ALLOWED_SUFFIXES):
            report.fail(f"{relative}: not JSON, JSONL or safetensors")
        path = root / relative
        if relative not in files:
            report.fail(f"{relative}: listed in the manifest but missing")
            continue
        size = path.stat().st_size
        total += size
        if size > MAX_FILE_BYTES:
            report.fail(f"{relative}: {size} bytes (cap {MAX_FILE_BYTES})")
            continue
        if size != entry["size"]:
            report.fail(f"{relative}: size {size} bytes, manifest says {entry['size']}")
        digest = file_sha256(path)
        if digest != entry["sha256"]:
            report.fail(f"{relative}: sha256 {digest}, manifest says {entry['sha256']}")
    if total > MAX_TOTAL_BYTES:
        report.fail(f"submission: {total} bytes in all (cap {MAX_TOTAL_BYTES})")
    for extra in sorted(set(files) - listed - {MANIFEST}):
        report.fail(f"{extra}: not listed in the manifest (no file beyond the manifest)")
    needed = list(manifest["results"].values()) + ([manifest["heads_ranking"]["file"]]
                                                   if "heads_ranking" in manifest else [])
    for relative in needed:
        if relative not in listed:
            report.fail(f"{relative}: named by the manifest but not among its files")
    return {name for name in listed if name in files}


def _check_protocol(manifest: Mapping[str, Any], config: Mapping[str, Any] | None, report: Report) -> None:
    record = manifest["protocol"]
    protocols = list(config["protocols"]) if config else list(DEFAULT_PROTOCOLS)
    if config is None:
        report.notes.append(f"no --config: accepting protocol {', '.join(protocols)} and any dataset fingerprint")
    if record["protocol"] not in protocols:
        report.fail(f"protocol {record['protocol']!r} is not one this leaderboard accepts ({', '.join(protocols)})")
    if _is_limit_run(record):
        report.fail(f"partial run: --limit {record['settings']['limit']} (a submission needs every document)")
    model = record["model"]
    for key, value in manifest["model"].items():
        source = "pretrained" if key == "id" else key
        if model.get(source) != value:
            report.fail(f"manifest model {key} {value!r} differs from the protocol record's {model.get(source)!r}")
    for task in manifest["tasks"]:
        dataset = manifest["datasets"].get(task)
        if dataset is None:
            report.fail(f"{task}: no dataset fingerprint in the manifest")
            continue
        recorded = record["datasets"].get(task, {})
        if recorded.get("fingerprint") != dataset["fingerprint"] or recorded.get("documents") != dataset["documents"]:
            report.fail(f"{task}: manifest dataset differs from the protocol record's")
        if task not in manifest["results"]:
            report.fail(f"{task}: no results file named in the manifest")
        if config is not None:
            accepted = config.get("datasets", {}).get(task)
            if accepted is None:
                report.fail(f"{task}: not a dataset this leaderboard lists")
            elif dataset["fingerprint"] not in accepted:
                report.fail(f"{task}: dataset fingerprint {dataset['fingerprint']} is not a published build's")


def _load_json(root: Path, relative: str, listed: set[str], report: Report) -> Any:
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


def _load_tensors(root: Path, relative: str, report: Report) -> dict[str, np.ndarray] | None:
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


def _check_unit(root: Path, manifest: Mapping[str, Any], listed: set[str], unit: str, tasks: list[str],
                report: Report) -> None:
    folder = f"artifacts/{unit}"
    for relative in sorted(n for n in listed if n.startswith(folder + "/")):
        if relative.endswith(".safetensors"):
            _load_tensors(root, relative, report)
        elif relative.endswith(".json"):
            _load_json(root, relative, listed, report)
    summary = _load_json(root, f"{folder}/summary.json", listed, report)
    if summary is None:
        return
    if unit not in tasks:  # a pooled group: its documents are its tasks'; not recomputed in this slice
        report.notes.append(f"{unit}: pooled group, aggregates not recomputed (its tasks' are)")
        return
    task = unit
    records = _task_records(root, manifest, listed, folder, task, report)
    if records is None:
        return
    documents, pointer, pointer_eq3, targets = records
    results = _load_json(root, manifest["results"][task], listed, report) if task in manifest["results"] else None
    row = ((results or {}).get("results") or {}).get(task)
    if row is None:
        report.fail(f"{task}: not in its results file")
        row = {}
    where = f"{task}"
    n_layers, n_heads = manifest["model"]["n_layers"], manifest["model"]["n_heads"]
    accuracy = float(np.mean([bool(d.get("correct")) for d in documents])) if documents else math.nan
    report.compare(f"{where} acc", row.get("acc,none"), accuracy)
    _check_pointer(root, manifest, listed, folder, task, summary, row, pointer, pointer_eq3, targets,
                   n_layers, n_heads, report)


def _task_records(root: Path, manifest: Mapping[str, Any], listed: set[str], folder: str, task: str,
                  report: Report):
    docs_file, heads_file = f"{folder}/documents.jsonl", f"{folder}/head_records.safetensors"
    for relative in (docs_file, heads_file):
        if relative not in listed:
            report.fail(f"{relative}: missing (per-document records are required)")
            return None
    try:
        documents = [json.loads(line) for line in (root / docs_file).read_text().splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        report.fail(f"{docs_file}: not JSON lines ({err})")
        return None
    expected = manifest["protocol"]["datasets"].get(task, {}).get("documents")
    if len(documents) != expected:
        report.fail(f"{docs_file}: {len(documents)} documents, the protocol record's dataset has {expected}")
    tensors = _load_tensors(root, heads_file, report)
    if tensors is None:
        return None
    n_layers, n_heads = manifest["model"]["n_layers"], manifest["model"]["n_heads"]
    scored = [d for d in documents if d.get("target_image") is not None]
    n_docs = len(scored)
    shapes = {"pointer_image": ((n_docs, n_layers, n_heads), np.int16),
              "pointer_image_eq3": ((n_docs, n_layers, n_heads), np.int16),
              "target_image": ((n_docs,), np.int16), "doc_id": ((n_docs,), np.int64)}
    ok = True
    for name, (shape, dtype) in shapes.items():
        array = tensors.get(name)
        if array is None:
            report.fail(f"{heads_file}: no tensor {name!r}")
            ok = False
            continue
        if array.dtype != dtype:
            report.fail(f"{heads_file}: {name} is {array.dtype}, expected {np.dtype(dtype).name}")
            ok = False
        if tuple(array.shape) != shape:
            report.fail(f"{heads_file}: {name} has shape {list(array.shape)}, expected {list(shape)} "
                        f"([docs, L, H] with {n_docs} documents and the manifest's {n_layers} x {n_heads})")
            ok = False
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        report.fail(f"{heads_file}: unexpected tensors {', '.join(extra)}")
    if not ok:
        return None
    if [d["doc_id"] for d in scored] != tensors["doc_id"].tolist():
        report.fail(f"{heads_file}: doc_id differs from documents.jsonl's")
    if [d["target_image"] for d in scored] != tensors["target_image"].tolist():
        report.fail(f"{heads_file}: target_image differs from documents.jsonl's")
    if n_docs == 0:
        report.fail(f"{task}: no document with a target image")
        return None
    return documents, tensors["pointer_image"], tensors["pointer_image_eq3"], tensors["target_image"]


def _ranking_indices(document: Any, relative: str, n_layers: int, n_heads: int, report: Report):
    from harness.metrics.rankings import as_flat_indices

    try:
        flat = as_flat_indices(document["ranking"], n_layers, n_heads)
    except (UserInputError, KeyError, TypeError) as err:
        report.fail(f"{relative}: not a head ranking of {n_layers} x {n_heads} heads ({err})")
        return None
    if sorted(flat.tolist()) != list(range(n_layers * n_heads)):
        report.fail(f"{relative}: does not rank every head exactly once")
        return None
    return flat


def _check_pointer(root, manifest, listed, folder, task, summary, row, pointer, pointer_eq3, targets,
                   n_layers, n_heads, report: Report) -> None:
    from harness.metrics.rankings import head_ranking, ranking_names
    from harness.metrics.vote import vote_r1_curve
    from icir_common import flat_head_name

    target = targets.astype(np.int64)
    grids = {"exact": (pointer == target[:, None, None]).mean(axis=0, dtype=np.float64),
             "eq3": (pointer_eq3 == target[:, None, None]).mean(axis=0, dtype=np.float64)}
    votes = {"exact": pointer.astype(np.int64), "eq3": pointer_eq3.astype(np.int64)}
    primary = summary.get("ranking_score")
    if primary not in grids:
        report.fail(f"{folder}/summary.json: ranking_score {primary!r} is not exact or eq3")
        return
    position = summary.get("position")
    for score, suffix in (("exact", ""), ("eq3", "_eq3")):
        relative = f"{folder}/pointer_r1{suffix}.json"
        document = _load_json(root, relative, listed, report) if relative in listed else None
        grid = ((document or {}).get("grids") or {}).get(position)
        if grid is None:
            report.fail(f"{relative}: no grid at the reported position {position!r}")
            continue
        names = ranking_names(range(n_layers * n_heads), n_heads)
        wrong = [n for i, n in enumerate(names) if not _close(grid.get(n), grids[score].ravel()[i])]
        if wrong:
            report.fail(f"{relative}: R@1 of {len(wrong)} heads (first {wrong[0]}) differ from the head records")
    transferred = manifest["protocol"]["settings"].get("heads_ranking")
    discovery = task in ICIR_MCQ_TASKS or task == ICIR_MCQ_GROUP or task in POOLED_GROUPS
    own = head_ranking(grids[primary])
    ranking_file = f"{folder}/pointer_ranking.json"
    ranking_doc = _load_json(root, ranking_file, listed, report) if ranking_file in listed else None
    if ranking_doc is not None:
        file_flat = _ranking_indices(ranking_doc, ranking_file, n_layers, n_heads, report)
        if file_flat is not None and not np.allclose(grids[primary].ravel()[file_flat], grids[primary].ravel()[own]):
            report.fail(f"{ranking_file}: not the {primary} R@1 order of the head records")
        own = own if file_flat is None else file_flat  # ties as the ranking file has them
    vote_ranking = own
    if transferred:
        relative = (manifest.get("heads_ranking") or {}).get("file", "heads_ranking.json")
        document = _load_json(root, relative, listed, report) if relative in listed else None
        if document is None:
            return
        vote_ranking = _ranking_indices(document, relative, n_layers, n_heads, report)
        if vote_ranking is None:
            return
    for score, suffix in (("exact", ""), ("eq3", "_eq3")):
        grid = grids[score]
        if transferred:
            top = int(vote_ranking[0])
            value = float(grid.ravel()[top])
        elif discovery:
            top = int(head_ranking(grid)[0])
            value = float(grid.max())
        else:
            top, value = None, None
        for source, key_r1, key_head, head in (
            ("results", f"pointer_r1{suffix},none", f"pointer_top_head{suffix},none", top),
            ("summary.json", f"pointer_r1{suffix}", f"pointer_top_head{suffix}",
             None if top is None else flat_head_name(top, n_heads)),
        ):
            values = row if source == "results" else summary
            report.compare(f"{task} {key_r1.split(',')[0]} ({source})", values.get(key_r1), value)
            if values.get(key_head) != head:
                report.fail(f"{task} {key_head.split(',')[0]} ({source}): reported {values.get(key_head)}, "
                            f"recomputed from the per-document records {head}")
        median = float(np.median(grid))
        report.compare(f"{task} pointer_r1_median{suffix} (results)", row.get(f"pointer_r1_median{suffix},none"),
                       median)
        report.compare(f"{task} pointer_r1_median{suffix} (summary.json)", summary.get(f"pointer_r1_median{suffix}"),
                       median)
    capped = {k: min(k, vote_ranking.size) for k in VOTE_KS}
    curve = vote_r1_curve(votes[primary], target, vote_ranking, ks=sorted(set(capped.values())))
    vote_file = _load_json(root, f"{folder}/vote_r1.json", listed, report) or {}
    for k in VOTE_KS:
        value = curve[capped[k]]
        report.compare(f"{task} vote_r1@{k} (results)", row.get(f"vote_r1@{k},none"), value)
        report.compare(f"{task} vote_r1@{k} (summary.json)", (summary.get("vote_r1") or {}).get(str(k)), value)
        report.compare(f"{task} vote_r1@{k} (vote_r1.json)", (vote_file.get("pointer") or {}).get(str(k)), value)


# --------------------------------------------------------------------------------------------------- CLI


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir submit`` and ``icir leaderboard validate``."""
    parser = subparsers.add_parser("submit", help="bundle a finished run as a leaderboard submission",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_folder", type=Path, metavar="RUN_FOLDER",
                        help="a run folder OUTPUT/<model> of icir eval --output_path OUTPUT")
    parser.add_argument("--out", type=Path, required=True, metavar="SUBMISSION", help="the submission folder to write")
    parser.add_argument("--archive", action="store_true", help="also write SUBMISSION.tar.gz (deterministic)")
    parser.add_argument("--submitter", help="your name, shown on the leaderboard")
    parser.add_argument("--link", help="a link (paper, model card), http(s)://")
    parser.add_argument("--probes", action="store_true", help="include the writer probes (writer_probes/)")
    parser.set_defaults(func=run_submit)

    board = subparsers.add_parser("leaderboard", help="leaderboard tools: validate a submission")
    actions = board.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser("validate", help="check a submission and recompute every reported number")
    check.add_argument("submission", type=Path, metavar="SUBMISSION", help="a submission folder or .tar.gz")
    check.add_argument("--config", type=Path, metavar="LEADERBOARD.json",
                       help='{"protocols": [...], "datasets": {task: [fingerprints]}} (default: '
                            f"protocol {PROTOCOL}, any fingerprint)")
    check.set_defaults(func=run_validate)


def run_submit(args: argparse.Namespace) -> int:
    """``icir submit``: bundle the run, print where it went."""
    if args.link and not args.link.startswith(("http://", "https://")):
        raise UserInputError(f"--link {args.link!r} must start with http:// or https://")
    out = submit(args.run_folder, args.out, archive=args.archive, submitter=args.submitter, link=args.link,
                 probes=args.probes)
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
