"""Visual Haystacks question files over a (toy) COCO corpus, in the exact VHs format.

Writes ``OUT/VHs_qa/single_needle/{VHs_large,VHs_small}/visual_haystack_{oracle,N}.json`` and
``OUT/VHs_qa/multi_needle/visual_haystack_{N}.json`` so the adapter reads toy data through the
same code path as the real files. The VHs guarantees hold by construction, read from the COCO
instance annotations with pycocotools:

- the anchor category is annotated in every needle image and in no filler image;
- the target category's presence in the needle image(s) decides the answer (single needle: in
  the needle; multi needle "all": in every needle; "any": in at least one);
- answers are exactly half "yes" and half "no" in every file.

One question set is drawn per needle kind and shared by every size: the size-N file lists the
first ``N - len(pos_image)`` of each question's fillers, so haystacks grow by adding fillers, as in
VHs. ``VHs_small`` holds a balanced subset of about half the single-needle questions.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from icir_common import UserInputError, atomic_output_dir
from icir_mcq.coco_index import COCO_SPLITS, annotation_path, read_coco_file
from vhs_adapter.question_files import DEFAULT_SUBSET, MULTI_NEEDLE, SINGLE_NEEDLE, size_file_name

DEFAULT_TOY_SIZES = (1, 2, 3, 5, 10)
DEFAULT_PER_SIZE = 20
# The real multi-needle files start at N = 5 (docs/formats.md); each question has 2 or 3 needles.
MULTI_NEEDLE_MIN_SIZE = 5
MULTI_NEEDLE_COUNTS = (2, 3)
SMALL_SUBSET = "VHs_small"


@dataclass(frozen=True)
class _Image:
    path: str  # relative to the COCO root, e.g. "train2017/000000000123.jpg"
    categories: frozenset[str]


class _Corpus:
    """The images of both splits, the sorted category names, and the images holding each."""

    def __init__(self, images: list[_Image]):
        self.images = images
        self.categories = sorted(set().union(*(image.categories for image in images)))
        self._holders = {category: [image for image in images if category in image.categories] for category in self.categories}
        # Counted once: the multi-needle options ask for every (anchor, target) pair several times.
        self._together = Counter((a, b) for image in images for a in image.categories for b in image.categories)
        # Listed once: every question draws its fillers from one of these (a scan per question made
        # 8,000-question pools take seconds).
        self._lacking = {category: [image.path for image in images if category not in image.categories]
                         for category in self.categories}

    def holders(self, category: str) -> list[_Image]:
        """The images annotated with ``category``, in corpus order."""
        return self._holders[category]

    def together(self, anchor: str, target: str) -> int:
        """How many images are annotated with both ``anchor`` and ``target``."""
        return self._together[anchor, target]

    def fillers(self, anchor: str, count: int, rng: np.random.Generator) -> tuple[str, ...]:
        """``count`` distinct images without the anchor category, in random order."""
        pool = self._lacking[anchor]
        return tuple(pool[i] for i in rng.choice(len(pool), size=count, replace=False))

    def usable_anchors(self, n_fillers: int, n_needles: int) -> list[str]:
        """Categories on at least ``n_needles`` images and absent from at least ``n_fillers``."""
        return [
            category
            for category in self.categories
            if n_needles <= len(self.holders(category)) <= len(self.images) - n_fillers
        ]

    def too_small(self, question_kind: str, size: int) -> UserInputError:
        """The error for a corpus that cannot supply ``question_kind`` at haystack size ``size``."""
        return UserInputError(
            f"the {len(self.images)}-image corpus cannot supply a {question_kind} question at haystack size {size} "
            "(every filler must lack the anchor category); write a larger corpus or use smaller sizes"
        )


@dataclass(frozen=True)
class _Question:
    needles: tuple[str, ...]
    fillers: tuple[str, ...]  # enough for the largest size, in haystack-growing order
    question: str
    answer: str

    def entry(self, size: int) -> dict:
        """The VHs JSON entry of this question at haystack size ``size``."""
        return {
            "pos_image": list(self.needles),
            "neg_image": list(self.fillers[: size - len(self.needles)]),
            "conversations": [{"from": "human", "value": self.question}, {"from": "gpt", "value": self.answer}],
        }


@dataclass
class ToyVHsSummary:
    """Entries written per file: ``{kind or subset: {N: count}}`` under ``root`` (the VHs_qa folder)."""

    root: Path
    counts: dict[str, dict[int, int]] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"VHs question files in {self.root}"]
        lines += [
            f"  {name:<28} " + ", ".join(f"N={size}: {count}" for size, count in sizes.items())
            for name, sizes in self.counts.items()
        ]
        return "\n".join(lines)


BUILD_KIND = "vhs-questions"  # the kind in the folder's icir_common.BUILD_MARKER


def check_toy_vhs_options(sizes: tuple[int, ...], per_size: int) -> tuple[int, ...]:
    """The sorted distinct ``sizes``, after checking them and ``per_size`` (nothing is read).

    Raises:
        UserInputError: a size is not a positive integer, or ``per_size`` is not even and >= 2.
    """
    sizes = tuple(sorted(set(sizes)))
    if not sizes or sizes[0] < 1:
        raise UserInputError(f"haystack sizes must be positive integers, got {sizes}")
    if per_size < 2 or per_size % 2:
        raise UserInputError(f"per_size must be an even number >= 2 for 50/50 answers, got {per_size}")
    return sizes


def write_toy_vhs_questions(
    coco_root: Path,
    out_dir: Path,
    seed: int = 0,
    sizes: tuple[int, ...] = DEFAULT_TOY_SIZES,
    per_size: int = DEFAULT_PER_SIZE,
    overwrite: bool = False,
) -> ToyVHsSummary:
    """Write VHs question files for the COCO layout at ``coco_root`` into ``out_dir/VHs_qa``.

    ``per_size`` questions (even, for the 50/50 balance) per file; multi-needle files for the
    sizes of at least ``MULTI_NEEDLE_MIN_SIZE``. Same inputs and seed give identical files.
    ``VHs_qa`` is written atomically (see :func:`write_toy_vhs_questions_into`).

    Raises:
        UserInputError: missing COCO annotations, bad ``sizes``/``per_size``, or a corpus too small
            for the largest size (too few images lacking any usable anchor category).
    """
    sizes = check_toy_vhs_options(sizes, per_size)
    target = Path(out_dir) / "VHs_qa"
    plan = _draw_questions(coco_root, seed, sizes, per_size)
    with atomic_output_dir(target, overwrite=overwrite, kind=BUILD_KIND, inputs=[("coco_root", coco_root)]) as root:
        summary = _write_questions(root, plan)
    summary.root = target
    return summary


def write_toy_vhs_questions_into(
    coco_root: Path,
    root: Path,
    seed: int = 0,
    sizes: tuple[int, ...] = DEFAULT_TOY_SIZES,
    per_size: int = DEFAULT_PER_SIZE,
) -> ToyVHsSummary:
    """Write the VHs question files into the folder ``root`` (the ``VHs_qa`` folder, e.g. a
    temporary one that a caller publishes), not atomically. Same errors as
    :func:`write_toy_vhs_questions`."""
    return _write_questions(root, _draw_questions(coco_root, seed, check_toy_vhs_options(sizes, per_size), per_size))


def _draw_questions(coco_root: Path, seed: int, sizes: tuple[int, ...], per_size: int) -> list:
    corpus = _load_corpus(Path(coco_root))
    rng = np.random.default_rng(seed)
    single = _single_needle_questions(corpus, _answer_plan(per_size, rng), sizes[-1], rng)
    multi_sizes = [size for size in sizes if size >= MULTI_NEEDLE_MIN_SIZE]
    multi = _multi_needle_questions(corpus, _quantifier_plan(per_size, rng), multi_sizes[-1], rng) if multi_sizes else []
    small = _balanced_subset(single)
    return [
        (f"{SINGLE_NEEDLE}/{DEFAULT_SUBSET}", Path(SINGLE_NEEDLE, DEFAULT_SUBSET), single, sizes),
        (f"{SINGLE_NEEDLE}/{SMALL_SUBSET}", Path(SINGLE_NEEDLE, SMALL_SUBSET), small, sizes),
        (MULTI_NEEDLE, Path(MULTI_NEEDLE), multi, multi_sizes),
    ]


def _write_questions(root: Path, plan: list) -> ToyVHsSummary:
    root = Path(root)
    summary = ToyVHsSummary(root=root)
    for name, folder, questions, file_sizes in plan:
        for size in file_sizes:
            _write_json(root / folder / size_file_name(size), [question.entry(size) for question in questions])
            summary.counts.setdefault(name, {})[size] = len(questions)
    return summary


def _load_corpus(coco_root: Path) -> _Corpus:
    """Every image of both splits with the names of its annotated categories (crowd included)."""
    images = []
    for split in COCO_SPLITS:
        path = annotation_path(coco_root, "instances", split)
        if not path.is_file():
            raise UserInputError(f"{path} not found; {coco_root} must hold the COCO 2017 annotations/ folder")
        coco = read_coco_file(path, kind="instances")
        names = {category["id"]: category["name"] for category in coco.loadCats(coco.getCatIds())}
        for image_id in sorted(coco.getImgIds()):
            categories = frozenset(names[ann["category_id"]] for ann in coco.imgToAnns[image_id])
            images.append(_Image(f"{split}/{coco.imgs[image_id]['file_name']}", categories))
    return _Corpus(images)


def _answer_plan(count: int, rng: np.random.Generator) -> list[str]:
    plan = ["yes", "no"] * (count // 2)
    return [plan[i] for i in rng.permutation(count)]


def _quantifier_plan(count: int, rng: np.random.Generator) -> list[tuple[str, str]]:
    """Balanced (quantifier, answer) pairs: each consecutive pair of the cycle is one yes, one no."""
    cycle = [("all", "yes"), ("any", "no"), ("all", "no"), ("any", "yes")]
    plan = [cycle[i % len(cycle)] for i in range(count)]
    return [plan[i] for i in rng.permutation(count)]


def _balanced_subset(questions: list[_Question]) -> list[_Question]:
    """About half the questions, balanced: the first ``max(1, n // 4)`` yes and as many no ones."""
    keep = max(1, len(questions) // 4)
    kept = {answer: [i for i, q in enumerate(questions) if q.answer == answer][:keep] for answer in ("yes", "no")}
    return [questions[i] for i in sorted(kept["yes"] + kept["no"])]


def _with_article(name: str) -> str:
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _single_needle_questions(
    corpus: _Corpus, answers: list[str], max_size: int, rng: np.random.Generator
) -> list[_Question]:
    """One question per answer: a needle annotated with the anchor, and with the target iff "yes"."""
    anchors = set(corpus.usable_anchors(max_size - 1, 1))
    if not anchors:
        raise corpus.too_small("single-needle", max_size)
    pairs: dict[str, list[tuple[_Image, str, list[str]]]] = {"yes": [], "no": []}
    for image in corpus.images:
        for anchor in sorted(image.categories & anchors):
            pairs["yes"].append((image, anchor, sorted(image.categories - {anchor})))
            pairs["no"].append((image, anchor, sorted(set(corpus.categories) - image.categories)))
    pairs = {answer: [pair for pair in found if pair[2]] for answer, found in pairs.items()}
    questions = []
    for answer in answers:
        if not pairs[answer]:
            raise corpus.too_small(f"'{answer}' single-needle", max_size)
        image, anchor, targets = pairs[answer][rng.integers(len(pairs[answer]))]
        target = targets[rng.integers(len(targets))]
        questions.append(
            _Question(
                needles=(image.path,),
                fillers=corpus.fillers(anchor, max_size - 1, rng),
                question=f"For the image with {_with_article(anchor)}, is there {_with_article(target)}?",
                answer=answer,
            )
        )
    return questions


def _multi_needle_questions(
    corpus: _Corpus, plan: list[tuple[str, str]], max_size: int, rng: np.random.Generator
) -> list[_Question]:
    """One question per (quantifier, answer): 2-3 needles annotated with the anchor, of which the
    number showing the target decides the answer.

    For each, draws the needle count, then uniformly one (anchor, target, k) whose k
    target-holding needles satisfy (quantifier, answer) and that the corpus can supply, then the
    needles themselves.

    Raises:
        UserInputError: the corpus has no such combination for either needle count.
    """
    options = {
        (quantifier, answer, n_needles): _multi_needle_options(corpus, quantifier, answer, max_size, n_needles)
        for quantifier, answer in set(plan)
        for n_needles in MULTI_NEEDLE_COUNTS
    }
    questions = []
    for quantifier, answer in plan:
        counts = [n for n in MULTI_NEEDLE_COUNTS if options[quantifier, answer, n]]
        if not counts:
            raise corpus.too_small(f"'{quantifier}'/'{answer}' multi-needle", max_size)
        n_needles = counts[rng.integers(len(counts))]
        found = options[quantifier, answer, n_needles]
        anchor, target, holding = found[rng.integers(len(found))]
        with_target = [image for image in corpus.holders(anchor) if target in image.categories]
        without_target = [image for image in corpus.holders(anchor) if target not in image.categories]
        needles = [with_target[i] for i in rng.choice(len(with_target), size=holding, replace=False)]
        needles += [without_target[i] for i in rng.choice(len(without_target), size=n_needles - holding, replace=False)]
        questions.append(
            _Question(
                needles=tuple(needles[i].path for i in rng.permutation(n_needles)),
                fillers=corpus.fillers(anchor, max_size - n_needles, rng),
                question=f"For all images with {_with_article(anchor)}, "
                f"do {quantifier} of them contain {_with_article(target)}?",
                answer=answer,
            )
        )
    return questions


def _multi_needle_options(
    corpus: _Corpus, quantifier: str, answer: str, max_size: int, n_needles: int
) -> list[tuple[str, str, int]]:
    """Every (anchor, target, k needles showing the target) the corpus can supply for the answer."""
    options = []
    for anchor in corpus.usable_anchors(max_size - n_needles, n_needles):
        holders = corpus.holders(anchor)
        for target in corpus.categories:
            if target == anchor:
                continue
            holding_max = corpus.together(anchor, target)
            for holding in range(n_needles + 1):
                supplied = holding <= holding_max and n_needles - holding <= len(holders) - holding_max
                if supplied and _multi_answer(quantifier, holding, n_needles) == answer:
                    options.append((anchor, target, holding))
    return options


def _multi_answer(quantifier: str, holding: int, n_needles: int) -> str:
    """"yes" when ``holding`` of the ``n_needles`` needles showing the target satisfies the quantifier."""
    satisfied = holding == n_needles if quantifier == "all" else holding >= 1
    return "yes" if satisfied else "no"


def _write_json(path: Path, entries: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
