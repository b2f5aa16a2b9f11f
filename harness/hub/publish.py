"""Stage a built ICIR-MCQ or VHs folder as a Hub benchmark dataset and upload it: what ``icir
publish`` runs (its command line and the layout of the upload are `harness.hub.cli`'s).

`publish` checks the folder (`read_build`), stages (`stage`) the completed card (`hub_card`),
every data file the card names and ``eval.yaml`` (`eval_yaml`), then creates the repo and uploads
the staged folder with `huggingface_hub.HfApi`. `check_eval_yaml` checks an ``eval.yaml`` against
the documented fields.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from huggingface_hub import DatasetCard, HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id

from harness.hub.eval_results import KINDS, POOLED_CONFIG, SPLIT, benchmark_tasks
from icir_common import (
    BUILD_MARKER,
    UserInputError,
    atomic_output_dir,
    build_kind,
    check_relative,
    inside_root,
)

EVAL_YAML = "eval.yaml"
CARD = "README.md"
EVALUATION_FRAMEWORK = "image-retrieval-heads"  # this package's harness: `icir eval` (lm-eval plugin)

# Hub card metadata per kind; a key the build's card already has is kept as built.
CARD_METADATA: dict[str, dict[str, Any]] = {
    "icir_mcq": {
        "pretty_name": "ICIR-MCQ",
        "license": "cc-by-4.0",
        "language": ["en"],
        "task_categories": ["visual-question-answering", "multiple-choice"],
        "tags": ["multi-image", "in-context-image-retrieval", "interpretability", "benchmark"],
    },
    "vhs": {
        "pretty_name": "Visual Haystacks (seeded haystacks, anchor/target spans)",
        "license": "mit",
        "language": ["en"],
        "task_categories": ["visual-question-answering"],
        "tags": ["multi-image", "needle-in-a-haystack", "visual-haystacks", "interpretability", "benchmark"],
    },
}
BENCHMARK: dict[str, dict[str, str]] = {
    "icir_mcq": {
        "name": "ICIR-MCQ",
        "description": (
            "In-context image retrieval probe of 'Heads That Write, Not Just Point' (Sec. 3.2, App. B): N candidate "
            "COCO images interleaved with MM-NIAH passages, then a four-way caption question about the one image "
            "holding the queried category. Tasks score answer accuracy and the best head's pointer R@1 (exact "
            "attention and Eq. 3 proxy) and writer R@1 at the category token, one task per metric and config."),
    },
    "vhs": {
        "name": "Visual Haystacks (seeded haystacks)",
        "description": (
            "Visual Haystacks (Wu et al., ICLR 2025) rebuilt into fixed, seeded haystacks with anchor/target "
            "character spans: a yes/no question about the image(s) holding the anchor object. Tasks score "
            "accuracy per haystack size N, and for single needles the best head's pointer R@1 and the best "
            "top-K vote R@1."),
    },
}
_TMP_FOLDER = re.compile(r"^\..+\.(?:tmp|old)-\d+-")
_SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))


@dataclass(frozen=True)
class Build:
    """A finished dataset build as `read_build` found it.

    Attributes:
        folder: the build folder.
        kind: its `icir_common.BUILD_MARKER` kind, ``icir_mcq`` or ``vhs``.
        card: its ``README.md`` as a `huggingface_hub.DatasetCard`.
        data_files: ``{config: {split: [relative paths]}}`` from the card's ``configs``.
    """

    folder: Path
    kind: str
    card: DatasetCard
    data_files: dict[str, dict[str, list[str]]]


def _data_files(card: DatasetCard, where: str) -> dict[str, dict[str, list[str]]]:
    """``{config: {split: [paths]}}`` of a card's ``configs`` (the list layout `render_card` writes)."""
    configs = getattr(card.data, "configs", None)
    if not isinstance(configs, list) or not configs:
        raise UserInputError(f"{where} declares no configs in its YAML front matter; rebuild the folder")
    found: dict[str, dict[str, list[str]]] = {}
    for config in configs:
        name = config.get("config_name") if isinstance(config, dict) else None
        files = config.get("data_files") if isinstance(config, dict) else None
        if not isinstance(name, str) or not isinstance(files, list):
            raise UserInputError(f"{where}: config {config!r} has no config_name and data_files list; "
                                 "rebuild the folder")
        splits: dict[str, list[str]] = {}
        for item in files:
            paths = item.get("path") if isinstance(item, dict) else None
            paths = [paths] if isinstance(paths, str) else paths
            if not isinstance(item, dict) or not isinstance(paths, list):
                raise UserInputError(f"{where}: config {name}: data_files item {item!r} has no split and path")
            splits.setdefault(str(item.get("split", "train")), []).extend(paths)
        found[name] = splits
    return found


def read_build(folder: str | os.PathLike) -> Build:
    """The finished ICIR-MCQ or VHs build in `folder`, checked to be one.

    A finished build is what `icir_common.atomic_output_dir` publishes: a folder (not one of its
    ``.NAME.tmp-PID-*`` working folders) holding the marker ``.icir-build.json`` with kind
    ``icir_mcq`` (``icir build-mcq``) or ``vhs`` (``icir build-vhs``), a ``README.md`` whose YAML
    front matter (read with huggingface_hub's `DatasetCard`) declares ``configs``, and every data
    file those name, inside the folder, with a parquet footer that reads.

    Raises:
        UserInputError: anything else (no folder, no or another marker, such as a toy corpus, an
            unreadable card, a missing or truncated data file), naming what is wrong.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UserInputError(f"{folder} is not a folder; give a folder built by icir build-mcq or icir build-vhs")
    if _TMP_FOLDER.match(folder.resolve().name):
        raise UserInputError(f"{folder} is the working folder of an unfinished build; give the finished --out folder")
    kind = build_kind(folder)
    if kind not in KINDS:
        what = f"a {kind} build" if kind else f"no readable {BUILD_MARKER} marker"
        raise UserInputError(f"{folder} holds {what}, not a finished ICIR-MCQ or VHs build; give a folder built by "
                             "icir build-mcq or icir build-vhs")
    card_path = folder / CARD
    try:
        card = DatasetCard.load(card_path)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as err:
        raise UserInputError(f"cannot read the dataset card {card_path}: {err}; rebuild the folder") from None
    data_files = _data_files(card, str(card_path))
    for config, splits in data_files.items():
        for relative in (path for paths in splits.values() for path in paths):
            check_relative(relative, f"{card_path} config {config}", folder)
            path = inside_root(folder, relative, f"{card_path} config {config}")
            if not path.is_file():
                raise UserInputError(f"{folder / relative} (config {config} of {card_path}) is missing; "
                                     "rebuild the folder")
            _check_parquet(path, f"config {config} of {card_path}")
    return Build(folder, kind, card, data_files)


def _check_parquet(path: Path, where: str) -> None:
    """Raise `UserInputError` naming `path` when its parquet footer does not read (a cut or damaged file)."""
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException) as err:
        raise UserInputError(f"{path} ({where}) is not a readable parquet file ({_one_line(err)}): it was cut "
                             "short or damaged; rebuild the folder") from None


def _size_category(rows: int) -> str:
    return next((label for bound, label in _SIZE_CATEGORIES if rows < bound), "n>1M")


def _pooled_config(build: Build) -> dict[str, Any] | None:
    """The ``all`` config of an ICIR-MCQ build of several configs with one schema, else None."""
    if build.kind != "icir_mcq" or len(build.data_files) < 2 or POOLED_CONFIG in build.data_files:
        return None
    infos = getattr(build.card.data, "dataset_info", None) or []
    features = [info.get("features") for info in infos if isinstance(info, dict)]
    if len(features) != len(build.data_files) or any(f != features[0] for f in features):
        return None
    paths = {split: [p for config in build.data_files.values() for p in config.get(split, [])]
             for split in dict.fromkeys(s for config in build.data_files.values() for s in config)}
    return {"config": {"config_name": POOLED_CONFIG,
                       "data_files": [{"split": split, "path": files} for split, files in paths.items()]},
            "info": {"config_name": POOLED_CONFIG, "features": copy.deepcopy(features[0])}}


def hub_card(build: Build, repo_id: str) -> DatasetCard:
    """The card to upload: the build's card with the Hub metadata of `CARD_METADATA` added.

    Keys the build already set are kept; ``size_categories`` comes from the data files' row
    counts (parquet footers); ICIR-MCQ of several configs gains the pooled config ``all``; the
    body's ``load_dataset("path/to/this/folder", ...)`` examples name `repo_id`.
    """
    card = DatasetCard(build.card.content)
    for key, value in CARD_METADATA[build.kind].items():
        if getattr(card.data, key, None) in (None, [], ""):
            setattr(card.data, key, copy.deepcopy(value))
    rows = sum(pq.ParquetFile(build.folder / path).metadata.num_rows
               for splits in build.data_files.values() for paths in splits.values() for path in paths)
    card.data.size_categories = [_size_category(rows)]
    pooled = _pooled_config(build)
    if pooled is not None:
        card.data.configs = [*card.data.configs, pooled["config"]]
        card.data.dataset_info = [*card.data.dataset_info, pooled["info"]]
        note = (f"\nThe config `{POOLED_CONFIG}` holds the rows of every config above together (the pooled "
                f"tasks of `{EVAL_YAML}`).\n")
        head, fields, tail = card.text.partition("\n## Fields")
        card.text = head + note + fields + tail if fields else card.text + note
    card.text = card.text.replace('"path/to/this/folder"', json.dumps(repo_id))
    return card


def eval_yaml(build: Build) -> dict[str, Any]:
    """The ``eval.yaml`` benchmark declaration of `build` (module docstring), as a dict.

    Mirrors the Hub's documented format: ``name``, ``description``, ``evaluation_framework`` and
    ``tasks`` of ``{id, config, split}``, one task per metric and config (split ``test``).
    """
    configs = list(build.data_files)
    tasks = benchmark_tasks(build.kind, configs)
    split_of = {config: (SPLIT if SPLIT in splits else next(iter(splits)))
                for config, splits in build.data_files.items()}
    return {
        **BENCHMARK[build.kind],
        "evaluation_framework": EVALUATION_FRAMEWORK,
        "tasks": [{"id": task, "config": config, "split": split_of.get(config, SPLIT)} for task, config in tasks],
    }


def check_eval_yaml(data: Any) -> list[str]:
    """Every way `data` (a parsed ``eval.yaml``) departs from the documented fields; empty: fine.

    huggingface_hub has no parser for ``eval.yaml`` (the Hub validates it at push time); this
    checks what https://huggingface.co/docs/hub/eval-results documents: string ``name``,
    ``description`` and ``evaluation_framework``, and a non-empty ``tasks`` list of ``id``,
    ``config`` and ``split`` strings with unique ids.
    """
    if not isinstance(data, dict):
        return ["eval.yaml is not a mapping"]
    problems = [f"{key} is not a non-empty string" for key in ("name", "description", "evaluation_framework")
                if not isinstance(data.get(key), str) or not data[key]]
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return problems + ["tasks is not a non-empty list"]
    for index, task in enumerate(tasks):
        if not isinstance(task, dict) or any(not isinstance(task.get(k), str) for k in ("id", "config", "split")):
            problems.append(f"tasks[{index}] lacks an id, config or split string")
    ids = [task.get("id") for task in tasks if isinstance(task, dict)]
    if len(set(ids)) != len(ids):
        problems.append("task ids are not unique")
    return problems


def _place(source: Path, target: Path, link: bool) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if link:
        with contextlib.suppress(OSError):
            os.link(source, target)
            return
    shutil.copyfile(source, target)


def stage(build: Build, out: Path, repo_id: str, link: bool = False) -> Path:
    """Write the upload of `build` into the (existing, empty) folder `out`; return `out`.

    ``README.md`` (`hub_card`), every data file the card names (hard links when `link` and the
    file system allows, else copies; the build is never modified) and ``eval.yaml`` (`eval_yaml`).
    """
    for relative in sorted({p for splits in build.data_files.values() for paths in splits.values() for p in paths}):
        _place(build.folder / relative, out / relative, link)
    hub_card(build, repo_id).save(out / CARD)
    text = yaml.safe_dump(eval_yaml(build), sort_keys=False, allow_unicode=True, width=100)
    (out / EVAL_YAML).write_text(text, encoding="utf-8")
    return out


@contextlib.contextmanager
def _staging(build: Build, repo_id: str, dry_run: Path | None) -> Iterator[Path]:
    if dry_run is not None:
        target, source = dry_run.resolve(), build.folder.resolve()
        if target == source or source in target.parents or target in source.parents:
            raise UserInputError(f"--dry-run {dry_run} overlaps the build folder {build.folder}; choose a new folder "
                                 "outside it")
        with atomic_output_dir(dry_run) as tmp:
            stage(build, tmp, repo_id)
        yield dry_run
        return
    with tempfile.TemporaryDirectory(prefix="icir-publish-") as tmp:
        yield stage(build, Path(tmp), repo_id, link=True)


# Errors of the Hub client: HTTP errors (HfHubHTTPError and the HTTP library's base class it
# extends), connection/offline errors (OSError: ConnectionError, OfflineModeIsEnabled) and
# huggingface_hub's validation of ids.
_HUB_ERRORS = (OSError, HfHubHTTPError, HFValidationError, *HfHubHTTPError.__bases__)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def publish(folder: str | os.PathLike, repo_id: str, private: bool = False, revision: str | None = None,
            dry_run: str | os.PathLike | None = None, token: str | None = None) -> str:
    """Stage the build in `folder` and upload it to the Hub dataset repo `repo_id`; return where it went.

    With `dry_run`, the staged folder is written there (it must not exist) and nothing is
    uploaded; the return value is that path. Otherwise the folder is staged in a temporary folder,
    the repo is created if needed (`HfApi.create_repo`, ``repo_type="dataset"``, ``exist_ok=True``,
    ``private``), the branch `revision` too when it is not ``main``
    (`HfApi.create_branch`, ``exist_ok=True``), and `HfApi.upload_folder` commits the staged files
    (existing files of the repo that the upload does not hold are kept, as ``upload_folder``
    does); the return value is the commit URL. The token is huggingface_hub's usual one
    (`token`, else ``HF_TOKEN``, else the file ``hf auth login`` / ``huggingface-cli login`` writes).

    Raises:
        UserInputError: a bad `repo_id`, a folder that is not a finished ICIR-MCQ / VHs build
            (`read_build`), an existing `dry_run` folder, no token, or any Hub or network error
            (one line each).
    """
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise UserInputError(f"--repo-id {repo_id!r} is not a Hub repo id ORG/NAME: {_one_line(err)}") from None
    if "/" not in repo_id:
        raise UserInputError(f"--repo-id {repo_id!r} lacks the owner: give ORG/NAME (your user name or an "
                             "organisation)")
    build = read_build(folder)
    if dry_run is not None:
        with _staging(build, repo_id, Path(dry_run)) as staged:
            return str(staged)
    token = token or get_token()
    if not token:
        raise UserInputError("no Hugging Face token: run `hf auth login` (older huggingface_hub: "
                             "`huggingface-cli login`) or set HF_TOKEN, then rerun icir publish")
    api = HfApi(token=token)
    with _staging(build, repo_id, None) as staged:
        try:
            api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            if revision and revision != "main":
                api.create_branch(repo_id, branch=revision, repo_type="dataset", exist_ok=True)
            commit = api.upload_folder(repo_id=repo_id, folder_path=str(staged), repo_type="dataset",
                                       revision=revision,
                                       commit_message=f"Upload {BENCHMARK[build.kind]['name']} with icir publish")
        except _HUB_ERRORS as err:
            raise UserInputError(f"upload to {repo_id} failed: {type(err).__name__}: {_one_line(err)}") from None
    return str(getattr(commit, "commit_url", None) or commit)

