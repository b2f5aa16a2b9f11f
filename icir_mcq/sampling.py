"""Draw ICIR-MCQ samples from a COCO index and MM-NIAH contexts (paper §3.2 and App. B).

Per sample: a queried category (uniform over the categories that can be served), a target
image annotated with it and one of the target's own captions that mentions it; N-1
distractor images annotated with other categories only; three option captions of other
images of the category, each mentioning it, no two options alike; N+1 passages of one MM-NIAH
context, by the passage rule (`PASSAGE_RULES`). Target positions and answer letters come from
exactly balanced shuffled lists, so each of the N positions occurs ``samples / N`` times and
each letter ``samples / 4`` times.

Passage rules (``docs/protocol.md``, "ICIR-MCQ: the MM-NIAH passages"):

- ``fixed`` (default; §3.2: "Because the original MM-NIAH passages are kept fixed while the
  images and captions are newly substituted from COCO, the passages are independent of the target
  image and answer options by construction"): the context's first N+1 passages, as they are. A
  context always gives the same passages, whatever the category, target or seed.
- ``category_free`` (a named option, not the paper's rule): N+1 passages in order, from a seeded
  start, among the context's passages that do not name the queried category (consecutive in
  that list), so the category is named only in the question and the options. The shipped demo model was trained on such
  samples (``harness/demo_model/data.py``), and folders built before the option existed used it.

Categories captions rarely name (real COCO's "hair drier", "dining table") are left out with a
per-category report, as ``docs/protocol.md`` settles; a category the caller asked for by name
that cannot be served is an error.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from icir_common import UserInputError
from icir_mcq.mentions import category_pattern
from icir_mcq.mmniah import Context, truncate_passage
from icir_mcq.prompt import LETTERS, cattok_char_span, render_mcq_prompt

if TYPE_CHECKING:
    from icir_mcq.coco_index import CocoIndex

MIN_CAPTIONED_IMAGES = 4  # the target and three option images
PASSAGE_RULES = ("fixed", "category_free")  # module docstring; the first is the paper's (§3.2)
EVAL_DIVISOR = 5  # probe_split: samples // 5 rows are 'eval' (600 of 3,000 per config)
_CONFIG_RE = re.compile(r"^n(\d+)$")
_MAX_DRAWS = 64  # rejection draws for one option set / one distractor context before giving up


def n_choices_of(config: str) -> int:
    """Haystack size N of a config name ``"n<N>"`` (``"n5" -> 5``); N must be at least 2.

    Raises:
        UserInputError: the name is not of that form.
    """
    match = _CONFIG_RE.match(config)
    if match is None or int(match.group(1)) < 2:
        raise UserInputError(f"unknown config {config!r}: configs are named n<N> with N >= 2 images, e.g. n5,n6")
    return int(match.group(1))


def check_sample_count(config: str, samples: int) -> None:
    """Require ``samples`` to be a positive multiple of lcm(N, 4), the only counts for which
    both the target position (N slots) and the answer letter (4) can be exactly balanced.

    Raises:
        UserInputError: otherwise, naming the nearest valid counts.
    """
    step = math.lcm(n_choices_of(config), len(LETTERS))
    if samples < step or samples % step:
        lower = max(samples, 0) // step * step
        nearest = " or ".join(str(v) for v in (lower, lower + step) if v >= step)
        raise UserInputError(
            f"--samples {samples} cannot be balanced exactly for {config}: it must be a multiple of "
            f"{step} = lcm({n_choices_of(config)} positions, 4 letters); try {nearest}"
        )


def check_sample_counts(configs: list[str], samples: int) -> None:
    """:func:`check_sample_count` for every config at once: the hint names counts valid for all
    of them (multiples of the lcm over the configs).

    Raises:
        UserInputError: ``samples`` cannot be balanced for at least one config.
    """
    steps = {config: math.lcm(n_choices_of(config), len(LETTERS)) for config in configs}
    step = math.lcm(*steps.values()) if steps else 1
    if samples >= step and samples % step == 0:
        return
    lower = max(samples, 0) // step * step
    nearest = " or ".join(str(v) for v in (lower, lower + step) if v >= step)
    if len(steps) == 1:
        check_sample_count(configs[0], samples)
    bad = [config for config, s in steps.items() if samples < s or samples % s]
    need = ", ".join(f"{config} a multiple of {s}" for config, s in steps.items())
    raise UserInputError(f"--samples {samples} cannot be balanced exactly for {', '.join(bad)}: {need} "
                         f"(lcm(N positions, 4 letters)), so all of {', '.join(steps)} need a multiple of {step}; "
                         f"try {nearest}")


def normalise_option(text: str) -> str:
    """Comparison key for "no two options identical": case-folded, final period and spaces dropped."""
    return " ".join(text.split()).casefold().rstrip(". ")


@dataclass(frozen=True)
class CategoryPool:
    """One category's usable captions: ``captions[image_id]`` lists that image's distinct
    captions mentioning the category; ``caption_images`` is their sorted image ids."""

    category_id: int
    name: str
    annotated_images: int
    captions: dict[int, tuple[str, ...]]
    caption_images: tuple[int, ...]
    has_four_distinct: bool


@dataclass(frozen=True)
class CategoryReport:
    """Why a category was or was not used in one config, and how many samples it got."""

    category_id: int
    name: str
    annotated_images: int
    captioned_images: int
    matching_captions: int
    samples: int
    skipped_because: str | None


def category_pools(index: CocoIndex) -> dict[int, CategoryPool]:
    """Every category's captions that mention it (name or plural, whole word), by category id."""
    pools = {}
    for category_id, name in index.categories.items():
        pattern = category_pattern(name)
        captions: dict[int, tuple[str, ...]] = {}
        for image_id in index.category_images[category_id]:
            matching = tuple(dict.fromkeys(c for c in index.captions.get(image_id, ()) if pattern.search(c)))
            if matching:
                captions[image_id] = matching
        pools[category_id] = CategoryPool(category_id, name, len(index.category_images[category_id]),
                                          captions, tuple(sorted(captions)), _has_four_distinct(captions))
    return pools


def _has_four_distinct(captions: dict[int, tuple[str, ...]]) -> bool:
    seen: set[str] = set()
    for image_captions in captions.values():
        seen.update(normalise_option(c) for c in image_captions)
        if len(seen) >= len(LETTERS):
            return True
    return False


def check_passage_rule(rule: str) -> str:
    """`rule` when it is one of `PASSAGE_RULES`.

    Raises:
        UserInputError: otherwise, naming the rules.
    """
    if rule not in PASSAGE_RULES:
        raise UserInputError(f"unknown passage rule {rule!r}: choose {' or '.join(PASSAGE_RULES)} "
                             f"({PASSAGE_RULES[0]} is the paper's, §3.2)")
    return rule


def resolve_categories(index: CocoIndex, names: list[str] | None) -> list[int] | None:
    """Category ids for user-given ``names`` (None: all categories).

    Raises:
        UserInputError: a name is not a category of the COCO annotation files.
    """
    if names is None:
        return None
    ids = []
    for name in names:
        category_id = index.category_id(name)
        if category_id is None:
            known = ", ".join(sorted(index.categories.values()))
            raise UserInputError(f"unknown category {name!r}: not in {index.root}/annotations/instances_*2017.json "
                                 f"(known: {known})")
        ids.append(category_id)
    return sorted(set(ids))


class PassageFilter:
    """Which passages of each context do not name a category (passage rule ``category_free``);
    cached per (context, category)."""

    def __init__(self, contexts: list[Context]):
        self.contexts = contexts
        self._usable: dict[tuple[int, int], tuple[int, ...]] = {}

    def usable(self, context: int, category_id: int, name: str) -> tuple[int, ...]:
        """Indices of ``contexts[context].passages`` that do not mention ``name``."""
        key = (context, category_id)
        if key not in self._usable:
            pattern = category_pattern(name)
            passages = self.contexts[context].passages
            self._usable[key] = tuple(i for i, p in enumerate(passages) if not pattern.search(p))
        return self._usable[key]


class ConfigSampler:
    """Samples of one config (haystack size N) with one seeded ``numpy`` generator."""

    def __init__(self, index: CocoIndex, pools: dict[int, CategoryPool], passages: PassageFilter,
                 config: str, rng: np.random.Generator, max_passage_chars: int | None, passage_rule: str):
        self.index, self.pools, self.passages, self.config = index, pools, passages, config
        self.n = n_choices_of(config)
        self.rng = rng
        self.max_passage_chars = max_passage_chars
        self.passage_rule = passage_rule
        self.annotated = np.array(sorted(index.image_categories), dtype=np.int64)
        self.long_contexts = [i for i, c in enumerate(passages.contexts) if len(c.passages) >= self.n + 1]
        self._complements: dict[int, np.ndarray] = {}
        self._decks: dict[int, list[int]] = {}

    def distractor_pool(self, category_id: int) -> np.ndarray:
        """Sorted ids of annotated images without ``category_id`` (candidate distractors)."""
        if category_id not in self._complements:
            members = np.array(self.index.category_images[category_id], dtype=np.int64)
            self._complements[category_id] = np.setdiff1d(self.annotated, members, assume_unique=True)
        return self._complements[category_id]

    def skip_reason(self, pool: CategoryPool) -> str | None:
        """Why ``pool``'s category cannot be served in this config, or None when it can."""
        if len(pool.caption_images) < MIN_CAPTIONED_IMAGES:
            return (f"only {len(pool.caption_images)} images have a caption naming it "
                    f"(needs {MIN_CAPTIONED_IMAGES}: the target and three option images)")
        if not pool.has_four_distinct:
            return "fewer than 4 distinct captions name it (needs 4 different options)"
        if len(self.distractor_pool(pool.category_id)) < self.n - 1:
            return f"fewer than {self.n - 1} annotated images without it (distractors)"
        if self.passage_rule == "category_free" and not any(
                len(self.passages.usable(c, pool.category_id, pool.name)) > self.n for c in self.long_contexts):
            return f"no MM-NIAH context has {self.n + 1} passages that do not name it (passage rule category_free)"
        return None

    def _next_target(self, pool: CategoryPool) -> int:
        # A shuffled deck per category, refilled when empty: targets repeat only after all were used.
        deck = self._decks.setdefault(pool.category_id, [])
        if not deck:
            deck.extend(self.rng.permutation(np.array(pool.caption_images)).tolist()[::-1])
        return deck.pop()

    def _pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def _other_options(self, pool: CategoryPool, target: int, target_caption: str) -> list[tuple[int, str]] | None:
        chosen: list[tuple[int, str]] = []
        seen = {normalise_option(target_caption)}
        for _ in range(_MAX_DRAWS):
            image = self._pick(pool.caption_images)
            if image == target or any(image == other for other, _ in chosen):
                continue
            caption = self._pick(pool.captions[image])
            if normalise_option(caption) in seen:
                continue
            chosen.append((image, caption))
            seen.add(normalise_option(caption))
            if len(chosen) == len(LETTERS) - 1:
                return chosen
        return None

    def _distractors(self, category_id: int) -> list[int]:
        candidates = self.distractor_pool(category_id)
        chosen: list[int] = []
        while len(chosen) < self.n - 1:
            image = int(candidates[self.rng.integers(len(candidates))])
            if image not in chosen:
                chosen.append(image)
        return chosen

    def _context_candidates(self):
        for _ in range(_MAX_DRAWS):
            yield self._pick(self.long_contexts)
        yield from self.rng.permutation(np.array(self.long_contexts)).tolist()  # reaches every context

    def _context(self, pool: CategoryPool) -> tuple[Context, list[str]]:
        """The sample's MM-NIAH context and its N+1 passages under the passage rule (module docstring)."""
        if self.passage_rule == "fixed":
            source = self.passages.contexts[self._pick(self.long_contexts)]
            return source, [truncate_passage(p, self.max_passage_chars) for p in source.passages[:self.n + 1]]
        for context in self._context_candidates():
            usable = self.passages.usable(context, pool.category_id, pool.name)
            if len(usable) > self.n:
                start = int(self.rng.integers(len(usable) - self.n))
                chosen = usable[start:start + self.n + 1]
                source = self.passages.contexts[context]
                return source, [truncate_passage(source.passages[i], self.max_passage_chars) for i in chosen]
        raise AssertionError("skip_reason admitted a category without a usable context")

    def sample(self, served: list[int], samples: int) -> list[dict]:
        """``samples`` records (without the ``images`` field) over the ``served`` category ids.

        Raises:
            UserInputError: the captions of the drawn categories are too repetitive to give four
                distinct options for ``_MAX_DRAWS`` targets in a row.
        """
        from tqdm import tqdm  # imported here: ``icir build-mcq --help`` reads only `PASSAGE_RULES`

        positions = self.rng.permutation(np.repeat(np.arange(self.n), samples // self.n)).tolist()
        letters = self.rng.permutation(np.repeat(np.arange(len(LETTERS)), samples // len(LETTERS))).tolist()
        eval_rows = set(self.rng.choice(samples, samples // EVAL_DIVISOR, replace=False).tolist())
        records = []
        for row in tqdm(range(samples), desc=f"sampling {self.config}", unit="sample", leave=False):
            for _ in range(_MAX_DRAWS):
                pool = self.pools[self._pick(served)]
                target = self._next_target(pool)
                target_caption = self._pick(pool.captions[target])
                others = self._other_options(pool, target, target_caption)
                if others is not None:
                    break
            else:
                raise UserInputError(f"{self.config}: could not draw four distinct caption options for "
                                     f"{_MAX_DRAWS} targets in a row; the captions are too repetitive")
            distractors = self._distractors(pool.category_id)
            source, passages = self._context(pool)
            position, answer_index = positions[row], letters[row]
            image_ids = distractors[:position] + [target] + distractors[position:]
            option_pairs = others[:answer_index] + [(target, target_caption)] + others[answer_index:]
            options = [caption for _, caption in option_pairs]
            prompt = render_mcq_prompt(passages, pool.name, options)
            records.append({
                "id": f"{self.config}-{row:05d}",
                "n_choices": self.n,
                "image_ids": image_ids,
                "image_files": [self.index.image_files[i] for i in image_ids],
                "passages": passages,
                "category": pool.name,
                "category_id": pool.category_id,
                "options": options,
                "answer": LETTERS[answer_index],
                "answer_index": answer_index,
                "target_position": position,
                "target_image_id": target,
                "option_image_ids": [image for image, _ in option_pairs],
                "prompt": prompt,
                "cattok_char_span": list(cattok_char_span(prompt, pool.name)),
                "mmniah_source_id": source.source_id,
                "probe_split": "eval" if row in eval_rows else "train",
            })
        return records


def config_rng(seed: int, config: str) -> np.random.Generator:
    """The generator of one config: seeded by ``(seed, N)``, so a config's samples do not depend
    on which other configs are built alongside it."""
    return np.random.default_rng([seed, n_choices_of(config)])


def sample_configs(index: CocoIndex, contexts: list[Context], configs: list[str], samples: int, seed: int,
                   categories: list[str] | None = None, max_passage_chars: int | None = None,
                   passages: str = PASSAGE_RULES[0],
                   ) -> tuple[dict[str, list[dict]], dict[str, list[CategoryReport]]]:
    """Records and per-category reports of each config (records lack the ``images`` field).

    ``categories`` restricts sampling to those names; each must then be servable. ``passages``
    is the passage rule (module docstring): ``fixed``, the paper's (§3.2), or ``category_free``.

    Raises:
        UserInputError: unknown config, category name or passage rule, ``samples`` not
            balanceable, no MM-NIAH context with N+1 non-empty passages, a requested category
            that cannot be served, or no category at all that can.
    """
    check_sample_counts(configs, samples)
    check_passage_rule(passages)
    requested = resolve_categories(index, categories)
    pools = category_pools(index)
    passage_filter = PassageFilter(contexts)
    records, reports = {}, {}
    for config in configs:
        sampler = ConfigSampler(index, pools, passage_filter, config, config_rng(seed, config), max_passage_chars,
                                passages)
        if not sampler.long_contexts:
            raise UserInputError(
                f"too few MM-NIAH contexts with {sampler.n + 1} usable passages for {config}: none of the "
                f"{len(contexts)} contexts has {sampler.n + 1} non-empty passages between <image> placeholders"
            )
        wanted = requested if requested is not None else sorted(pools)
        reasons = {category_id: sampler.skip_reason(pools[category_id]) for category_id in wanted}
        for category_id in requested or ():
            if reasons[category_id] is not None:
                raise UserInputError(f"category {pools[category_id].name!r} cannot be served for {config}: "
                                     f"{reasons[category_id]}")
        served = [category_id for category_id in wanted if reasons[category_id] is None]
        if not served:
            raise UserInputError(f"no category can be served for {config}: " + "; ".join(
                f"{pools[c].name}: {reason}" for c, reason in reasons.items()))
        records[config] = sampler.sample(served, samples)
        counts = {category_id: 0 for category_id in wanted}
        for record in records[config]:
            counts[record["category_id"]] += 1
        reports[config] = [
            CategoryReport(c, pools[c].name, pools[c].annotated_images, len(pools[c].caption_images),
                           sum(len(v) for v in pools[c].captions.values()), counts[c], reasons[c])
            for c in wanted
        ]
    return records, reports
