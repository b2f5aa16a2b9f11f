"""Find and read the Visual Haystacks question files (``VHs_qa/``), with clear errors.

Layout (``docs/formats.md``, toolkit README)::

    VHs_qa/single_needle/VHs_large/visual_haystack_{oracle,2,3,5,10,...}.json
    VHs_qa/single_needle/VHs_small/...
    VHs_qa/multi_needle/visual_haystack_{5,10,...}.json

Each file is a JSON list of entries ``{"pos_image": [...], "neg_image": [...], "conversations":
[{"from": "human", "value": question}, {"from": "gpt", "value": "yes"|"no"}]}``; image paths are
relative to the COCO root. The oracle file is haystack size N = 1.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from icir_common import UserInputError, check_relative

SINGLE_NEEDLE = "single_needle"
MULTI_NEEDLE = "multi_needle"
NEEDLE_KINDS = (SINGLE_NEEDLE, MULTI_NEEDLE)
DEFAULT_SUBSET = "VHs_large"
SUBSETS = (DEFAULT_SUBSET, "VHs_small")  # the toolkit's two single-needle subsets
# The haystack sizes of the paper (§4.3, §6.1, App. C.3) and of the toolkit's default config.
DEFAULT_SIZES = (1, 2, 3, 5, 10, 20, 50, 100)
ORACLE = "oracle"
_FILE_NAME = re.compile(r"visual_haystack_(oracle|[1-9]\d*)\.json")


def size_file_name(size: int) -> str:
    """``visual_haystack_oracle.json`` for N = 1, else ``visual_haystack_{N}.json``."""
    return f"visual_haystack_{ORACLE if size == 1 else size}.json"


@dataclass(frozen=True)
class SizeFile:
    """One question file: its needle kind, haystack size N and path."""

    kind: str
    size: int
    path: Path

    @property
    def config(self) -> str:
        """Output config name, ``single_needle_n{N}`` or ``multi_needle_n{N}``."""
        return f"{self.kind}_n{self.size}"


@dataclass(frozen=True)
class VHsEntry:
    """One validated question entry; ``index`` is its 0-based position in the file."""

    index: int
    question: str
    answer: str
    pos_image: tuple[str, ...]
    neg_image: tuple[str, ...]


def resolve_vhs_root(vhs_dir: Path) -> Path:
    """The ``VHs_qa`` folder: ``vhs_dir`` itself, or ``vhs_dir/VHs_qa`` when that is where it is.

    Raises:
        UserInputError: neither holds a ``single_needle`` or ``multi_needle`` folder.
    """
    for root in (vhs_dir, vhs_dir / "VHs_qa"):
        if any((root / kind).is_dir() for kind in NEEDLE_KINDS):
            return root
    raise UserInputError(
        f"{vhs_dir} holds no single_needle/ or multi_needle/ folder; point --vhs at the VHs_qa folder "
        "downloaded from the tsunghanwu/visual_haystacks dataset"
    )


def kind_folder(vhs_root: Path, kind: str, subset: str = DEFAULT_SUBSET) -> Path:
    """Folder holding the size files of ``kind``; single needle has one folder per subset."""
    return vhs_root / SINGLE_NEEDLE / subset if kind == SINGLE_NEEDLE else vhs_root / MULTI_NEEDLE


def available_size_files(vhs_root: Path, subset: str = DEFAULT_SUBSET) -> list[SizeFile]:
    """Every size file present, single needle first, each kind by increasing N."""
    found = []
    for kind in NEEDLE_KINDS:
        folder = kind_folder(vhs_root, kind, subset)
        sizes = sorted(
            1 if match.group(1) == ORACLE else int(match.group(1))
            for match in (_FILE_NAME.fullmatch(path.name) for path in folder.glob("visual_haystack_*.json"))
            if match and match.group(1) != "1"  # N = 1 is the oracle file
        )
        found += [SizeFile(kind, size, folder / size_file_name(size)) for size in sizes]
    return found


def select_size_files(vhs_root: Path, sizes: list[int] | None, subset: str = DEFAULT_SUBSET) -> list[SizeFile]:
    """The size files to build: those of ``sizes``, or of ``DEFAULT_SIZES`` that exist.

    A requested size is built for each kind whose file exists.

    Raises:
        UserInputError: ``subset`` is not one of ``SUBSETS``, a requested size has no file of
            either kind, or nothing is left to build.
    """
    if subset not in SUBSETS:
        raise UserInputError(f"--subset {subset!r} is not a Visual Haystacks subset; use one of {', '.join(SUBSETS)}")
    available = available_size_files(vhs_root, subset)
    present = {size_file.size for size_file in available}
    if sizes is None:
        chosen = [f for f in available if f.size in DEFAULT_SIZES]
    else:
        for size in sizes:
            if size not in present:
                expected = " or ".join(
                    str(kind_folder(vhs_root, kind, subset) / size_file_name(size)) for kind in NEEDLE_KINDS
                )
                raise UserInputError(
                    f"haystack size {size}: size file absent (expected {expected}); "
                    f"sizes present: {sorted(present) or 'none'}"
                )
        chosen = [f for f in available if f.size in sizes]
    if not chosen:
        raise UserInputError(
            f"no question files to build under {vhs_root} (subset {subset}); sizes present: {sorted(present) or 'none'}"
        )
    return chosen


def load_entries(path: Path, kind: str | None = None) -> list[VHsEntry]:
    """Read and validate every entry of one question file of needle ``kind`` (None: unchecked).

    Raises:
        UserInputError: unreadable or malformed JSON, a top level that is not a non-empty list, or
            an entry without a non-empty ``pos_image`` list (exactly one image for single-needle
            files), a ``neg_image`` list, a question, or a "yes"/"no" answer; an image path that is
            absolute or has ``..``; an image listed twice in one haystack; an entry repeating an
            earlier one. The message names the file and the entry index.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UserInputError(f"{path}: cannot read question file ({err.strerror})") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: malformed JSON ({err}); re-download the VHs question file") from err
    if not isinstance(data, list):
        raise UserInputError(f"{path}: expected a JSON list of entries, found {type(data).__name__}")
    if not data:
        raise UserInputError(f"{path}: the question file holds no entries (an empty list); re-download it")
    entries = [_entry(path, index, raw, kind) for index, raw in enumerate(data)]
    first: dict[tuple, int] = {}
    for entry in entries:
        key = (entry.question, entry.answer, entry.pos_image, tuple(sorted(entry.neg_image)))
        earlier = first.setdefault(key, entry.index)
        if earlier != entry.index:
            raise UserInputError(f"{path}: entry {entry.index}: duplicate of entry {earlier} (same question, "
                                 "answer and images); remove one or re-download the file")
    return entries


def _entry(path: Path, index: int, raw: object, kind: str | None = None) -> VHsEntry:
    def fail(problem: str) -> UserInputError:
        return UserInputError(f"{path}: entry {index}: {problem}")

    if not isinstance(raw, dict):
        raise fail(f"expected a JSON object, found {type(raw).__name__}")
    pos = raw.get("pos_image")
    if not pos or not isinstance(pos, list) or not all(isinstance(p, str) for p in pos):
        raise fail("no pos_image (needs a non-empty list of needle image paths)")
    if kind == SINGLE_NEEDLE and len(pos) != 1:
        raise fail(f"a single-needle entry needs exactly one pos_image, found {len(pos)}")
    neg = raw.get("neg_image", [])
    if not isinstance(neg, list) or not all(isinstance(p, str) for p in neg):
        raise fail("neg_image must be a list of image paths")
    for image in pos + neg:
        check_relative(image, f"{path}: entry {index}", "the COCO root")
    overlap = sorted(set(pos) & set(neg))
    if overlap:
        raise fail(f"image {overlap[0]} is listed as both a needle (pos_image) and a filler (neg_image)")
    for name, images in (("pos_image", pos), ("neg_image", neg)):
        repeated = sorted({image for image in images if images.count(image) > 1})
        if repeated:
            raise fail(f"image {repeated[0]} is listed twice in {name}; every haystack image must be distinct")
    turns = raw.get("conversations")
    if not isinstance(turns, list) or len(turns) < 2 or not all(isinstance(t, dict) for t in turns[:2]):
        raise fail("conversations must hold the question turn and the answer turn")
    question, answer = turns[0].get("value"), turns[1].get("value")
    if not isinstance(question, str) or not question.strip():
        raise fail("the first conversation turn has no question text")
    if not isinstance(answer, str) or answer.strip().lower() not in ("yes", "no"):
        raise fail(f"the answer turn must be 'yes' or 'no', found {answer!r}")
    return VHsEntry(index, question, answer.strip().lower(), tuple(pos), tuple(neg))
