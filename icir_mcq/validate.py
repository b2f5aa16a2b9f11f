"""Re-check an ICIR-MCQ folder against every construction rule, from the files alone.

Reads the parquet shards and the card, re-reads COCO (pycocotools) and MM-NIAH from the paths
in ``build_info.json`` (or the ones given), and reports each violated rule of §3.2 / App. B:
record shapes, COCO ids and file names, target uniqueness, option provenance and distinctness,
the passages under the build's passage rule (``fixed``: the named context's first N+1 passages;
``category_free``: passages in order from it, none naming the category), the exact prompt, the
cattok span, exact position/letter balance and the ``probe_split`` size.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from icir_common import UserInputError, inside_root
from icir_mcq.coco_index import CocoIndex, load_coco
from icir_mcq.features import FIELD_DOCS
from icir_mcq.hub_folder import config_data_path
from icir_mcq.images import check_image_bytes
from icir_mcq.mentions import last_mention_span, mentions
from icir_mcq.mmniah import Context, load_contexts, truncate_passage
from icir_mcq.prompt import IMAGE_PLACEHOLDER, LETTERS, option_line_span, render_mcq_prompt
from icir_mcq.sampling import EVAL_DIVISOR, PASSAGE_RULES, n_choices_of, normalise_option

BUILD_INFO = "build_info.json"
# The build_info.json entries the validator reads (all written by icir_mcq.build).
_INFO_KEYS = ("coco_root", "mmniah_files", "configs", "samples", "embed_images", "max_passage_chars")
# A build_info.json written before the passage rule was an option: those builds used this rule.
_RULE_BEFORE_THE_OPTION = "category_free"


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (``config``, ``row``, sample ``id``; None for folder-level) and what."""

    config: str | None
    row: int | None
    sample_id: str | None
    message: str

    def __str__(self) -> str:
        where = self.config or "folder"
        if self.row is not None:
            where += f" row {self.row} ({self.sample_id})"
        return f"{where}: {self.message}"


class ValidationFailed(UserInputError):
    """A built folder broke at least one rule; it was not published. ``violations`` lists them."""

    def __init__(self, violations: list[Violation]):
        self.violations = violations
        shown = "\n  ".join(str(v) for v in violations[:10])
        more = f"\n  ... and {len(violations) - 10} more" if len(violations) > 10 else ""
        super().__init__(f"the built folder has {len(violations)} violation(s); nothing was published:\n  {shown}{more}")


class _ImageDigests:
    """sha256 of COCO image files, read once each (for comparing embedded bytes); every path goes
    through ``icir_common.inside_root`` and every embedded image is fully decoded."""

    def __init__(self, coco_root: Path):
        self.coco_root = coco_root
        self._digests: dict[str, str | None] = {}
        self._decoded: dict[str, str | None] = {}

    def digest(self, relative: str) -> str | None:
        """Hex sha256 of ``coco_root/relative``, or None when there is no such file inside the root."""
        if relative not in self._digests:
            try:
                path = inside_root(self.coco_root, relative, f"COCO root {self.coco_root}")
            except UserInputError:
                path = None
            self._digests[relative] = (hashlib.sha256(path.read_bytes()).hexdigest()
                                       if path is not None and path.is_file() else None)
        return self._digests[relative]

    def decode_problem(self, relative: str, data: bytes) -> str | None:
        """Why the embedded bytes of ``relative`` do not decode completely, or None when they do."""
        if relative not in self._decoded:
            try:
                check_image_bytes(data, f"{relative} (embedded)")
                self._decoded[relative] = None
            except UserInputError as err:
                self._decoded[relative] = str(err)
        return self._decoded[relative]


def _passages_in_order(passages: list[str], source: Context, max_chars: int | None) -> bool:
    position = 0
    for passage in passages:
        while position < len(source.passages) and truncate_passage(source.passages[position], max_chars) != passage:
            position += 1
        if position == len(source.passages):
            return False
        position += 1
    return True


def check_record(record: dict, n: int, index: CocoIndex, contexts: dict[str, Context], max_chars: int | None,
                 embedded: bool, images: _ImageDigests, passage_rule: str) -> list[str]:
    """Messages for every rule one record breaks (empty when it is valid); ``n`` is its config's N,
    ``passage_rule`` the build's (`icir_mcq.sampling.PASSAGE_RULES`)."""
    problems: list[str] = []
    lengths = {"image_ids": n, "image_files": n, "images": n, "passages": n + 1, "options": 4, "option_image_ids": 4}
    bad_lengths = [f"{key} has {len(record[key])} entries, expected {want}"
                   for key, want in lengths.items() if len(record[key]) != want]
    if record["n_choices"] != n or bad_lengths:
        return [f"n_choices={record['n_choices']} for N={n}", *bad_lengths]
    category_id, category = record["category_id"], record["category"]
    if index.categories.get(category_id) != category:
        return [f"category {category!r} / id {category_id} is not a COCO category pair"]
    image_ids = record["image_ids"]
    for image_id, image_file, image in zip(image_ids, record["image_files"], record["images"]):
        if index.image_files.get(image_id) != image_file:
            problems.append(f"image {image_id}: file {image_file!r} is not its COCO file {index.image_files.get(image_id)!r}")
        elif image["path"] != image_file:
            problems.append(f"image {image_id}: stored path {image['path']!r} differs from image_files")
        elif embedded and (image["bytes"] is None or hashlib.sha256(image["bytes"]).hexdigest() != images.digest(image_file)):
            problems.append(f"image {image_id}: embedded bytes differ from {image_file} under the COCO root")
        elif embedded and (problem := images.decode_problem(image_file, image["bytes"])) is not None:
            problems.append(f"image {image_id}: {problem}")
        elif not embedded and image["bytes"] is not None:
            problems.append(f"image {image_id}: bytes embedded although the build used --no-embed-images")
    if len(set(image_ids)) != n:
        problems.append("context images repeat")
    position, target = record["target_position"], record["target_image_id"]
    if not 0 <= position < n or image_ids[position] != target:
        problems.append(f"target_position {position} does not hold target_image_id {target}")
    with_category = [i for i in image_ids if category_id in index.image_categories.get(i, ())]
    if with_category != [target]:
        problems.append(f"images annotated with {category!r} in the context are {with_category}, not just the target")
    if any(i not in index.image_categories for i in image_ids):
        problems.append("a distractor image has no instance annotation")

    answer_index, options, option_images = record["answer_index"], record["options"], record["option_image_ids"]
    if record["answer"] not in LETTERS or LETTERS.index(record["answer"]) != answer_index:
        problems.append(f"answer {record['answer']!r} does not match answer_index {answer_index}")
    elif option_images[answer_index] != target:
        problems.append("the correct option is not a caption of the target image")
    for k, (option, image_id) in enumerate(zip(options, option_images)):
        if option not in index.captions.get(image_id, ()) or not mentions(option, category):
            problems.append(f"option {LETTERS[k]} is not a caption of image {image_id} naming {category!r}")
        if category_id not in index.image_categories.get(image_id, ()):
            problems.append(f"option {LETTERS[k]} image {image_id} is not annotated with {category!r}")
        if k != answer_index and image_id in image_ids:
            problems.append(f"option {LETTERS[k]} image {image_id} is in the context")
    if len(set(option_images)) != 4 or len({normalise_option(o) for o in options}) != 4:
        problems.append("options or their images repeat")

    passages = record["passages"]
    source = contexts.get(record["mmniah_source_id"])
    if source is None:
        problems.append(f"MM-NIAH context {record['mmniah_source_id']!r} is not in the MM-NIAH files")
    elif passage_rule == "fixed":
        if passages != [truncate_passage(p, max_chars) for p in source.passages[:n + 1]]:
            problems.append(f"passages are not the first {n + 1} passages of {record['mmniah_source_id']} "
                            "(passage rule fixed)")
    elif not _passages_in_order(passages, source, max_chars):
        problems.append(f"passages are not, in order, passages of {record['mmniah_source_id']}")
    if any(not p or IMAGE_PLACEHOLDER in p for p in passages):
        problems.append(f"a passage is empty or holds {IMAGE_PLACEHOLDER}")
    if passage_rule == "category_free" and any(mentions(p, category) for p in passages):
        problems.append(f"a passage names {category!r} (passage rule category_free)")

    prompt = record["prompt"]
    if prompt != render_mcq_prompt(passages, category, options) or prompt.count(IMAGE_PLACEHOLDER) != n:
        problems.append("prompt is not the rendering of passages, question and options")
    span = tuple(record["cattok_char_span"])
    d_start, d_end = option_line_span(prompt, LETTERS[-1]) if f"\n{LETTERS[-1]}) " in prompt else (0, -1)
    if span != last_mention_span(prompt, category) or not d_start <= span[0] < span[1] <= d_end:
        problems.append(f"cattok_char_span {list(span)} is not the final mention of {category!r} inside option D")
    if record["probe_split"] not in ("train", "eval"):
        problems.append(f"probe_split {record['probe_split']!r} is neither 'train' nor 'eval'")
    return problems


def _balance(config: str, rows: list[dict], n: int, samples: int) -> list[Violation]:
    found: list[str] = []
    if len(rows) != samples:
        found.append(f"{len(rows)} rows, expected {samples}")
    for name, key, slots in (("target position", "target_position", range(n)), ("answer letter", "answer", LETTERS)):
        counts = Counter(row[key] for row in rows)
        if any(counts.get(slot, 0) != len(rows) / len(slots) for slot in slots):
            found.append(f"{name} counts {dict(sorted(counts.items()))} are not exactly {len(rows) / len(slots):g} each")
    n_eval = sum(row["probe_split"] == "eval" for row in rows)
    if n_eval != len(rows) // EVAL_DIVISOR:
        found.append(f"{n_eval} probe_split 'eval' rows, expected {len(rows) // EVAL_DIVISOR}")
    return [Violation(config, None, None, message) for message in found]


def _card_configs(folder: Path) -> list[str] | None:
    card = folder / "README.md"
    if not card.is_file():
        return None
    parts = card.read_text(encoding="utf-8").split("---\n", 2)
    try:
        front = yaml.safe_load(parts[1]) if len(parts) == 3 else None
    except yaml.YAMLError:
        return None  # reported as a card that does not declare the configs
    return [c.get("config_name") for c in front.get("configs", [])] if isinstance(front, dict) else None


def validate_icir_mcq(folder: str | Path, coco_root: str | Path | None = None,
                      mmniah_files: list[str | Path] | None = None) -> list[Violation]:
    """Every violation in the ICIR-MCQ ``folder`` (empty list: valid).

    ``coco_root`` / ``mmniah_files`` default to the paths recorded in ``build_info.json``.

    Raises:
        UserInputError: ``folder`` has no readable ``build_info.json`` with the keys the build
            writes, or COCO/MM-NIAH cannot be read.
    """
    folder = Path(folder)
    info_path = folder / BUILD_INFO
    if not info_path.is_file():
        raise UserInputError(f"{folder} is not an ICIR-MCQ folder: {BUILD_INFO} is missing")
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        missing = [key for key in _INFO_KEYS if key not in info]
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as err:
        raise UserInputError(f"{info_path} is not the JSON object a build writes ({err}); rebuild the folder") from err
    if missing:
        raise UserInputError(f"{info_path} lacks {', '.join(missing)}; rebuild the folder with icir build-mcq")
    passage_rule = info.get("passages", _RULE_BEFORE_THE_OPTION)
    if passage_rule not in PASSAGE_RULES:
        raise UserInputError(f"{info_path}: unknown passage rule {passage_rule!r} (known: {', '.join(PASSAGE_RULES)}); "
                             "rebuild the folder with icir build-mcq")
    coco_root = Path(coco_root or info["coco_root"])
    index = load_coco(coco_root)
    contexts = {c.source_id: c for c in load_contexts(mmniah_files or info["mmniah_files"])}
    images = _ImageDigests(coco_root)

    violations: list[Violation] = []
    if _card_configs(folder) != info["configs"]:
        violations.append(Violation(None, None, None, f"README.md does not declare the configs {info['configs']}"))
    seen_ids: set[str] = set()
    for config in info["configs"]:
        path = folder / config_data_path(config)
        if not path.is_file():
            violations.append(Violation(config, None, None, f"{path} is missing"))
            continue
        table = pq.read_table(path)
        if table.column_names != list(FIELD_DOCS):
            violations.append(Violation(config, None, None, f"columns {table.column_names} != {list(FIELD_DOCS)}"))
            continue
        rows = table.to_pylist()
        n = n_choices_of(config)
        for row_number, record in enumerate(rows):
            if record["id"] in seen_ids:
                violations.append(Violation(config, row_number, record["id"], "duplicate id"))
            seen_ids.add(record["id"])
            for message in check_record(record, n, index, contexts, info["max_passage_chars"],
                                        info["embed_images"], images, passage_rule):
                violations.append(Violation(config, row_number, record["id"], message))
        violations += _balance(config, rows, n, info["samples"])
    return violations
