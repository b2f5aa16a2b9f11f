"""Build the Visual Haystacks dataset folder: one config per needle kind and haystack size N.

Reads the VHs question files and the COCO images, builds seeded haystacks (App. A), parses each
question into anchor and target object with their character spans (§4.3, §6.1), and writes a
Hub-style folder (parquet + card) that ``datasets.load_dataset(OUT, "single_needle_n10")`` reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from tqdm import tqdm

from icir_common import UserInputError, atomic_output_dir
from icir_mcq.hub_folder import render_card, write_config
from icir_mcq.images import decode_image_file
from vhs_adapter.haystack import DEFAULT_SEED, build_haystack, resolve_image
from vhs_adapter.question_files import (
    DEFAULT_SUBSET,
    SizeFile,
    VHsEntry,
    load_entries,
    resolve_vhs_root,
    select_size_files,
)
from vhs_adapter.questions import TOOLKIT_PREFIX, parse_question, render_vhs_prompt

CARD_TEMPLATE = "vhs.md"
BUILD_KIND = "vhs"  # the kind in the folder's icir_common.BUILD_MARKER


def vhs_features(embed_images: bool) -> datasets.Features:
    """Schema of every config. ``images`` holds the embedded images, or their relative paths
    when ``embed_images`` is False; spans are half-open ``[start, end)`` character offsets into
    ``prompt``."""
    span = datasets.List(datasets.Value("int32"), length=2)
    return datasets.Features(
        {
            "id": datasets.Value("string"),
            "source_index": datasets.Value("int32"),
            "n_images": datasets.Value("int32"),
            "images": datasets.List(datasets.Image() if embed_images else datasets.Value("string")),
            "image_files": datasets.List(datasets.Value("string")),
            "needle_positions": datasets.List(datasets.Value("int32")),
            "question": datasets.Value("string"),
            "answer": datasets.Value("string"),
            "anchor": datasets.Value("string"),
            "target": datasets.Value("string"),
            "anchor_char_span": span,
            "target_char_span": span,
            "cattok_char_span": span,
            "ablation_start_char": datasets.Value("int32"),
            "prompt": datasets.Value("string"),
        }
    )


@dataclass
class VhsBuildSummary:
    """What a build wrote: rows and skipped unparsable questions per config."""

    out: Path
    seed: int
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"Visual Haystacks folder {self.out} (seed {self.seed})"]
        lines += [f"  {config:<22} {rows:>6} rows  {self.skipped[config]:>4} skipped" for config, rows in self.rows.items()]
        return "\n".join(lines)


def build_vhs(
    vhs_dir: Path,
    coco_root: Path,
    out: Path,
    sizes: list[int] | None = None,
    seed: int = DEFAULT_SEED,
    embed_images: bool = True,
    skip_unparsable: bool = False,
    limit: int | None = None,
    subset: str = DEFAULT_SUBSET,
    overwrite: bool = False,
) -> VhsBuildSummary:
    """Build the VHs folder at ``out`` from ``vhs_dir`` (the ``VHs_qa`` folder) and ``coco_root``.

    ``sizes`` picks haystack sizes (1 = the oracle file); by default every size of
    ``question_files.DEFAULT_SIZES`` that has a file. ``limit`` keeps the first ``limit`` entries of each file.
    Questions matching no template raise, or are skipped and counted with ``skip_unparsable``.
    The folder is written to a temporary sibling and renamed, so a failure leaves nothing.

    Raises:
        UserInputError: missing folder, size file or image, an embedded image PIL cannot read,
            malformed file or entry, unparsable
            question (without ``skip_unparsable``), or ``out`` exists without ``overwrite``.
    """
    vhs_dir, coco_root, out = Path(vhs_dir), Path(coco_root), Path(out)
    if not coco_root.is_dir():
        raise UserInputError(f"COCO root {coco_root} is not a folder; point --coco at the folder holding train2017/")
    if limit is not None and limit < 1:
        raise UserInputError(f"--limit must be at least 1, got {limit}")
    vhs_root = resolve_vhs_root(vhs_dir)
    size_files = select_size_files(vhs_root, sizes, subset)
    inputs = [("--coco", coco_root), ("--vhs", vhs_dir), ("--vhs", vhs_root)]
    features = vhs_features(embed_images)
    summary = VhsBuildSummary(out=out, seed=seed)
    with atomic_output_dir(out, overwrite=overwrite, kind=BUILD_KIND, inputs=inputs) as folder:
        for size_file in size_files:
            entries = load_entries(size_file.path, size_file.kind)[:limit]
            skipped: list[int] = []
            records = _records(size_file, entries, coco_root, seed, embed_images, skip_unparsable, skipped)
            summary.rows[size_file.config] = write_config(folder, size_file.config, records, features)
            summary.skipped[size_file.config] = len(skipped)
        card = render_card(
            CARD_TEMPLATE,
            {size_file.config: features for size_file in size_files},
            {
                "summary_table": _summary_table(summary),
                "seed": str(seed),
                "subset": subset,
                "toolkit_prefix": TOOLKIT_PREFIX,
                "images_note": "embedded (the image files' bytes)" if embed_images else "relative paths under the COCO root",
            },
        )
        (folder / "README.md").write_text(card, encoding="utf-8")
    return summary


def _records(
    size_file: SizeFile,
    entries: list[VHsEntry],
    coco_root: Path,
    seed: int,
    embed_images: bool,
    skip_unparsable: bool,
    skipped: list[int],
) -> Iterator[dict]:
    """One record per parsable entry, in file order; appends unparsable indices to ``skipped``."""
    for entry in tqdm(entries, desc=size_file.config, unit="q", leave=False):
        parsed = parse_question(entry.question)
        if parsed is None:
            if skip_unparsable:
                skipped.append(entry.index)
                continue
            raise UserInputError(
                f"{size_file.path}: entry {entry.index}: question {entry.question!r} matches no VHs template; "
                "pass --skip-unparsable to leave such entries out"
            )
        haystack = build_haystack(size_file, entry, seed)
        paths = [resolve_image(coco_root, relative, size_file, entry) for relative in haystack.image_files]
        prompt, offset = render_vhs_prompt(entry.question, len(paths))
        spans = parsed.shifted(offset)
        yield {
            "id": f"{size_file.config}-{entry.index:05d}",
            "source_index": entry.index,
            "n_images": len(paths),
            "images": (
                [{"bytes": decode_image_file(path), "path": rel}
                 for path, rel in zip(paths, haystack.image_files)]
                if embed_images
                else list(haystack.image_files)
            ),
            "image_files": list(haystack.image_files),
            "needle_positions": list(haystack.needle_positions),
            "question": entry.question,
            "answer": entry.answer,
            "anchor": parsed.anchor,
            "target": parsed.target,
            "anchor_char_span": list(spans.anchor_span),
            "target_char_span": list(spans.target_span),
            "cattok_char_span": list(spans.cattok_span),
            "ablation_start_char": spans.anchor_span[0],
            "prompt": prompt,
        }


def _summary_table(summary: VhsBuildSummary) -> str:
    rows = [f"| `{config}` | {rows} | {summary.skipped[config]} |" for config, rows in summary.rows.items()]
    return "\n".join(["| config | rows | skipped (unparsable) |", "| --- | --- | --- |", *rows])
