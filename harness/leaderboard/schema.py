"""The submission manifest: its JSON Schema, the file caps and the accepted suffixes."""

from __future__ import annotations

from typing import Any

from harness.protocol import PROTOCOL

SCHEMA_VERSION = "icir-submission/1"
MANIFEST = "submission.json"
ALLOWED_SUFFIXES = (".json", ".jsonl", ".safetensors")
UNIT_SUFFIXES = (".json", ".jsonl", ".safetensors")
MAX_FILE_BYTES = 2 * 1024**3  # one file
MAX_TOTAL_BYTES = 8 * 1024**3  # a whole submission (archive members too)
MAX_FILES = 10_000
DEFAULT_PROTOCOLS = (PROTOCOL,)
# Protocols no leaderboard accepts, whatever its config lists, and why (a column never mixes two
# definitions of one name); the remedy is one rerun of the analysis stage, no model needed.
RETIRED_PROTOCOLS = {
    "icir-heads/1": "its pointer_r1 is the exact score (Eq. 1), where icir-heads/2's is the protocol's Eq. 3 "
                    "score; run icir analyze RUN --overwrite with this version, then icir submit again",
}
STAGE_KEYS = ("heads_ranking", "writer_probes")  # a transfer stage's inputs (§4.3), per unit
TOLERANCE = 1e-9

_SHA = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_NULLABLE_STR = {"type": ["string", "null"]}
# A file of the run's inputs copied into the submission (the transferred ranking, the probes' settings).
_COPIED_FILE = {
    "type": "object",
    "required": ["file", "source"],
    "additionalProperties": False,
    "properties": {"file": {"type": "string"}, "source": {"type": "string"}, "unit": {"type": "string"}},
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ICIR leaderboard submission manifest",
    "type": "object",
    "required": ["schema_version", "model", "protocol", "versions", "tasks", "units", "datasets", "results",
                 "inputs", "files"],
    "additionalProperties": False,
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "model": {
            "type": "object",
            "required": ["id", "name", "source", "revision", "commit", "weights_sha256", "dtype", "attn_implementation",
                         "n_layers", "n_heads", "architecture", "model_type", "n_parameters"],
            "additionalProperties": False,
            "properties": {
                "id": {"type": "string", "minLength": 1},
                "name": {"type": "string", "minLength": 1, "pattern": "^(?!\\.\\.?$)[^/\\\\]+$"},
                "source": {"enum": ["local", "hub"]},
                "revision": _NULLABLE_STR,
                "commit": _NULLABLE_STR,
                "weights_sha256": {"oneOf": [_SHA, {"type": "null"}]},
                "dtype": {"type": "string"},
                "attn_implementation": _NULLABLE_STR,
                "n_layers": {"type": "integer", "minimum": 1},
                "n_heads": {"type": "integer", "minimum": 1},
                "architecture": {"type": "string", "minLength": 1},
                "model_type": {"type": "string", "minLength": 1},
                "n_parameters": {"type": "integer", "minimum": 1},
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
        "inputs": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {key: _COPIED_FILE for key in ("heads_ranking", "writer_probes")},
            },
        },
        "ablation": {
            "type": "object",
            "required": ["unit", "cells", "grid", "protocol", "outcomes"],
            "additionalProperties": False,
            "properties": {"unit": {"type": "string"}, "cells": {"type": "string"}, "grid": {"type": "string"},
                           "protocol": {"type": "string"},
                           "outcomes": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
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
