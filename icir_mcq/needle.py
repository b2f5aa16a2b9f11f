"""The text needle-in-a-haystack probe of App. K, built from the same sources as ICIR-MCQ.

Each record is a long interleaved image-text context: the passages of one MM-NIAH context (as
ICIR-MCQ cuts them, `mmniah.load_contexts`) with a COCO image between consecutive passages. The
images are filler, none is a retrieval target. A numeric needle sentence (`NEEDLE`) is inserted at
a seeded sentence boundary of a seeded passage, and the question after the context asks for the
number (`QUESTION`). Fields (`NEEDLE_FIELDS`): ``needle_char_span`` is the half-open character
span of the needle sentence in ``prompt``, the tokens whose attention mass scores a head (App. K);
``cattok_char_span`` is the span of the question's last word "number", the query the model class
reads the run's readout positions from; ``answer`` is the number as digits.

One config, ``needle``, of ``samples`` rows. Same inputs and seed give byte-identical files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np

from icir_common import IMAGE_PLACEHOLDER, UserInputError, atomic_output_dir
from icir_mcq.coco_index import load_coco
from icir_mcq.hub_folder import render_card, write_config
from icir_mcq.images import with_images
from icir_mcq.mmniah import load_contexts, source_inputs, truncate_passage

BUILD_KIND = "text-needle"
CONFIG = "needle"
CARD_TEMPLATE = "text_needle.md"
BUILD_INFO = "build_info.json"
NEEDLE = "The special magic number is {number}."
QUESTION = "What is the special magic number mentioned in the text above? Answer with the number only."
QUERY_WORD = "number"  # the question's last word: its span is the record's cattok_char_span
NUMBER_DIGITS = 7
CARD_METADATA = {
    "pretty_name": "ICIR text needle (App. K)",
    "license": "cc-by-4.0",
    "language": ["en"],
    "task_categories": ["visual-question-answering"],
    "tags": ["multi-image", "needle-in-a-haystack", "interpretability"],
}
NEEDLE_FIELDS = {
    "id": "sample id, 'needle-<row>'",
    "images": "the filler images, context order (embedded JPEG bytes, or only the relative path)",
    "image_files": "image paths relative to the COCO root, context order",
    "passages": "the MM-NIAH passages, document order, the needle sentence inside one of them",
    "needle": "the needle sentence",
    "needle_passage": "0-based index of the passage that holds the needle",
    "needle_char_span": "[start, end) of the needle sentence in prompt",
    "answer": "the needle's number, as digits",
    "prompt": "rendered prompt with one literal <image> placeholder per image, then the question",
    "cattok_char_span": "[start, end) of the question's last word 'number' in prompt",
    "mmniah_source_id": "'<mm_niah folder>:<id>' of the context the passages come from",
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def needle_features(embed_images: bool) -> datasets.Features:
    """Features of one record, in the order of `NEEDLE_FIELDS`."""
    string, span = datasets.Value("string"), datasets.List(datasets.Value("int32"), length=2)
    return datasets.Features({
        "id": string,
        "images": datasets.List(datasets.Image(decode=embed_images)),
        "image_files": datasets.List(string),
        "passages": datasets.List(string),
        "needle": string,
        "needle_passage": datasets.Value("int32"),
        "needle_char_span": span,
        "answer": string,
        "prompt": string,
        "cattok_char_span": span,
        "mmniah_source_id": string,
    })


def sentence_boundaries(passage: str) -> list[int]:
    """Character offsets where a sentence may be inserted: 0, after each sentence end, the end."""
    return sorted({0, len(passage), *(m.end() for m in _SENTENCE_END.finditer(passage))})


def insert_needle(passage: str, needle: str, at: int) -> tuple[str, int]:
    """``passage`` with ``needle`` inserted at character offset `at` (a `sentence_boundaries` value),
    separated by single spaces; and the needle's start offset in the new passage."""
    before, after = passage[:at].rstrip(), passage[at:].lstrip()
    start = len(before) + (1 if before else 0)
    return " ".join(part for part in (before, needle, after) if part), start


def render_needle_prompt(passages: list[str]) -> str:
    """Passages interleaved with ``<image>`` lines (one image between consecutive passages), then the question."""
    lines = [passages[0]]
    for passage in passages[1:]:
        lines += [IMAGE_PLACEHOLDER, passage]
    return "\n".join([*lines, QUESTION])


@dataclass
class NeedleBuildSummary:
    """What a build wrote: rows, images per record, seed."""

    out: Path
    rows: int
    images: int
    seed: int

    def __str__(self) -> str:
        return f"text needle folder {self.out}: {self.rows} rows of {self.images} filler images (seed {self.seed})"


def sample_needles(index, contexts, samples: int, n_images: int, seed: int, max_passage_chars: int | None) -> list[dict]:
    """`samples` records (module docstring) drawn with ``numpy.random.default_rng(seed)``.

    Raises:
        UserInputError: no MM-NIAH context with ``n_images + 1`` passages, or fewer COCO images
            than `n_images`.
    """
    usable = [c for c in contexts if len(c.passages) >= n_images + 1]
    if not usable:
        raise UserInputError(f"no MM-NIAH context has {n_images + 1} passages for {n_images} images; lower --images")
    image_ids = sorted(index.image_files)
    if len(image_ids) < n_images:
        raise UserInputError(f"the COCO root lists {len(image_ids)} images, fewer than --images {n_images}")
    rng = np.random.default_rng(seed)
    records = []
    for row in range(samples):
        context = usable[int(rng.integers(len(usable)))]
        start = int(rng.integers(len(context.passages) - n_images))
        passages = [truncate_passage(p, max_passage_chars) for p in context.passages[start:start + n_images + 1]]
        number = str(int(rng.integers(10 ** (NUMBER_DIGITS - 1), 10 ** NUMBER_DIGITS)))
        needle = NEEDLE.format(number=number)
        holder = int(rng.integers(len(passages)))
        boundaries = sentence_boundaries(passages[holder])
        passages[holder], offset = insert_needle(passages[holder], needle, boundaries[int(rng.integers(len(boundaries)))])
        prompt = render_needle_prompt(passages)
        needle_start = _passage_start(passages, holder) + offset
        files = [index.image_files[image_ids[i]] for i in rng.choice(len(image_ids), n_images, replace=False)]
        query_end = len(prompt) - len(QUESTION) + QUESTION.rindex(QUERY_WORD) + len(QUERY_WORD)
        records.append({
            "id": f"needle-{row:05d}", "images": None, "image_files": files, "passages": passages, "needle": needle,
            "needle_passage": holder, "needle_char_span": [needle_start, needle_start + len(needle)], "answer": number,
            "prompt": prompt, "cattok_char_span": [query_end - len(QUERY_WORD), query_end],
            "mmniah_source_id": context.source_id,
        })
    return records


def _passage_start(passages: list[str], index: int) -> int:
    """Offset in `render_needle_prompt` of passage `index` (passages and image lines joined by newlines)."""
    return sum(len(p) + 1 + len(IMAGE_PLACEHOLDER) + 1 for p in passages[:index])


def build_text_needle(coco_root: str | Path, mmniah_files: list[str | Path], out: str | Path, seed: int = 0,
                      samples: int = 300, n_images: int = 10, embed_images: bool = True,
                      max_passage_chars: int | None = None, overwrite: bool = False) -> NeedleBuildSummary:
    """Build the text needle folder (module docstring) at `out`, atomically.

    Raises:
        UserInputError: bad options or input files (`source_inputs`, `load_coco`, `load_contexts`,
            `sample_needles`), or `out` exists without `overwrite`.
    """
    if samples < 1 or n_images < 1:
        raise UserInputError(f"--samples and --images must be at least 1, got {samples} and {n_images}")
    coco_root, mmniah_files, inputs = source_inputs(coco_root, mmniah_files, seed, max_passage_chars)
    with atomic_output_dir(out, overwrite=overwrite, kind=BUILD_KIND, inputs=inputs) as tmp:
        records = sample_needles(load_coco(coco_root), load_contexts(mmniah_files), samples, n_images, seed,
                                 max_passage_chars)
        features = needle_features(embed_images)
        write_config(tmp, CONFIG, with_images(records, coco_root, embed_images, NEEDLE_FIELDS), features)
        info = {"builder": "icir_mcq.needle.build_text_needle", "coco_root": str(coco_root),
                "mmniah_files": [str(f) for f in mmniah_files], "seed": seed, "samples": samples,
                "images": n_images, "embed_images": embed_images, "max_passage_chars": max_passage_chars}
        (tmp / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        context = {"samples": samples, "images": n_images, "seed": seed, "needle": NEEDLE, "question": QUESTION}
        (tmp / "README.md").write_text(render_card(CARD_TEMPLATE, {CONFIG: features}, context, metadata=CARD_METADATA),
                                       encoding="utf-8")
    return NeedleBuildSummary(Path(out), len(records), n_images, seed)
