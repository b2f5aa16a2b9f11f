"""A resumable, sharded safetensors store of per-document head captures, keyed by (task, doc_id).

The lm-eval model class (`harness.lm_eval_plugin.model`) writes one record per evaluated
document: the capture arrays of the paper's criteria (pointer scores ``[P, L, H, N]``, head
outputs ``[P, L, H, d_h]``, image embeddings ``[N, d_model]``, answer scores) and a small JSON
record (the model's response, the document fingerprint). The analysis stage (`harness.analysis`)
reads them back; a killed run reopens the store and skips every document already written.

Layout of a store folder::

    capture_settings.json                  capture settings every record was made with (written
                                           once; a store with shards but no settings is refused)
    shards/<task>/r<rank>-<seq>.safetensors  records of one flush by one process
    shards/<task>/r<rank>-<seq>.safetensors.sha256  its sha256, checked before it is read

A shard holds tensors named ``<doc_id>/<field>`` and, in its safetensors metadata, ``records``:
a JSON object ``{doc_id: record}``. Shards are written to a temporary name and renamed, so a
killed process leaves only whole shards; at most the unflushed buffer (`flush_every` documents)
is recomputed. A shard whose bytes do not match its checksum (truncated, flipped, edited) is set
aside with a warning and its documents are recomputed. The settings hold the model's identity
(weights sha256 or Hub commit), so new weights at the same path never reuse old captures. Each process (data-parallel rank) writes its own shard names, and every process
sees every shard, so a resumed run may use another number of processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import safe_open

from harness.constants import STORE_FLUSH
from icir_common import UserInputError, atomic_file, read_json, write_json

if TYPE_CHECKING:
    import torch

SETTINGS_FILE = "capture_settings.json"
_SHARD_RE = re.compile(r"^r(\d+)-(\d+)\.safetensors$")
_TASK_RE = re.compile(r"^[A-Za-z0-9_.:-]+$")


def read_capture_settings(root: str | os.PathLike) -> dict[str, Any] | None:
    """The capture settings of the store folder `root` (its `SETTINGS_FILE`), or None when it has none.

    Raises:
        UserInputError: a settings file that cannot be read or is not a JSON object (cut short or
            edited), naming the file: the captures beside it cannot be matched to their settings.
    """
    path = Path(root) / SETTINGS_FILE
    if not path.is_file():
        return None
    remedy = (f"the store's settings file was cut short or edited, so the captures beside it cannot be matched to "
              f"their settings: delete the store folder {path.parent} or pass another store=DIR")
    settings = read_json(path, remedy)
    if not isinstance(settings, dict):
        raise UserInputError(f"{path} holds a JSON {type(settings).__name__}, not an object; {remedy}")
    return settings


def check_store_folder(root: str | os.PathLike) -> None:
    """Check, without writing anything, that `root` can be an activation store folder.

    `root` may be missing (it is created) or a folder; an existing store's settings file must
    read (`read_capture_settings`).

    Raises:
        UserInputError: `root`, or the nearest existing folder above it, is not a folder (a
            file), or its settings file does not read; naming the path and what to pass instead.
    """
    root = Path(root)
    existing = next(path for path in (root, *root.parents) if path.exists())
    if not existing.is_dir():
        raise UserInputError(f"store {root}: {existing} is a file, not a folder; pass store=DIR naming a folder "
                             "(created when missing) for the activation store")
    read_capture_settings(root)


class CorruptShardWarning(UserWarning):
    """A shard that failed its checksum or could not be read; its documents are recomputed."""


def checksum_path(shard: Path) -> Path:
    """The file holding `shard`'s sha256 (hex, one line), beside it."""
    return shard.with_name(shard.name + ".sha256")


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Shards whose bytes this process has hashed (or written), by path -> (size, mtime_ns): a store
# reopened in the same run (the model, then the analysis stage) does not hash them again.
_HASHED: dict[Path, tuple[int, int]] = {}


def _stat_key(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _matches_checksum(shard: Path, checksum: Path) -> bool:
    if _HASHED.get(shard) == _stat_key(shard):
        return True
    if file_sha256(shard) != checksum.read_text().strip():
        return False
    _HASHED[shard] = _stat_key(shard)
    return True


def _verified_records(shard: Path, set_aside: bool = True) -> dict[str, Any] | None:
    """The shard's records if its bytes match its checksum and it reads; else None (warned, and
    with `set_aside` renamed ``.corrupt-<name>`` so that a writer recomputes its documents)."""
    checksum = checksum_path(shard)
    problem = None
    if not checksum.is_file():
        problem = "has no checksum file"
    elif not _matches_checksum(shard, checksum):
        problem = "does not match its checksum (changed or cut after it was written)"
    else:
        try:
            with safe_open(shard, framework="pt") as handle:
                return json.loads(handle.metadata()["records"])
        except Exception as err:  # safetensors raises its own error types for damaged files
            problem = f"cannot be read ({type(err).__name__}: {err})"
    consequence = "its documents are recomputed" if set_aside else "its documents are not read"
    warnings.warn(f"activation store shard {shard} {problem}: {consequence}", CorruptShardWarning, stacklevel=3)
    if not set_aside:
        return None
    for path in (shard, checksum):
        with contextlib.suppress(FileNotFoundError):  # another process may have set it aside already
            path.rename(path.with_name(f".corrupt-{path.name}"))
    return None


@dataclass(frozen=True)
class StoredDoc:
    """One document's record: its JSON ``record`` and, when loaded, its capture ``tensors``."""

    task: str
    doc_id: int
    record: dict[str, Any]
    tensors: dict[str, torch.Tensor]


class ActivationStore:
    """Per-document captures under ``root``, written in shards and read back by (task, doc_id).

    Args:
        root: the store folder (created when missing).
        settings: JSON-serialisable capture settings (model, pointer mode, readout positions, image
            budget, ...). A store keeps the settings of its first writer; reopening it with other
            settings raises, so records made under different settings are never mixed.
        rank: this process's data-parallel rank (names its shards).
        flush_every: buffered documents per shard; a killed run recomputes at most this many.
        read_only: open an existing store for reading only (the analysis stage): nothing under
            ``root`` is created, written or renamed; a damaged shard is warned about and not read.

    Raises:
        UserInputError: ``settings`` differ from those the store was created with; ``root`` is
            not a folder or its settings file does not read (`check_store_folder`); with
            `read_only`, a folder without settings or shards.
    """

    def __init__(self, root: str | os.PathLike, settings: Mapping[str, Any], rank: int = 0, flush_every: int = STORE_FLUSH,
                 read_only: bool = False):
        if flush_every < 1:
            raise UserInputError(f"store flush_every must be >= 1, got {flush_every}")
        self.root = Path(root)
        self.rank = int(rank)
        self.flush_every = int(flush_every)
        self.settings = json.loads(json.dumps(dict(settings), sort_keys=True))
        self.read_only = read_only
        check_store_folder(self.root)
        if read_only:
            if not (self.root / SETTINGS_FILE).is_file() or not (self.root / "shards").is_dir():
                raise UserInputError(f"{self.root} is no activation store (no {SETTINGS_FILE} and shards/); "
                                     "name the store folder the run captured into")
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "shards").mkdir(exist_ok=True)
        self._check_settings()
        self._index: dict[tuple[str, int], tuple[Path, dict[str, Any]]] = {}
        self._seen_shards: set[Path] = set()
        self._buffer: dict[str, dict[int, tuple[dict[str, Any], dict[str, torch.Tensor]]]] = defaultdict(dict)
        self.refresh()

    def _check_settings(self) -> None:
        path = self.root / SETTINGS_FILE
        if not path.exists() and any((self.root / "shards").rglob("*.safetensors")):
            raise UserInputError(
                f"activation store {self.root} holds captures but no {SETTINGS_FILE}: what they were made with "
                f"cannot be proven, so they are not reused; pass another store=DIR or delete that folder"
            )
        stored = read_capture_settings(self.root)
        if stored is not None:
            if stored != self.settings:
                differing = sorted(k for k in set(stored) | set(self.settings) if stored.get(k) != self.settings.get(k))
                raise UserInputError(
                    f"activation store {self.root} was written with other capture settings "
                    f"(differing: {', '.join(differing)}); pass another store=DIR or delete that folder"
                )
        else:
            write_json(path, self.settings, sort_keys=True)

    def refresh(self) -> None:
        """Index shards written since the last call (by this or any other process).

        Each shard is checked against its sha256 file first; a shard that fails (no checksum,
        another checksum, unreadable) is set aside as ``.corrupt-<name>`` with a warning naming it,
        and its documents are recomputed: nothing the store cannot prove is reused.
        """
        for task_dir in sorted((self.root / "shards").iterdir()):
            for shard in sorted(task_dir.glob("r*-*.safetensors")):
                if shard in self._seen_shards or not _SHARD_RE.match(shard.name):
                    continue
                records = _verified_records(shard, set_aside=not self.read_only)
                if records is None:
                    continue
                for doc_id, record in records.items():
                    self._index.setdefault((task_dir.name, int(doc_id)), (shard, record))
                self._seen_shards.add(shard)

    def record(self, task: str, doc_id: int) -> dict[str, Any] | None:
        """The JSON record of (task, doc_id), flushed or buffered, or None when absent."""
        buffered = self._buffer.get(task, {}).get(int(doc_id))
        if buffered is not None:
            return buffered[0]
        found = self._index.get((task, int(doc_id)))
        return None if found is None else found[1]

    def __contains__(self, key: tuple[str, int]) -> bool:
        return self.record(*key) is not None

    def doc_ids(self, task: str) -> list[int]:
        """Sorted doc ids of `task` that have a record (flushed or buffered)."""
        ids = {doc_id for t, doc_id in self._index if t == task} | set(self._buffer.get(task, {}))
        return sorted(ids)

    def put(self, task: str, doc_id: int, record: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
        """Buffer one document; flush a shard once `flush_every` documents are buffered.

        A (task, doc_id) already in the store is left as it is (data-parallel padding repeats
        the last request of a rank; its capture is identical).

        Args:
            task: lm-eval task name (letters, digits, ``_.:-``).
            doc_id: lm-eval document index within the task.
            record: JSON-serialisable record (the model response, the document fingerprint, ...).
            tensors: capture arrays by field name; stored contiguous on the CPU, dtype kept.

        Raises:
            UserInputError: a task name that cannot name a folder.
            ValueError: the store was opened `read_only`.
        """
        if self.read_only:
            raise ValueError(f"activation store {self.root} was opened read-only")
        if not _TASK_RE.match(task):
            raise UserInputError(f"task name {task!r} cannot name a store folder (letters, digits, _.:- only)")
        if (task, int(doc_id)) in self:
            return
        cpu = {name: tensor.detach().to("cpu").contiguous() for name, tensor in tensors.items()}
        self._buffer[task][int(doc_id)] = (json.loads(json.dumps(dict(record))), cpu)
        if sum(len(docs) for docs in self._buffer.values()) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write every buffered document: one new shard per task, renamed into place when whole."""
        from safetensors.torch import save_file  # imports torch, which `file_sha256` and the settings do not need

        for task, docs in sorted(self._buffer.items()):
            if not docs:
                continue
            task_dir = self.root / "shards" / task
            task_dir.mkdir(parents=True, exist_ok=True)
            shard = task_dir / f"r{self.rank:03d}-{self._next_seq(task_dir):06d}.safetensors"
            tensors = {f"{doc_id}/{name}": t for doc_id, (_, ts) in docs.items() for name, t in ts.items()}
            records = {str(doc_id): record for doc_id, (record, _) in docs.items()}
            with atomic_file(shard) as tmp:  # the checksum is in place before the shard appears
                save_file(tensors, str(tmp), metadata={"records": json.dumps(records, sort_keys=True)})
                with atomic_file(checksum_path(shard)) as sum_tmp:
                    sum_tmp.write_text(file_sha256(tmp) + "\n")
            _HASHED[shard] = _stat_key(shard)
            for doc_id, (record, _) in docs.items():
                self._index.setdefault((task, doc_id), (shard, record))
            self._seen_shards.add(shard)
        self._buffer.clear()

    def _next_seq(self, task_dir: Path) -> int:
        seqs = [
            int(m.group(2))
            for p in task_dir.iterdir()
            if (m := _SHARD_RE.match(p.name)) and int(m.group(1)) == self.rank
        ]
        return max(seqs, default=-1) + 1

    def load(self, task: str, doc_ids: Iterable[int], fields: Iterable[str] | None = None) -> list[StoredDoc]:
        """Records and tensors of `doc_ids` of `task`, in the order given; each shard opened once.

        Args:
            fields: tensor fields to load (all when None).

        Raises:
            UserInputError: a document without a record (the message names the first missing ids).
        """
        doc_ids = [int(d) for d in doc_ids]
        missing = [d for d in doc_ids if (task, d) not in self]
        if missing:
            self.refresh()
            missing = [d for d in doc_ids if (task, d) not in self]
        if missing:
            raise UserInputError(
                f"activation store {self.root} has no capture for task {task!r} doc ids {missing[:5]}"
                f"{' ...' if len(missing) > 5 else ''}: the run that made them was interrupted, or their shards "
                f"failed their checksum (set aside as .corrupt-*); rerun icir eval to capture them again"
            )
        wanted = None if fields is None else set(fields)
        by_shard: dict[Path, list[int]] = defaultdict(list)
        loaded: dict[int, StoredDoc] = {}
        for doc_id in doc_ids:
            buffered = self._buffer.get(task, {}).get(doc_id)
            if buffered is not None:
                record, tensors = buffered
                picked = {k: v for k, v in tensors.items() if wanted is None or k in wanted}
                loaded[doc_id] = StoredDoc(task, doc_id, record, picked)
            else:
                by_shard[self._index[(task, doc_id)][0]].append(doc_id)
        for shard, ids in by_shard.items():
            with safe_open(shard, framework="pt") as handle:
                names = list(handle.keys())
                for doc_id in ids:
                    prefix = f"{doc_id}/"
                    tensors = {
                        name[len(prefix):]: handle.get_tensor(name)
                        for name in names
                        if name.startswith(prefix) and (wanted is None or name[len(prefix):] in wanted)
                    }
                    loaded[doc_id] = StoredDoc(task, doc_id, self._index[(task, doc_id)][1], tensors)
        return [loaded[d] for d in doc_ids]
