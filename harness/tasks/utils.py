"""Task hooks of the ICIR-MCQ and Visual Haystacks lm-eval tasks (YAML ``!function utils.<name>``).

Datasets come from local folders built by ``icir build-mcq`` / ``icir build-vhs`` /
``icir build-needle``, named by lm-eval's ``--metadata`` (``icir_mcq_data=DIR``, ``vhs_data=DIR``,
``text_needle_data=DIR``, and ``coco_root=DIR`` for folders built with ``--no-embed-images``) or by
the environment variables ``ICIR_MCQ_DATA``, ``ICIR_VHS_DATA``, ``ICIR_NEEDLE_DATA`` and
``ICIR_COCO_ROOT``.

``process_results`` returns each document's ``acc`` (and VHs ``compliance``); the head metrics
are computed after lm-eval by the analysis stage (`harness.analysis`) from the activation store,
which holds every document's capture and the record fields it needs (`documents.HEAD_FIELDS`).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import datasets
import numpy as np

from icir_common import UserInputError, inside_root
from vhs_adapter.scoring import is_compliant, is_correct

# Dataset kind -> the environment variable that names its folder when --metadata does not,
# and the command that builds one.
DATA_FOLDER_ENV = {"icir_mcq": "ICIR_MCQ_DATA", "vhs": "ICIR_VHS_DATA", "text_needle": "ICIR_NEEDLE_DATA"}
BUILD_COMMAND = {"icir_mcq": "icir build-mcq", "vhs": "icir build-vhs", "text_needle": "icir build-needle"}


def _folder(kind: str, given: str | None) -> Path:
    env = DATA_FOLDER_ENV[kind]
    value = given or os.environ.get(env)
    if not value:
        raise UserInputError(
            f"no {kind} dataset folder given: pass --metadata {kind}_data=DIR to `icir eval`/lm-eval, or set {env} "
            f"(build one with `{BUILD_COMMAND[kind]}`)"
        )
    folder = Path(value).expanduser()
    if not (folder / "README.md").is_file():
        raise UserInputError(f"{kind} dataset folder {folder} not found or has no README.md dataset card")
    return folder


def check_data_folders(task_names: list[str], metadata: dict) -> None:
    """Check, before any model is loaded, that every named task's dataset folder is given and exists.

    ``icir_mcq*`` tasks need ``icir_mcq_data`` (or ``ICIR_MCQ_DATA``), ``vhs*`` tasks ``vhs_data``
    (or ``ICIR_VHS_DATA``). lm-eval builds its tasks only after loading the model, which for a real
    LVLM takes minutes; this check moves the same errors in front of it.

    Raises:
        UserInputError: a folder is not given, missing, or has no dataset card.
    """
    for kind in DATA_FOLDER_ENV:
        if any(name.startswith(kind) for name in task_names):
            _folder(kind, metadata.get(f"{kind}_data"))


def _cache_dir(folder: Path) -> Path:
    """A datasets cache folder for exactly this folder's files (path, size and mtime of each).

    datasets keys its cache of a local folder on the folder's name and card only, so a folder
    rebuilt in place, or another folder of the same name, would be served stale cached rows.
    """
    digest = hashlib.blake2b(digest_size=12)
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".cache" not in p.parts):
        stat = path.stat()
        digest.update(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return Path(datasets.config.HF_DATASETS_CACHE) / "icir" / digest.hexdigest()


def _load_config(folder: Path, config: str, coco_root: str | None) -> datasets.DatasetDict:
    try:
        dataset = datasets.load_dataset(str(folder), config, cache_dir=str(_cache_dir(folder)))
    except ValueError as err:
        available = datasets.get_dataset_config_names(str(folder))
        raise UserInputError(f"{folder} has no config {config!r} (it has {', '.join(available)}): {err}") from None
    if isinstance(dataset["test"].features["images"].feature, datasets.Image) and dataset[
        "test"
    ].features["images"].feature.decode:
        return dataset
    return datasets.DatasetDict({split: _with_image_files(part, coco_root) for split, part in dataset.items()})


def _with_image_files(dataset: datasets.Dataset, coco_root: str | None) -> datasets.Dataset:
    """Point a ``--no-embed-images`` folder's images at the COCO files (``image_files``)."""
    root = coco_root or os.environ.get("ICIR_COCO_ROOT")
    if not root:
        raise UserInputError(
            "this dataset folder stores image paths only (--no-embed-images): pass --metadata coco_root=DIR "
            "or set ICIR_COCO_ROOT"
        )
    root = Path(root).expanduser()

    def resolve(row):
        paths = [inside_root(root, name, f"record {row['id']}") for name in row["image_files"]]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise UserInputError(f"record {row['id']}: image file {missing[0]} not found under coco_root {root}")
        return {"images": [str(p) for p in paths]}

    features = dataset.features.copy()
    features["images"] = datasets.List(datasets.Image())
    return dataset.map(resolve, features=features)


def load_icir_mcq(icir_config: str, icir_mcq_data: str | None = None, coco_root: str | None = None, **_metadata):
    """The ICIR-MCQ config `icir_config` ("n5"/"n6") as a ``DatasetDict`` with split ``test``.

    lm-eval calls this with every ``--metadata``/model argument; the others are ignored.

    Raises:
        UserInputError: no folder given, a folder without a dataset card, an unknown config, or
            (``--no-embed-images`` folders) no COCO root / a missing image file.
    """
    return _load_config(_folder("icir_mcq", icir_mcq_data), icir_config, coco_root)


def load_vhs(vhs_config: str, vhs_data: str | None = None, coco_root: str | None = None, **_metadata):
    """The VHs config `vhs_config` (e.g. "single_needle_n10") as a ``DatasetDict`` (split ``test``).

    Raises:
        UserInputError: as `load_icir_mcq`.
    """
    return _load_config(_folder("vhs", vhs_data), vhs_config, coco_root)


def load_text_needle(text_needle_data: str | None = None, coco_root: str | None = None, **_metadata):
    """The text needle folder's ``needle`` config (App. K) as a ``DatasetDict`` (split ``test``).

    Raises:
        UserInputError: as `load_icir_mcq`.
    """
    return _load_config(_folder("text_needle", text_needle_data), "needle", coco_root)


def process_text_needle(doc: dict, results: list) -> dict:
    """Text needle ``acc``: the needle's number appears in the response as a whole number (App. K)."""
    return {"acc": float(doc["answer"] in re.findall(r"\d+", results[0]))}


def process_icir_mcq(doc: dict, results: list) -> dict:
    """ICIR-MCQ ``acc``: the restricted argmax over the option letters A-D (App. C.4).

    `results` holds one ``(log p(letter), is_greedy)`` per option letter, A-D.
    """
    logprobs = [result[0] for result in results]
    return {"acc": float(int(np.argmax(logprobs)) == int(doc["answer_index"]))}


def process_vhs(doc: dict, results: list) -> dict:
    """VHs ``acc`` and ``compliance``: the response parsed as the VHs toolkit does (App. A)."""
    text = results[0]
    return {"acc": float(is_correct(text, doc["answer"])), "compliance": float(is_compliant(text))}
