"""Run the ablation grid over VHs documents: the same tasks, encoding and answer parsing as icir eval.

Documents come from lm-eval's task definitions (`harness/tasks/vhs_single_n*.yaml`, their
requests built by lm-eval exactly as for ``icir eval``) and go through the model class
(`HFMultimodalHeadsLM`: the same weights, chat template and image inputs) and its encoder. A
document's ablation start is its ``ablation_start_char`` (the first character of the anchor
phrase, §6.1); its answer is parsed as the VHs task parses it (`vhs_adapter.scoring`).

Outcomes are appended per document to ``OUT/ablation/outcomes/<task>.jsonl`` (all cells of a
document in one line), so a killed run resumes after its last complete document. Under
``accelerate launch`` every process takes every ``world_size``-th document (lm-eval's sharding)
and appends to ``<task>.rank<r>.jsonl``; the results are computed once all are written. A run folder
holds one grid: ``settings.json`` records the model's capture settings, the grid's cells, the
tasks and the decoding settings, and a rerun with other settings is refused. Each line records
its document's fingerprint, so a changed dataset is refused too.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ablation.arms import (
    DEFAULT_KS,
    DEFAULT_SEEDS,
    DEFAULT_TOP,
    WRITER_RANKING,
    Grid,
    build_grid,
    load_rankings,
)
from harness.constants import vhs_single_size
from icir_common import UserInputError, write_json

ABLATION_FOLDER = "ablation"
SETTINGS = "settings.json"


@dataclass
class AblationSpec:
    """What one ``icir ablate`` run does.

    Attributes:
        tasks: ``vhs_single_n{N}`` task names.
        rankings: an ICIR-MCQ run's unit folder (``icir_artifacts/icir_mcq``).
        output: the run folder; results go to ``output/ablation/``.
        model_args: ``hf-multimodal-heads`` arguments (``pretrained``, required, ``image_budget``, ...).
        metadata: task metadata (``{"vhs_data": DIR}``).
        ks, seeds, top: the grid (`arms.build_grid`).
        limit: documents per task (None: all).
        through_generation: zero the heads at every generated token too (App. I.1).
        share_prefix: prefill each document's prefix once (False: one full forward per cell).
        cell_batch: cells per suffix forward (None: `cells.prefix_shared_cells`' default).
    """

    tasks: list[str]
    rankings: Path
    output: Path
    model_args: dict[str, Any]
    metadata: dict[str, Any]
    ks: Sequence[int] = DEFAULT_KS
    seeds: Sequence[int] = DEFAULT_SEEDS
    top: int = DEFAULT_TOP
    limit: int | None = None
    through_generation: bool = False
    share_prefix: bool = True
    cell_batch: int | None = None

    @property
    def folder(self) -> Path:
        """``output/ablation``."""
        return Path(self.output) / ABLATION_FOLDER


def haystack_size(task: str) -> int:
    """N of a ``vhs_single_n{N}`` task.

    Raises:
        UserInputError: another task (the grid runs on VHs single-needle haystacks, §6.1).
    """
    size = vhs_single_size(task)
    if size is None:
        raise UserInputError(f"icir ablate runs on VHs single-needle tasks (vhs_single_n2, ...), not {task!r}")
    return size


def model_shape(pretrained: str) -> tuple[int, int]:
    """``(L, H)`` of a model from its config alone (no weights loaded)."""
    from transformers import AutoConfig

    try:
        text = AutoConfig.from_pretrained(pretrained).get_text_config()
    except (OSError, ValueError) as err:
        raise UserInputError(f"cannot read the config of {pretrained}: {err}") from None
    return int(text.num_hidden_layers), int(text.num_attention_heads)


def task_requests(tasks: Sequence[str], metadata: Mapping[str, Any], limit: int | None, rank: int = 0,
                  world_size: int = 1) -> dict[str, list]:
    """``{task: [lm-eval Instance, ...]}``: each task's requests as lm-eval builds them for icir eval
    (`harness.evaluation.task_requests`), every document with an ablation start.

    Raises:
        UserInputError: see `harness.evaluation.task_requests`, or a document without
            ``ablation_start_char``.
    """
    from harness.evaluation import task_requests as built_requests

    requests = built_requests(tasks, metadata, limit, rank, world_size)
    for name, instances in requests.items():
        missing = [i.doc_id for i in instances if i.doc.get("ablation_start_char") is None]
        if missing:
            raise UserInputError(f"{name}: documents {missing[:5]} have no ablation_start_char; rebuild the VHs "
                                 "folder with this package's build-vhs")
    return requests


class OutcomeLog:
    """``outcomes/<task>.jsonl``: one line per finished document, all its cells (module docstring).

    Args:
        path: the log file.
        read_only: read another run's log (`--compare`): nothing is written or created.
    """

    def __init__(self, path: Path, read_only: bool = False) -> None:
        self.path = path
        self.done: dict[int, dict] = {}
        raw = path.read_bytes() if path.is_file() else b""
        complete = raw[: raw.rfind(b"\n") + 1]  # a line cut by a kill is dropped and redone
        for line in complete.decode().splitlines():
            row = json.loads(line)
            self.done[int(row["doc_id"])] = row
        if read_only:
            return
        if len(complete) != len(raw):
            path.write_bytes(complete)
        path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, row: dict) -> None:
        """Append one document's line and flush it to disk."""
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.done[int(row["doc_id"])] = row


def _check_settings(folder: Path, settings: Mapping[str, Any]) -> None:
    path = folder / SETTINGS
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored != json.loads(json.dumps(settings, sort_keys=True)):
            changed = sorted(k for k in set(stored) | set(settings) if stored.get(k) != settings.get(k))
            raise UserInputError(f"{folder} holds a grid run with other settings ({', '.join(changed)}); "
                                 "choose another --output_path")
    else:
        write_json(path, settings, sort_keys=True)


def _documents(lm, instances) -> Iterator[tuple[Any, Any, Any, Any, int]]:
    """Per document: its request, DocInput, encoded inputs, layout and ablation start token."""
    from harness.capture.adapters import image_token_id, resolve_adapter
    from harness.capture.inputs import CaptureRequest, encode_requests
    from harness.lm_eval_plugin.documents import doc_input

    image_token = image_token_id(lm.model, resolve_adapter(lm.model))
    for instance in instances:
        doc = doc_input(instance)
        start_char = int(instance.doc["ablation_start_char"])
        request = CaptureRequest(doc.prompt, doc.images, (start_char, start_char + 1))
        inputs, (layout,) = encode_requests(lm.processor, [request], image_token, lm.image_call)
        yield instance, doc, inputs, layout, layout.cattok


def run_grid(spec: AblationSpec) -> tuple[Grid, dict[str, OutcomeLog], dict]:
    """Run (or resume) every cell on every document; return the grid, the outcome logs, the settings.

    Raises:
        UserInputError: see `haystack_size`, `load_rankings`, `build_grid`, `task_requests`; a
            rankings folder without a writer ranking (before the model loads); a run folder holding
            another grid; a document whose fingerprint changed since it was run.
    """
    from tqdm import tqdm

    from harness.ablation.cells import can_share_prefix, full_forward_cells, prefix_shared_cells
    from harness.lm_eval_plugin.generation import greedy_settings, response_text
    from harness.lm_eval_plugin.model import HFMultimodalHeadsLM
    from vhs_adapter.scoring import is_correct, parse_yes_no

    sizes = {task: haystack_size(task) for task in spec.tasks}
    n_layers, n_heads = model_shape(spec.model_args["pretrained"])
    pointer, writer = load_rankings(spec.rankings, n_layers, n_heads)
    if writer is None:
        raise UserInputError(f"--rankings {spec.rankings} holds no {WRITER_RANKING}: the set partition of App. I "
                             "needs the pointer and the writer ranking; pass the icir_artifacts/icir_mcq folder of "
                             "an icir eval run on ICIR-MCQ that fit writer probes")
    grid = build_grid(pointer, writer, n_layers, n_heads, spec.ks, spec.seeds, spec.top)
    rank, world = rank_and_world()
    requests = task_requests(spec.tasks, spec.metadata, spec.limit, rank, world)
    # The model class keeps an activation store; the grid stores nothing in it, so each process
    # gets its own throwaway one (icir eval's data-parallel processes must share theirs).
    scratch = tempfile.mkdtemp(prefix="icir-ablate-")
    atexit.register(shutil.rmtree, scratch, True)
    lm = HFMultimodalHeadsLM(**{**spec.model_args, "store": scratch})
    eos = lm.tok_decode(lm.eot_token_id, skip_special_tokens=False)
    settings = {
        "capture": {k: v for k, v in lm.capture_settings().items() if k not in ("readout",)},
        "cells": {cell.name: list(cell.heads) for cell in grid.cells},
        "tasks": sorted(spec.tasks), "limit": spec.limit, "through_generation": spec.through_generation,
        "rankings": str(Path(spec.rankings).resolve()),
    }
    spec.folder.mkdir(parents=True, exist_ok=True)
    _check_settings(spec.folder, settings)
    logs = {task: _open_log(spec.folder, task, rank, world) for task in spec.tasks}
    heads = [cell.heads for cell in grid.cells]
    todo = sum(1 for task in spec.tasks for i in requests[task] if i.doc_id not in logs[task].done)
    bar = tqdm(total=todo * len(grid.cells), desc="ablation cells", unit="cell")
    fallback: set[str] = set()
    for task in spec.tasks:
        _refuse_changed_documents(spec.folder, task, requests[task], logs[task])
        pending = [i for i in requests[task] if i.doc_id not in logs[task].done]
        for instance, doc, inputs, layout, start in _documents(lm, pending):
            decoding = greedy_settings(instance.args[1], eos, lm.max_gen_toks)
            why = can_share_prefix(layout, start) if spec.share_prefix else "prefix sharing is off"
            if why is None:
                generated = prefix_shared_cells(lm.model, lm.tokenizer, inputs, layout, start, heads, decoding,
                                                spec.through_generation, spec.cell_batch)
            else:
                fallback.add(f"{task}: {why}")
                generated = full_forward_cells(lm.model, lm.tokenizer, inputs, layout, start, heads, decoding,
                                               spec.through_generation)
            cells = {}
            for cell, tokens in zip(grid.cells, generated):
                response = response_text(lm.tokenizer, tokens, decoding)
                cells[cell.name] = {"response": response, "answer": parse_yes_no(response),
                                    "correct": bool(is_correct(response, doc.fields["answer"]))}
            logs[task].add({"doc_id": doc.doc_id, "N": sizes[task], "fingerprint": doc.fingerprint, "cells": cells})
            bar.update(len(grid.cells))
    bar.close()
    grid.notes += [f"full forward per cell ({why})" for why in sorted(fallback)]
    if world > 1:  # every process's outcomes are on disk before any process reads them all
        lm.accelerator.wait_for_everyone()
        logs = {task: merged_log(spec.folder, task) for task in spec.tasks}
    return grid, logs, settings


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the process count of an ``accelerate launch`` (0 and 1 alone)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def merged_log(folder: Path, task: str) -> OutcomeLog:
    """Every process's finished documents of `task` (read only): ``<task>.jsonl`` and ``<task>.rank*.jsonl``."""
    outcomes = Path(folder) / "outcomes"
    merged = OutcomeLog(outcomes / f"{task}.jsonl", read_only=True)
    for path in sorted(outcomes.glob(f"{task}.rank*.jsonl")):
        merged.done.update(OutcomeLog(path, read_only=True).done)
    return merged


def _open_log(folder: Path, task: str, rank: int, world: int) -> OutcomeLog:
    """This process's log of `task`, knowing every document any process finished (a resume may
    run with another process count)."""
    own = Path(folder) / "outcomes" / (f"{task}.jsonl" if world == 1 else f"{task}.rank{rank}.jsonl")
    log = OutcomeLog(own)
    log.done.update({d: row for d, row in merged_log(folder, task).done.items() if d not in log.done})
    return log


def _refuse_changed_documents(folder: Path, task: str, instances, log: OutcomeLog) -> None:
    """A resumed run's finished documents must be the dataset's documents as they are now."""
    from harness.lm_eval_plugin.documents import doc_input

    for instance in instances:
        row = log.done.get(instance.doc_id)
        if row is not None and row["fingerprint"] != doc_input(instance).fingerprint:
            raise UserInputError(f"{folder}: {task} doc {instance.doc_id} changed since it was run "
                                 "(its fingerprint differs); choose another --output_path")
