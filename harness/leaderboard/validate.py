"""``icir leaderboard validate``: files, hashes, schema and protocol of a submission, then the recomputation."""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.activation_store import file_sha256
from harness.leaderboard.bundle import is_limit_run, shared_protocol
from harness.leaderboard.checks import Report, load_json
from harness.leaderboard.recompute import Recomputation
from harness.leaderboard.schema import (
    ALLOWED_SUFFIXES,
    DEFAULT_PROTOCOLS,
    RETIRED_PROTOCOLS,
    MANIFEST,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_TOTAL_BYTES,
    SCHEMA,
    STAGE_KEYS,
)
from harness.protocol import PROTOCOL_FILE
from icir_common import UserInputError, read_json


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


def load_config(path: str | os.PathLike | None) -> dict | None:
    """The leaderboard config ``{"protocols": [...], "datasets": {task: [fingerprints]}}``, or None.

    Raises:
        UserInputError: an unreadable file or one of another shape.
    """
    if path is None:
        return None
    config = read_json(Path(path))
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
    manifest = load_json(root, MANIFEST, set(files), report)
    if manifest is None:
        return report
    errors = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(manifest), key=lambda e: list(e.path))
    for error in errors:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        report.fail(f"{MANIFEST}: schema: {where}: {error.message}")
    if errors:
        return report
    protocol = manifest["protocol"]["protocol"]
    if protocol in RETIRED_PROTOCOLS:  # nothing of it is recomputed under names it defined otherwise
        report.fail(f"protocol {protocol!r} is retired: {RETIRED_PROTOCOLS[protocol]}")
        return report
    listed = _check_files(root, manifest, files, report)
    _check_protocol(manifest, config, report)
    _check_one_run(root, manifest, listed, report)
    recomputation = Recomputation(root, manifest, listed, report)
    for unit, tasks in manifest["units"].items():
        recomputation.unit(unit, tasks)
    recomputation.ablation()
    return report


def _check_one_run(root: Path, manifest: Mapping[str, Any], listed: set[str], report: Report) -> None:
    """Every unit's own protocol record must be the manifest's run (its stage inputs aside)."""
    for unit in manifest["units"]:
        relative = f"artifacts/{unit}/{PROTOCOL_FILE}"
        record = load_json(root, relative, listed, report)
        if record is None:
            continue
        try:
            same = shared_protocol(record) == shared_protocol(manifest["protocol"])
            sources = {key: (manifest["inputs"].get(unit, {}).get(key) or {}).get("source") for key in STAGE_KEYS}
            same_inputs = all(record["settings"].get(key) == source for key, source in sources.items())
        except (KeyError, TypeError, AttributeError):
            report.fail(f"{relative}: not a protocol record")
            continue
        if not same:
            report.fail(f"{relative}: another run's protocol record (settings, model or versions differ from "
                        "the manifest's): a submission holds one run")
        elif not same_inputs:
            report.fail(f"{relative}: its heads_ranking / writer_probes are not the manifest's inputs of {unit}")


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
    needed = list(manifest["results"].values()) + [entry["file"] for found in manifest["inputs"].values()
                                                   for entry in found.values()]
    ablation = manifest.get("ablation") or {}
    needed += [ablation[key] for key in ("cells", "grid", "protocol") if key in ablation] + ablation.get("outcomes", [])
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
    if is_limit_run(record):
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
