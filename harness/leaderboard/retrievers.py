"""External-retriever rows of a leaderboard: ``retrievers/<kind>__<model>.json`` (``icir retrievers --leaderboard``).

Each record holds, per VHs task, the documents it was scored on (doc ids, the needle index of
each, the dataset fingerprint) and the retriever's pick in each haystack. The leaderboard shows
its R@1 beside the submissions that evaluated the same documents (equal fingerprint), after
recomputing it from the picks: a record whose stored R@1 is not what its picks give is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.retrievers.encoders import RETRIEVER_KINDS
from harness.retrievers.run import LEADERBOARD_FOLDER
from harness.retrievers.score import recall_at_1
from icir_common import UserInputError, read_json

_INDEX_LIST = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}
RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["protocol", "label", "kind", "model", "settings", "tasks"],
    "properties": {
        "protocol": {"type": "string"},
        "label": {"type": "string", "maxLength": 200},
        "kind": {"enum": list(RETRIEVER_KINDS)},
        "model": {"type": "object", "required": ["pretrained"], "properties": {"pretrained": {"type": "string"}}},
        "settings": {"type": "object"},
        "tasks": {
            "type": "object", "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "required": ["documents", "fingerprint", "doc_ids", "targets", "picks", "r1"],
                "properties": {"documents": {"type": "integer", "minimum": 1},
                               "fingerprint": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                               "doc_ids": _INDEX_LIST, "targets": _INDEX_LIST, "picks": _INDEX_LIST,
                               "r1": {"type": "number", "minimum": 0, "maximum": 1}},
            },
        },
    },
}


def retriever_rows(leaderboard: Path) -> list[dict[str, Any]]:
    """One row per (retriever record, task) of ``leaderboard/retrievers/``, sorted by task and label.

    Row keys: ``retriever`` (its label), ``kind``, ``pretrained``, ``task``, ``documents``,
    ``fingerprint`` and ``r1`` (recomputed from the picks). No folder: no rows.

    Raises:
        UserInputError: a record that is not JSON, fails `RECORD_SCHEMA`, has lists of unequal
            lengths or a document count that is not theirs, or an R@1 its picks do not give,
            naming the file and what to do.
    """
    import jsonschema

    folder = leaderboard / LEADERBOARD_FOLDER
    rows = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = read_json(path)
        try:
            jsonschema.validate(record, RECORD_SCHEMA)
        except jsonschema.ValidationError as err:
            raise UserInputError(f"{path}: not a retriever record ({err.message}); rewrite it with icir retrievers "
                                 "--leaderboard") from None
        for task, part in record["tasks"].items():
            lengths = {len(part[key]) for key in ("doc_ids", "targets", "picks")} | {part["documents"]}
            if len(lengths) != 1:
                raise UserInputError(f"{path} [{task}]: doc_ids, targets, picks and documents disagree in length")
            r1 = recall_at_1(part["picks"], part["targets"])
            if abs(r1 - part["r1"]) > 1e-12:
                raise UserInputError(f"{path} [{task}]: stored R@1 {part['r1']} is not what its picks give ({r1}); "
                                     "rewrite it with icir retrievers --leaderboard")
            rows.append({"retriever": record["label"], "kind": record["kind"],
                         "pretrained": record["model"]["pretrained"], "task": task, "documents": part["documents"],
                         "fingerprint": part["fingerprint"], "r1": r1})
    return sorted(rows, key=lambda row: (row["task"], row["retriever"]))
