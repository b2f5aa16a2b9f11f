"""``icir submit``: bundle a finished run as a submission folder (and a deterministic ``.tar.gz``)."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.ablation.run import ABLATION_FOLDER
from harness.activation_store import file_sha256
from harness.constants import ARTIFACTS_FOLDER, WRITER_PROBES_SETTINGS
from harness.leaderboard.entries import RESULTS_FOLDER, entry_key
from harness.leaderboard.schema import MANIFEST, SCHEMA_VERSION, STAGE_KEYS, UNIT_SUFFIXES
from harness.protocol import PROTOCOL_FILE
from icir_common import UserInputError, read_json


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
        results = read_json(path).get("results", {})
        for task in tasks:
            if task in results and task not in found:
                found[task] = path
    missing = [task for task in tasks if task not in found]
    if missing:
        raise UserInputError(f"{run_folder} has no results_*.json holding {', '.join(missing)}")
    return found


def is_limit_run(record: Mapping[str, Any]) -> bool:
    settings = record.get("settings") or {}
    return settings.get("limit") is not None or any(str(d).startswith("--limit") for d in record.get("deviations", []))


def _model_entry(record: Mapping[str, Any]) -> dict:
    model = record["model"]
    return {
        "id": model.get("pretrained"), "name": model.get("name"), "source": model.get("source"), "revision": model.get("revision"),
        "commit": model.get("commit"), "weights_sha256": model.get("weights_sha256"), "dtype": model.get("dtype"),
        "attn_implementation": model.get("attn_implementation"), "n_layers": model.get("n_layers"),
        "n_heads": model.get("n_heads"), "architecture": model.get("architecture"),
        "model_type": model.get("model_type"), "n_parameters": model.get("n_parameters"),
    }


def _unit_files(folder: Path, probes: bool) -> list[Path]:
    files = [p for p in sorted(folder.iterdir()) if p.is_file() and not p.is_symlink() and p.suffix in UNIT_SUFFIXES]
    probe_dir = folder / "writer_probes"
    if probes and probe_dir.is_dir():
        files += [p for p in sorted(probe_dir.iterdir())
                  if p.is_file() and not p.is_symlink() and p.suffix in (".json", ".safetensors")]
    return files


def shared_protocol(record: Mapping[str, Any]) -> tuple:
    """What every unit of one run shares: its protocol record without the stage inputs."""
    settings = {k: v for k, v in record["settings"].items() if k not in STAGE_KEYS}
    return record.get("protocol"), settings, record.get("model"), record.get("versions")


def _stage_inputs(run_folder: Path, unit: str, record: Mapping[str, Any], copies: list) -> dict:
    """The unit's transferred ranking and probes settings, queued for copying as ``inputs/<unit>/``.

    An input made by a unit of the same run folder names that unit, so the validator checks it
    against that unit's recomputed ranking.
    """
    found = {}
    artifacts = (run_folder / ARTIFACTS_FOLDER).resolve()
    for key in STAGE_KEYS:
        source = record["settings"].get(key)
        if not source:
            continue
        path = Path(source) / WRITER_PROBES_SETTINGS if key == "writer_probes" else Path(source)
        if not path.is_file():
            raise UserInputError(f"{unit} used {key}={source}, and {path} is gone; "
                                 "the validator needs it to recompute the votes")
        relative = f"inputs/{unit}/{key}.json"
        copies.append((path, relative))
        found[key] = {"file": relative, "source": str(source)}
        resolved = Path(source).resolve()
        if resolved.is_relative_to(artifacts) and len(resolved.relative_to(artifacts).parts) >= 2:
            found[key]["unit"] = resolved.relative_to(artifacts).parts[0]
    return found


def _ablation(run_folder: Path, record: Mapping[str, Any], copies: list) -> dict | None:
    """The run's ablation grid (``icir ablate``), queued for copying as ``ablation/``, or None.

    Raises:
        UserInputError: a grid of other weights, or one whose rankings are not this run's units.
    """
    folder = run_folder / ABLATION_FOLDER
    if not (folder / "cells.json").is_file():
        return None
    protocol = read_json(folder / PROTOCOL_FILE)
    identity = protocol.get("model", {}).get("identity") or {}
    if any(identity.get(key) != record["model"].get(key) for key in ("weights_sha256", "commit")):
        raise UserInputError(f"{folder} is a grid of other weights than the run's; rerun icir ablate")
    rankings = Path(protocol["ablation"]["rankings"]).resolve()
    artifacts = (run_folder / ARTIFACTS_FOLDER).resolve()
    if not rankings.is_relative_to(artifacts) or len(rankings.relative_to(artifacts).parts) != 1:
        raise UserInputError(f"{folder}'s rankings {rankings} are not a unit of this run; the validator "
                             "recomputes the arms from them")
    outcomes = sorted((folder / "outcomes").glob("*.jsonl"))
    names = ["grid.json", "cells.json", PROTOCOL_FILE]
    copies += [(folder / name, f"{ABLATION_FOLDER}/{name}") for name in names]
    copies += [(path, f"{ABLATION_FOLDER}/outcomes/{path.name}") for path in outcomes]
    return {"unit": rankings.name, "cells": f"{ABLATION_FOLDER}/cells.json", "grid": f"{ABLATION_FOLDER}/grid.json",
            "protocol": f"{ABLATION_FOLDER}/{PROTOCOL_FILE}",
            "outcomes": [f"{ABLATION_FOLDER}/outcomes/{path.name}" for path in outcomes]}


def submit(run_folder: str | os.PathLike, out: str | os.PathLike, archive: bool = False,
           submitter: str | None = None, link: str | None = None, probes: bool = False,
           leaderboard: bool = False) -> Path:
    """Write the submission folder of `run_folder` into `out` (module docstring); return its path.

    Args:
        leaderboard: `out` is a leaderboard folder: the submission goes to its
            ``results/<org__model>/<revision>/`` (`harness.leaderboard.entries`).

    Raises:
        UserInputError: no artifacts, a ``--limit`` run, units of different runs, the submission
            folder not empty.
    """
    run_folder, out = Path(run_folder), Path(out)
    if not run_folder.is_dir():
        raise UserInputError(f"run folder {run_folder} does not exist")
    units = _unit_folders(run_folder)
    records = {name: read_json(folder / PROTOCOL_FILE) for name, folder in units.items()}
    for name, record in records.items():
        if is_limit_run(record):
            raise UserInputError(f"{name} is a partial run (--limit {record['settings'].get('limit')}): "
                                 "a submission needs every document of each dataset")
        if record.get("protocol") is None or "model" not in record:
            raise UserInputError(f"{units[name] / PROTOCOL_FILE} is not a protocol record")
    # A run may have two stages (§4.3): discovery on ICIR-MCQ, then transfer with its ranking and probes.
    first = min(records.values(), key=lambda r: any(r["settings"].get(k) for k in STAGE_KEYS))
    for name, record in records.items():
        if shared_protocol(record) != shared_protocol(first):
            raise UserInputError(f"{name}'s protocol record differs from the others' (beyond heads_ranking and "
                                 "writer_probes): the run folder mixes runs; submit one run")
    unit_tasks = {name: read_json(folder / "summary.json")["tasks"] for name, folder in units.items()}
    tasks = sorted({task for names in unit_tasks.values() for task in names})
    results = _results_by_task(run_folder, tasks)
    datasets: dict[str, dict] = {}
    for record in records.values():
        datasets.update(record.get("datasets", {}))
    protocol = {**first, "settings": {**first["settings"], **dict.fromkeys(STAGE_KEYS)},
                "datasets": {task: datasets[task] for task in sorted(datasets)}}

    if leaderboard:
        out = out / RESULTS_FOLDER / entry_key({"model": _model_entry(first)})
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserInputError(f"{out} exists and is not empty; choose a new --out")
    out.mkdir(parents=True, exist_ok=True)
    copies: list[tuple[Path, str]] = [(path, f"results/{path.name}") for path in sorted(set(results.values()))]
    manifest: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": _model_entry(first),
        "protocol": protocol,
        "versions": first.get("versions", {}),
        "tasks": tasks,
        "units": unit_tasks,
        "datasets": {task: {"documents": d["documents"], "fingerprint": d["fingerprint"]}
                     for task, d in protocol["datasets"].items() if task in tasks},
        "results": {task: f"results/{path.name}" for task, path in sorted(results.items())},
    }
    inputs = {name: _stage_inputs(run_folder, name, record, copies) for name, record in records.items()}
    manifest["inputs"] = {name: found for name, found in inputs.items() if found}
    for name, folder in units.items():
        copies += [(path, f"artifacts/{name}/{path.relative_to(folder).as_posix()}")
                   for path in _unit_files(folder, probes)]
    ablation = _ablation(run_folder, first, copies)
    if ablation:
        manifest["ablation"] = ablation
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
