"""The declared evaluation protocol ``icir-heads/2`` and the ``protocol.json`` every run writes.

``icir-heads/2`` is the paper's settings as this package's defaults (docs/protocol.md lists each
with its source): heads ranked by the Eq. 3 proxy (App. A; the exact score is reported beside
it), read at the cattok (§3.2), per-family image inputs (App. A, App. J.1), writer probes of
App. D, top-K votes at K in {1, 3, 5, 10, 20, 30} (App. H), greedy decoding stopped at the first
yes/no (App. A), every document of each dataset (no ``--limit``).

`protocol_record` gathers what a number depends on: every setting, the versions of this package
and of transformers, torch, lm-eval and datasets, the model's identity (Hub id + commit, or a
sha256 over its weight files), dtype and attention kernel, each dataset's fingerprint (a hash of
the evaluated records), and the visual tokens per image; `deviations` lists every setting that
is off the protocol, and a run with any says so in its table header and in the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.constants import VOTE_KS
from harness.model_names import model_name
from icir_common import UserInputError

if TYPE_CHECKING:
    from harness.metrics.writer import WriterProbeConfig

PROTOCOL = "icir-heads/2"
PROTOCOL_FILE = "protocol.json"
PROTOCOL_POINTER_MODE = "proxy"
PROTOCOL_READOUT = "cattok"
PACKAGES = ("image-retrieval-heads", "transformers", "torch", "lm_eval", "datasets")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# App. D: "the Qwen3-VL-8B probe uses batch 128". Qwen3-VL-8B's architecture and language-model
# shape (its config.json; bench/gpu_shapes.py builds the same shape), in `architecture_shape`'s keys.
# Qwen3-VL-4B has the same architecture, layers and heads and a hidden size of 2560.
QWEN3_VL_8B_SHAPE = {"architecture": "Qwen3VLForConditionalGeneration", "layers": 36, "heads": 32,
                     "hidden_size": 4096}
QWEN3_VL_8B_WRITER_BATCH = 128


def cache_dir() -> Path:
    """Where this package caches what is slow to recompute: ``$ICIR_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/image-retrieval-heads`` (``~/.cache/...``)."""
    if os.environ.get("ICIR_CACHE_DIR"):
        return Path(os.environ["ICIR_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "image-retrieval-heads"


def _cached_file_sha256(path: Path, cache: dict) -> str:
    """A file's sha256, reused from `cache` while its resolved path, size and mtime are unchanged."""
    stat = path.stat()
    key = str(path.resolve())
    entry = cache.get(key)
    if entry and entry["size"] == stat.st_size and entry["mtime_ns"] == stat.st_mtime_ns:
        return entry["sha256"]
    from harness.activation_store import file_sha256

    cache[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}
    return cache[key]["sha256"]


def weights_sha256(folder: str | Path) -> str:
    """sha256 over a model folder's weight files: the lines ``<name> <sha256 of the file>``, in name order.

    Each file's sha256 is cached by resolved path, size and mtime (`cache_dir`), so a rerun does
    not rehash gigabytes; new weights at the same path change size or mtime and are rehashed.

    Raises:
        FileNotFoundError: the folder holds no weight file.
    """
    from icir_common import write_json

    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{folder} holds no weight file ({', '.join(WEIGHT_SUFFIXES)})")
    cache_file = cache_dir() / "weights_sha256.json"
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    lines = "".join(f"{path.name} {_cached_file_sha256(path, cache)}\n" for path in files)
    with contextlib.suppress(OSError):  # a read-only home only costs the next run a rehash
        write_json(cache_file, cache)
    return hashlib.sha256(lines.encode()).hexdigest()


def model_identity(pretrained: str, revision: str | None, commit: str | None) -> dict[str, Any]:
    """``{"pretrained", "source", "revision", "commit", "weights_sha256"}`` of a loaded model.

    A local folder is identified by `weights_sha256`; a Hub id by its resolved commit (the
    ``_commit_hash`` transformers records when it loads from the Hub).
    """
    local = Path(pretrained).expanduser()
    if local.is_dir():
        return {"pretrained": str(local.resolve()), "source": "local", "revision": revision, "commit": None,
                "weights_sha256": weights_sha256(local)}
    return {"pretrained": pretrained, "source": "hub", "revision": revision, "commit": commit, "weights_sha256": None}


def text_sha256(text: str | None) -> str | None:
    """sha256 of a text (the chat template), None for None."""
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def versions() -> dict[str, str | None]:
    """Installed versions of this package and the libraries a number depends on."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def dataset_fingerprint(fingerprints: Sequence[str]) -> str:
    """sha256 over the evaluated documents' record fingerprints (prompt, span, pixels), in doc order."""
    return hashlib.sha256("\n".join(fingerprints).encode()).hexdigest()


def token_summary(counts: Sequence[int]) -> dict[str, float] | None:
    """``{"images", "min", "mean", "max"}`` of visual tokens per image, None without images."""
    if not counts:
        return None
    return {"images": len(counts), "min": int(min(counts)), "mean": float(sum(counts) / len(counts)),
            "max": int(max(counts))}


def merged_token_summary(summaries: Sequence[Mapping[str, float] | None]) -> dict[str, float] | None:
    """`token_summary` of several tasks' images together (a pooled group)."""
    parts = [s for s in summaries if s]
    if not parts:
        return None
    images = sum(s["images"] for s in parts)
    return {"images": images, "min": min(s["min"] for s in parts),
            "mean": sum(s["mean"] * s["images"] for s in parts) / images, "max": max(s["max"] for s in parts)}


def architecture_shape(model: Any) -> dict[str, Any]:
    """``{"architecture", "layers", "heads", "hidden_size", "attention_layers"}`` of a loaded
    transformers model: the identity its capture settings record and `protocol_writer_config`
    decides from.

    ``architecture`` is the config's first ``architectures`` entry (a Hub or local checkpoint's),
    else the model's class name (a model built from a config); ``heads`` and ``hidden_size`` are
    its language model's (``get_text_config()``); ``layers`` is the number of attention layers the
    capture's grid holds and ``attention_layers`` their model layer numbers
    (`harness.capture.adapters.attention_layers`: all layers but a hybrid decoder's linear-attention
    ones), so grid row l of a head ``LxxHyy`` is model layer ``attention_layers[l]``.
    """
    from harness.capture.adapters import attention_layers, resolve_adapter

    text = model.config.get_text_config()
    layers = attention_layers(model, resolve_adapter(model))
    return {
        "architecture": (getattr(model.config, "architectures", None) or [type(model).__name__])[0],
        "layers": len(layers),
        "heads": int(text.num_attention_heads),
        "hidden_size": int(text.hidden_size),
        "attention_layers": layers,
    }


def protocol_writer_config(shape: Mapping[str, Any]) -> tuple[WriterProbeConfig, str]:
    """The protocol's writer-probe settings for the model `shape`, and the reason, as one line.

    App. D: batch 256 (the selected configuration), and "the Qwen3-VL-8B probe uses batch 128".
    So a model of Qwen3-VL-8B's architecture and language-model shape (`QWEN3_VL_8B_SHAPE`) gets
    batch 128 and every other model batch 256, both on the protocol; the other settings are
    `WriterProbeConfig`'s defaults. The analysis (`harness.analyze.run_spec`) trains with these
    unless the run's arguments change them, and `deviations` names what a run changed from them.

    Args:
        shape: what a run records about its model: capture settings or `architecture_shape` (the keys
            ``architecture``, ``layers``, ``heads``, ``hidden_size``; others are ignored).

    Raises:
        UserInputError: `shape` has Qwen3-VL-8B's architecture, layers and heads but records no
            hidden size (a store captured before ``hidden_size`` was recorded), so Qwen3-VL-8B
            cannot be told from Qwen3-VL-4B.
    """
    from harness.metrics.writer import WriterProbeConfig  # needs torch, which the rest of this module does not

    identity = {key: shape.get(key) for key in QWEN3_VL_8B_SHAPE}
    like_8b = all(identity[key] == QWEN3_VL_8B_SHAPE[key] for key in ("architecture", "layers", "heads"))
    if identity["hidden_size"] is None and like_8b:
        raise UserInputError(
            "the capture settings of this Qwen3-VL model (36 layers x 32 heads) record no hidden_size, so App. D's "
            "writer batch (128 for Qwen3-VL-8B, 256 otherwise) cannot be decided; capture again into a new store"
        )
    if identity == QWEN3_VL_8B_SHAPE:
        return (WriterProbeConfig(batch_size=QWEN3_VL_8B_WRITER_BATCH),
                f"App. D: the Qwen3-VL-8B probe uses batch {QWEN3_VL_8B_WRITER_BATCH} (the model is "
                f"{identity['architecture']}, {identity['layers']} layers x {identity['heads']} heads, hidden size "
                f"{identity['hidden_size']})")
    default = WriterProbeConfig()
    return default, (f"App. D: batch {default.batch_size} (the model is not of Qwen3-VL-8B's shape, whose probe "
                     f"uses batch {QWEN3_VL_8B_WRITER_BATCH})")


def analysis_writer_config(model_args: Mapping[str, Any], capture: Mapping[str, Any]) -> WriterProbeConfig:
    """The writer-probe settings the analysis trains with: `protocol_writer_config` of the run's
    model (its capture settings), changed by the run's ``writer_*`` arguments
    (`WriterProbeConfig.from_arguments`).

    Raises:
        UserInputError: see `protocol_writer_config` and `WriterProbeConfig.from_arguments`.
    """
    from harness.metrics.writer import WriterProbeConfig

    return WriterProbeConfig.from_arguments(model_args, protocol_writer_config(capture)[0])


def protocol_settings(capture: Mapping[str, Any], model_args: Mapping[str, Any], config: Mapping[str, Any],
                      writer_config: WriterProbeConfig) -> dict:
    """Every setting a run's numbers depend on: capture settings, analysis settings (the writer
    probes' as the analysis stage parsed them), lm-eval's config.

    ``writer_protocol`` records the protocol's writer settings for this model
    (`protocol_writer_config`): the model shape they were decided from, the batch size and why.

    Raises:
        UserInputError: see `protocol_writer_config`.
    """
    limit = config.get("limit")  # lm-eval keeps a document count as a float
    limit = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
    shape = {key: capture.get(key) for key in QWEN3_VL_8B_SHAPE}
    protocol_writer, reason = protocol_writer_config(shape)
    return {
        "pointer_mode": model_args.get("pointer_mode", PROTOCOL_POINTER_MODE),
        "pointer_scores": {"exact": "Eq. 1 (the model's attention rows)", "eq3": f"Eq. 3 ({capture.get('eq3')})"},
        "readout": list(capture.get("readout", [])),
        "image_inputs": capture.get("image_inputs"),
        "writer_config": dataclasses.asdict(writer_config),
        "writer_protocol": {"model": shape, "batch_size": protocol_writer.batch_size, "reason": reason},
        "vote_ks": list(VOTE_KS),
        "heads_ranking": model_args.get("heads_ranking"),
        "writer_probes": model_args.get("writer_probes"),
        "chat_template_sha256": capture.get("chat_template_sha256"),
        "limit": limit,
        "seeds": {key: config.get(key) for key in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")},
        "gen_kwargs": config.get("gen_kwargs"),
    }


def deviations(settings: Mapping[str, Any]) -> list[str]:
    """Each setting of `settings` (`protocol_settings`) that differs from `PROTOCOL`, as a line."""
    found = []
    if settings["pointer_mode"] != PROTOCOL_POINTER_MODE:
        found.append(f"pointer_mode {settings['pointer_mode']} (protocol: {PROTOCOL_POINTER_MODE})")
    if settings["readout"][:1] != [PROTOCOL_READOUT]:
        found.append(f"reported readout {settings['readout'][:1]} (protocol: {PROTOCOL_READOUT})")
    images = settings.get("image_inputs") or {}
    if images.get("derived"):
        found.append(f"image inputs of the {images.get('family')} family: its processor's defaults, tiling off "
                     f"(protocol: a family's own input of the icir-heads table, App. A, App. J.1)")
    if images.get("conformance_tested") is False:
        found.append(f"model type {images.get('family')} is not conformance-tested (untested_architecture=true; "
                     f"protocol: a model type docs/models.md lists as supported)")
    if images.get("side_source") in ("user", "model"):
        found.append(f"image side {images.get('side')} px set by the {images['side_source']} "
                     f"(protocol: the {images.get('family')} family's own)")
    expected, reason = protocol_writer_config(settings["writer_protocol"]["model"])
    protocol_writer = dataclasses.asdict(expected)
    changed = {k: v for k, v in settings["writer_config"].items() if protocol_writer.get(k) != v}
    if changed:
        why = f"; {reason}" if "batch_size" in changed else ""
        found.append(f"writer probes {changed} (protocol: {({k: protocol_writer.get(k) for k in changed})}{why})")
    if settings["limit"] is not None:
        found.append(f"--limit {settings['limit']} (protocol: every document)")
    if settings["gen_kwargs"]:
        found.append(f"--gen_kwargs {settings['gen_kwargs']} (protocol: the tasks' own generation settings)")
    return found


def protocol_record(capture: Mapping[str, Any], model_args: Mapping[str, Any], results: Mapping[str, Any],
                    datasets: Mapping[str, Any], writer_config: WriterProbeConfig) -> dict:
    """The ``protocol.json`` of a run (module docstring).

    Args:
        capture: the activation store's capture settings (model identity, dtype, kernel, image
            inputs, readout positions, chat-template hash).
        model_args: the run's ``hf-multimodal-heads`` arguments.
        results: lm-eval's results dict (its ``config``: limit, seeds, generation kwargs).
        datasets: ``{task: {"documents", "fingerprint", "visual_tokens_per_image"}}``.
        writer_config: the writer-probe settings the analysis stage used.
    """
    settings = protocol_settings(capture, model_args, results.get("config", {}), writer_config)
    off = deviations(settings)
    return {
        "protocol": PROTOCOL,
        "on_protocol": not off,
        "deviations": off,
        "settings": settings,
        "model": {
            "name": model_name(capture.get("model") or ""),
            **(capture.get("identity") or {}),
            "dtype": capture.get("dtype"),
            "attn_implementation": capture.get("attn_implementation"),
            "n_layers": capture.get("layers"),
            "attention_layers": capture.get("attention_layers"),
            "n_heads": capture.get("heads"),
            "hidden_size": capture.get("hidden_size"),
            "architecture": capture.get("architecture"),
            "model_type": capture.get("model_type"),
            "n_parameters": capture.get("n_parameters"),
        },
        "versions": versions(),
        "datasets": dict(datasets),
    }


def header(record: Mapping[str, Any]) -> str:
    """One line for the table header: the protocol, and what is off it."""
    if record["on_protocol"]:
        return f"protocol {record['protocol']} (the paper's settings)"
    return f"protocol {record['protocol']}, OFF-PROTOCOL: " + "; ".join(record["deviations"])


def write_protocol(folder: str | Path, record: Mapping[str, Any]) -> Path:
    """Write `record` as ``folder/protocol.json`` (atomically); return the path."""
    from icir_common import write_json

    path = Path(folder) / PROTOCOL_FILE
    write_json(path, json.loads(json.dumps(record)))
    return path
