"""Read MM-NIAH ``retrieval-image.jsonl`` files and cut each context into its text passages;
`source_inputs` checks the COCO + MM-NIAH sources and options the builders share.

Only the text is kept (``docs/formats.md``): a context's passages are the segments between its
``<image>`` placeholders, stripped, with empty segments skipped, in document order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from icir_common import UserInputError
from icir_mcq.prompt import IMAGE_PLACEHOLDER


@dataclass(frozen=True)
class Context:
    """One MM-NIAH document: ``source_id`` is ``"<label>:<id>"`` (label from :func:`source_label`)
    and ``passages`` its non-empty text segments in order."""

    source_id: str
    passages: tuple[str, ...]


def source_label(path: Path) -> str:
    """Short name of an MM-NIAH file for ``mmniah_source_id``: the dataset folder above
    ``annotations/`` (``mm_niah_val``, ``mm_niah_test``), else the file name without suffix."""
    path = Path(path)
    return path.parent.parent.name if path.parent.name == "annotations" else path.stem


def split_passages(context: str) -> tuple[str, ...]:
    """The stripped, non-empty segments of ``context`` between ``<image>`` placeholders."""
    return tuple(segment.strip() for segment in context.split(IMAGE_PLACEHOLDER) if segment.strip())


def load_contexts(files: list[str | Path]) -> list[Context]:
    """All contexts of the given ``retrieval-image.jsonl`` files, in file then line order.

    Raises:
        UserInputError: a file is missing or unreadable, a line is not a JSON object with an
            int ``id`` and a str ``context`` (named by file and line number), an id repeats
            within a file, or two files share a label.
    """
    contexts: list[Context] = []
    labels: dict[str, Path] = {}
    for file in files:
        path = Path(file)
        label = source_label(path)
        if label in labels:
            raise UserInputError(f"MM-NIAH files {labels[label]} and {path} share the label {label!r}; "
                                 "pass files from different dataset folders")
        labels[label] = path
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise UserInputError(f"cannot read MM-NIAH file {path}: {err}") from err
        seen: set[int] = set()
        for line_no, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserInputError(f"{path}:{line_no}: malformed MM-NIAH record, not JSON ({err})") from err
            record_id = record.get("id") if isinstance(record, dict) else None
            if not isinstance(record_id, int) or isinstance(record_id, bool) or not isinstance(record.get("context"), str):
                raise UserInputError(f"{path}:{line_no}: malformed MM-NIAH record, needs an int 'id' and a str 'context'")
            if record_id in seen:
                raise UserInputError(f"{path}:{line_no}: MM-NIAH id {record_id} repeats in this file")
            seen.add(record_id)
            contexts.append(Context(f"{label}:{record_id}", split_passages(record["context"])))
    return contexts


def truncate_passage(passage: str, max_chars: int | None) -> str:
    """``passage`` cut to at most ``max_chars`` characters, at the last whitespace when there is
    one (so no word is split), else hard; unchanged when ``max_chars`` is None or not exceeded."""
    if max_chars is None or len(passage) <= max_chars:
        return passage
    cut = passage[: max_chars + 1]
    space = max((cut.rfind(c) for c in " \n\t"), default=-1)
    return (cut[:space].rstrip() if space > 0 else "") or passage[:max_chars]


def source_inputs(coco_root: str | Path, mmniah_files: Sequence[str | Path], seed: int,
                  max_passage_chars: int | None) -> tuple[Path, list[Path], list[tuple[str, Path]]]:
    """Check the options every COCO + MM-NIAH builder shares and resolve its sources.

    Returns:
        ``(coco_root, mmniah_files, inputs)``: the resolved paths, and the ``(option, folder)``
        inputs `icir_common.atomic_output_dir` keeps ``--out`` away from (the COCO root and each
        MM-NIAH file's folder).

    Raises:
        UserInputError: a negative seed, ``max_passage_chars`` below 1, no MM-NIAH file, or one
            that does not exist.
    """
    if seed < 0:
        raise UserInputError(f"--seed must be >= 0, got {seed}")
    if max_passage_chars is not None and max_passage_chars < 1:
        raise UserInputError(f"--max-passage-chars must be at least 1, got {max_passage_chars}")
    if not mmniah_files:
        raise UserInputError("give at least one MM-NIAH retrieval-image.jsonl file with --mmniah")
    coco_root = Path(coco_root).resolve()
    files = [Path(f).resolve() for f in mmniah_files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise UserInputError(f"MM-NIAH file {missing[0]} not found; pass its retrieval-image.jsonl with --mmniah")
    return coco_root, files, [("--coco", coco_root)] + [("--mmniah", f.parent) for f in files]
