"""Build the ICIR-MCQ folder: sample, write parquet + card, validate, then publish atomically.

The folder is what ``datasets.load_dataset(OUT, "n5")`` reads and what can be uploaded as a Hub
dataset repo::

    OUT/README.md                         dataset card (YAML configs + features, license, citation)
    OUT/n5/test-00000-of-00001.parquet    one shard per config
    OUT/n6/test-00000-of-00001.parquet
    OUT/build_info.json                   inputs, seed and per-category report (read by the validator)
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

from icir_common import UserInputError, atomic_output_dir
from icir_mcq.coco_index import load_coco
from icir_mcq.features import FIELD_DOCS, icir_features
from icir_mcq.hub_folder import render_card, write_config
from icir_mcq.images import with_images
from icir_mcq.mmniah import load_contexts, source_inputs
from icir_mcq.sampling import (
    EVAL_DIVISOR,
    PASSAGE_RULES,
    CategoryReport,
    check_passage_rule,
    check_sample_counts,
    sample_configs,
)
from icir_mcq.validate import BUILD_INFO, ValidationFailed, validate_icir_mcq

CARD_TEMPLATE = "icir_mcq.md"
BUILD_KIND = "icir_mcq"  # the kind in the folder's icir_common.BUILD_MARKER
CARD_METADATA = {
    "pretty_name": "ICIR-MCQ",
    "license": "cc-by-4.0",
    "language": ["en"],
    "task_categories": ["visual-question-answering", "multiple-choice"],
    "tags": ["multi-image", "in-context-image-retrieval", "interpretability"],
}


@dataclasses.dataclass(frozen=True)
class McqBuildSummary:
    """What a build wrote: rows and ``eval`` rows per config, the per-category reports, and
    wall-clock seconds per stage (``load annotations``, ``sampling``, ``writing``, ``validation``)."""

    out: Path
    rows: dict[str, int]
    eval_rows: dict[str, int]
    reports: dict[str, list[CategoryReport]]
    seconds: dict[str, float]


def _category_table(reports: dict[str, list[CategoryReport]]) -> str:
    configs = list(reports)
    header = "| category | id | annotated images | captioned images | naming captions | " + " | ".join(
        f"{c} samples" for c in configs) + " |"
    lines = [header, "|" + "---|" * (5 + len(configs))]
    for rows in zip(*reports.values()):
        first = rows[0]
        cells = [str(r.samples) if r.skipped_because is None else f"skipped: {r.skipped_because}" for r in rows]
        lines.append(f"| {first.name} | {first.category_id} | {first.annotated_images} | {first.captioned_images} "
                     f"| {first.matching_captions} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The card's construction step for each passage rule (icir_mcq.sampling module docstring).
PASSAGE_RULE_NOTES = {
    "fixed": "N+1 passages are the first N+1 passages of one MM-NIAH context (text between `<image>` "
             "placeholders, empty segments skipped), kept as they are (passage rule `fixed`, §3.2: the "
             "passages are kept fixed, so they are independent of the target image and the options by "
             "construction).",
    "category_free": "N+1 passages are taken in order, at a seeded start, from the passages of one MM-NIAH "
                     "context (text between `<image>` placeholders, empty segments skipped) that do not name "
                     "the category (passage rule `category_free`, an option: the paper keeps each context's "
                     "passages fixed, §3.2).",
}


def _card_context(records: dict[str, list[dict]], reports, seed: int, samples: int, embed_images: bool,
                  max_passage_chars: int | None, passages: str) -> dict[str, str]:
    config_rows = "\n".join(
        f"| {config} | {rows[0]['n_choices']} | {len(rows)} | {sum(r['probe_split'] == 'eval' for r in rows)} |"
        for config, rows in records.items())
    return {
        "config_table": "| config | N images | rows | probe_split eval |\n|---|---|---|---|\n" + config_rows,
        "field_table": "\n".join(f"| `{name}` | {doc} |" for name, doc in FIELD_DOCS.items()),
        "category_table": _category_table(reports),
        "seed": str(seed),
        "samples": str(samples),
        "images_note": "embedded JPEG bytes" if embed_images else
        "file names only (`--no-embed-images`): resolve `image_files` against your COCO 2017 root",
        "passage_note": ("full passages" if max_passage_chars is None else
                         f"passages cut to at most {max_passage_chars} characters at a word boundary")
        + f", passage rule `{passages}`",
        "passage_rule_note": PASSAGE_RULE_NOTES[passages],
    }


def build_icir_mcq(
    coco_root: str | Path,
    mmniah_files: Sequence[str | Path],
    out: str | Path,
    seed: int = 0,
    configs: Sequence[str] = ("n5", "n6"),
    samples: int = 3000,
    embed_images: bool = True,
    max_passage_chars: int | None = None,
    categories: Sequence[str] | None = None,
    overwrite: bool = False,
    passages: str = PASSAGE_RULES[0],
) -> McqBuildSummary:
    """Build ICIR-MCQ (paper §3.2, App. B) from COCO 2017 and MM-NIAH into the folder ``out``.

    ``samples`` rows per config (a multiple of lcm(N, 4), exactly balanced positions and letters);
    ``samples // 5`` rows per config get ``probe_split == "eval"`` (600 of 3,000, 1,200 over n5 +
    n6 as in §5.1), the rest ``"train"``. ``categories`` restricts the queried categories (each
    must be servable); by default every category that can be served is used and the others are
    reported. ``passages`` is the passage rule (`icir_mcq.sampling`): ``fixed`` (the paper's,
    §3.2: each context's first N+1 passages as they are) or ``category_free`` (a named option:
    a seeded run of N+1 passages that do not name the category); it is recorded in
    ``build_info.json`` and the card. Same inputs and ``seed`` give byte-identical parquet files.

    The folder is built in a temporary sibling, re-checked by :func:`validate_icir_mcq` (which
    re-reads COCO and MM-NIAH), and renamed to ``out`` only if there is no violation.

    Raises:
        UserInputError: bad options or input files (see ``source_inputs``, ``load_coco``,
            ``load_contexts``, ``sample_configs``, ``read_image_bytes``); ``out`` exists without
            ``overwrite``.
        ValidationFailed: the built folder violates a constraint; nothing is published.
    """
    configs = list(dict.fromkeys(configs))
    if not configs:
        raise UserInputError("--configs is empty; give e.g. n5,n6")
    check_sample_counts(configs, samples)
    check_passage_rule(passages)
    if categories is not None and not list(categories):
        raise UserInputError("--categories is empty; give comma-separated COCO category names, or leave the option "
                             "out to use every servable category")
    coco_root, mmniah_files, inputs = source_inputs(coco_root, mmniah_files, seed, max_passage_chars)
    seconds: dict[str, float] = {}
    with atomic_output_dir(out, overwrite=overwrite, kind=BUILD_KIND, inputs=inputs) as tmp:
        start = time.perf_counter()
        index = load_coco(coco_root)
        contexts = load_contexts(mmniah_files)
        seconds["load annotations"] = time.perf_counter() - start

        start = time.perf_counter()
        records, reports = sample_configs(index, contexts, configs, samples, seed,
                                          list(categories) if categories else None, max_passage_chars, passages)
        seconds["sampling"] = time.perf_counter() - start

        start = time.perf_counter()
        features = icir_features(embed_images)
        for config in configs:
            write_config(tmp, config, with_images(records[config], coco_root, embed_images), features)
        info = {
            "builder": "icir_mcq.build.build_icir_mcq",
            "coco_root": str(coco_root),
            "mmniah_files": [str(f) for f in mmniah_files],
            "seed": seed,
            "configs": configs,
            "samples": samples,
            "eval_rows_per_config": samples // EVAL_DIVISOR,
            "embed_images": embed_images,
            "max_passage_chars": max_passage_chars,
            "passages": passages,
            "categories": list(categories) if categories else None,
            "category_report": {c: [dataclasses.asdict(r) for r in rows] for c, rows in reports.items()},
        }
        (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        card = render_card(CARD_TEMPLATE, {c: features for c in configs},
                           _card_context(records, reports, seed, samples, embed_images, max_passage_chars, passages),
                           metadata=CARD_METADATA)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        seconds["writing"] = time.perf_counter() - start

        start = time.perf_counter()
        violations = validate_icir_mcq(tmp)
        seconds["validation"] = time.perf_counter() - start
        if violations:
            raise ValidationFailed(violations)
    return McqBuildSummary(
        out=Path(out),
        rows={c: len(records[c]) for c in configs},
        eval_rows={c: sum(r["probe_split"] == "eval" for r in records[c]) for c in configs},
        reports=reports,
        seconds=seconds,
    )
