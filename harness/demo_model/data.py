"""Samples of the demo model's tasks, drawn from a toy world, and their encoding into model inputs.

A *toy world* is one toy corpus (`icir_mcq.toy.write_toy_corpus`): its own seeded images,
captions and MM-NIAH documents. Training draws from a world of its own and every evaluation from a
fresh one, so the two never share an image. Both benchmarks are drawn by the project's own builders:

- ICIR-MCQ (paper §3.2, App. B) with `icir_mcq.sampling.sample_configs`, passages cut to
  ``MAX_PASSAGE_CHARS`` characters (a word or two), so a 5-image prompt is about 150 tokens, under
  the passage rule ``DEMO_PASSAGES``;
- Visual Haystacks single needle (§4.3, App. A) with `vhs_adapter.toy_questions` and
  `vhs_adapter.build.build_vhs` (seeded haystacks, anchor/cattok spans, toolkit prompt).

Warm-up tasks come before the benchmarks, all scored on the answer token only:

- *naming* (single image; the feature-alignment stage LVLMs are trained with first): "<image>
  Name a shape in the picture." answered with the name of any category in the image, and "<image>
  Name the background colour." answered with the first word of the background's name. Without
  it the answer-token signal of Yes/No and letter answers is too weak to shape the vision tower
  in minutes; with it, VHs N=1 is learned in a few hundred steps;
- *option finding* (text only): "Which caption mentions <category>?" over four captions, answered
  with the letter of the one that does: binding a letter to its option, which ICIR-MCQ needs and
  which the model does not find from ICIR-MCQ alone within thousands of steps; its one-word form
  (four category names as the options) is learned from scratch in ~600 steps;
- *background retrieval*: the images (with or without the passages) of an ICIR-MCQ draw, asked
  for the background colour of the image that contains the category: finding the image without
  matching captions or answering with a letter.

All become `TaskRecord`s; `encode_records` turns records into token ids the way the capture
engine's processor call does (chat template, one run of image tokens per image), without
processing an image twice: pixels come from a `PixelCache`.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

import datasets
import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from harness.capture.inputs import CaptureRequest, render
from icir_mcq.coco_index import CocoIndex, load_coco
from icir_mcq.mentions import category_pattern
from icir_mcq.mmniah import load_contexts
from icir_mcq.prompt import IMAGE_PLACEHOLDER, LETTERS, QUESTION, cattok_char_span, option_lines, render_mcq_prompt
from icir_mcq.sampling import sample_configs
from icir_mcq.toy import ToyCorpus, write_toy_corpus
from icir_mcq.toy.shapes import BACKGROUNDS
from vhs_adapter.build import build_vhs
from vhs_adapter.toy_questions import write_toy_vhs_questions

MAX_PASSAGE_CHARS = 16
# The passage rule the shipped demo model was trained and measured on (icir_mcq.sampling): the
# package's only rule when it was trained; the paper's `fixed` rule is the builder's default.
DEMO_PASSAGES = "category_free"
MCQ, VHS, NAMING, OPTIONS, OPTION_WORDS, RETRIEVAL, BARE_RETRIEVAL = (
    "icir_mcq", "vhs_single", "naming", "option_finding", "option_words", "background_retrieval",
    "bare_background_retrieval")
RETRIEVAL_QUESTION = "What colour is the background of the image above that contains {category}?"
OPTIONS_QUESTION = "Which caption mentions {category}? Answer with a single letter (A, B, C, or D)."
SHAPE_PROMPT = "<image>\nName a shape in the picture."
BACKGROUND_PROMPT = "<image>\nName the background colour."
BACKGROUND_WORDS = tuple(name.split()[0] for name, _ in BACKGROUNDS)
VHS_ANSWERS = {"yes": "Yes", "no": "No"}
IMAGE_TOKEN = "<|image_pad|>"


@dataclasses.dataclass(frozen=True)
class TaskRecord:
    """One training or evaluation sample, as the demo model sees it.

    Attributes:
        task: ``MCQ``, ``VHS``, ``NAMING``, ``OPTIONS``, ``OPTION_WORDS``, ``RETRIEVAL`` or
            ``BARE_RETRIEVAL`` (background retrieval over the images alone).
        prompt: the stored prompt, one ``<image>`` placeholder per image.
        image_files: image paths relative to the world's COCO root, in context order.
        answers: every correct answer token's text: one letter A-D (MCQ, option finding), "Yes" or
            "No" (VHs), the name of each category in the image or the background word (naming).
        target: 0-based position of the target (MCQ) or needle (VHs) image (0 for naming; the
            answer's option index for option finding).
        cattok_char_span: half-open character span of `prompt` whose last character is the cattok
            (§3.2: the category's final mention, in option D; §4.3: the anchor phrase's last word).
        ablation_start_char: first character of the ablated question span (MCQ: the question
            sentence; VHs: the anchor phrase, §6.1); the span runs to the last prefill token.
    """

    task: str
    prompt: str
    image_files: tuple[str, ...]
    answers: tuple[str, ...]
    target: int
    cattok_char_span: tuple[int, int]
    ablation_start_char: int


@dataclasses.dataclass
class ToyWorld:
    """A toy corpus on disk with its COCO index and MM-NIAH contexts loaded."""

    corpus: ToyCorpus
    index: CocoIndex
    contexts: list

    def image(self, relative: str) -> Image.Image:
        """The RGB image at `relative` (a record's ``image_files`` entry)."""
        with Image.open(self.corpus.coco_root / relative) as image:
            return image.convert("RGB")


DEMO_WORLD = "demo"


def open_world(root: Path, n_images: int, seed: int) -> ToyWorld:
    """Write a demo-world toy corpus (`icir_mcq.toy.worlds`) of `n_images` images with `seed` under
    `root` (replaced) and load it."""
    corpus = write_toy_corpus(root, n_images, seed=seed, overwrite=True, world=DEMO_WORLD)
    return ToyWorld(corpus, load_coco(corpus.coco_root), load_contexts([corpus.mmniah_file]))


def mcq_records(world: ToyWorld, n_images: int, samples: int, seed: int) -> list[TaskRecord]:
    """`samples` ICIR-MCQ records of config ``n<n_images>`` (balanced positions and letters).

    `samples` must be a multiple of lcm(n_images, 4) (see `icir_mcq.sampling.check_sample_count`).
    ``n_images=1`` (a training stage only; the benchmark starts at N=2) draws ``n2`` samples and
    keeps the target image alone, with the passages before and after it: caption matching without
    retrieval.
    """
    return [record for _, record in _sampled_mcq(world, n_images, samples, seed)]


def _sampled_mcq(world: ToyWorld, n_images: int, samples: int, seed: int) -> list[tuple[dict, TaskRecord]]:
    """`mcq_records`, each with the builder's record (``category``, ``target_image_id``, ...) it came from."""
    config = f"n{max(n_images, 2)}"
    records, _ = sample_configs(world.index, world.contexts, [config], samples, seed,
                                max_passage_chars=MAX_PASSAGE_CHARS, passages=DEMO_PASSAGES)
    question_start = QUESTION.split("{", 1)[0]
    out = []
    for r in records[config]:
        prompt, image_files, target, span = r["prompt"], r["image_files"], r["target_position"], r["cattok_char_span"]
        if n_images == 1:
            prompt = render_mcq_prompt(r["passages"][target : target + 2], r["category"], r["options"])
            image_files, target, span = image_files[target : target + 1], 0, cattok_char_span(prompt, r["category"])
        out.append((r, TaskRecord(MCQ, prompt, tuple(image_files), (r["answer"],), target, tuple(span),
                                  prompt.rindex(question_start))))
    return out


def vhs_records(world: ToyWorld, n_images: int, questions: int, seed: int) -> list[TaskRecord]:
    """`questions` VHs single-needle records with haystack size `n_images` (half "Yes", half "No").

    Questions come from `write_toy_vhs_questions` over the world's images, haystacks from
    `build_vhs` with the same `seed`; `questions` must be even.
    """
    with tempfile.TemporaryDirectory(prefix="demo-vhs-") as tmp:
        tmp = Path(tmp)
        write_toy_vhs_questions(world.corpus.coco_root, tmp, seed=seed, sizes=(n_images,), per_size=questions)
        build_vhs(tmp / "VHs_qa", world.corpus.coco_root, tmp / "vhs", sizes=[n_images], seed=seed,
                  embed_images=False)
        rows = datasets.load_dataset(str(tmp / "vhs"), f"single_needle_n{n_images}", split="test",
                                     cache_dir=str(tmp / "cache"))
        return [
            TaskRecord(VHS, r["prompt"], tuple(r["image_files"]), (VHS_ANSWERS[r["answer"]],), r["needle_positions"][0],
                       tuple(r["cattok_char_span"]), r["ablation_start_char"])
            for r in rows
        ]


def retrieval_records(world: ToyWorld, n_images: int, samples: int, seed: int,
                      passages: bool = True) -> list[TaskRecord]:
    """`samples` *background retrieval* records: the images (and, with `passages`, the passages) of
    the ICIR-MCQ records `mcq_records` draws with the same arguments, asked "What colour is the
    background of the image above that contains <category>?" and answered with the first word of
    the target image's background (from its captions). Without `passages` the prompt is the images
    alone, one ``<image>`` line each, then the question.

    The retrieval half of ICIR-MCQ without the caption matching and the letter: in the demo world
    each distractor shows a background drawn independently of the target's, so only finding the
    image with the category answers it reliably.
    """
    out = []
    for drawn, record in _sampled_mcq(world, n_images, samples, seed):
        # An ICIR-MCQ record's ablation span starts at its question sentence: what precedes it is context.
        context = (record.prompt[:record.ablation_start_char] if passages
                   else f"{IMAGE_PLACEHOLDER}\n" * len(record.image_files))
        prompt = context + RETRIEVAL_QUESTION.format(category=drawn["category"])
        out.append(dataclasses.replace(record, task=RETRIEVAL if passages else BARE_RETRIEVAL, prompt=prompt,
                                       answers=(background_word(world.index.captions[drawn["target_image_id"]]),),
                                       cattok_char_span=cattok_char_span(prompt, drawn["category"]),
                                       ablation_start_char=len(context)))
    return out


def background_word(captions: Sequence[str]) -> str:
    """First word of the background named by an image's complete (demo-world) captions.

    Raises:
        ValueError: no caption names a background of ``BACKGROUNDS`` (not a demo-world image).
    """
    for caption in captions:
        for name, _ in BACKGROUNDS:
            if f" {name} " in f" {caption} ":
                return name.split()[0]
    raise ValueError(f"no background named in captions {list(captions)}")


def naming_records(world: ToyWorld, count: int, seed: int) -> list[TaskRecord]:
    """`count` naming records over images drawn without replacement (seeded) from the world's annotated
    images: alternately a shape question (answers: the image's category names, sorted) and a
    background question (answer: the first word of its background, from its captions).

    Raises:
        ValueError: the world has fewer than `count` annotated images.
    """
    index = world.index
    images = sorted(index.image_categories)
    if count > len(images):
        raise ValueError(f"{count} naming records need as many annotated images; the world has {len(images)}")
    chosen = np.random.default_rng([seed, 3]).choice(images, size=count, replace=False).tolist()
    records = []
    for k, image in enumerate(chosen):
        if k % 2 == 0:
            prompt, answers = SHAPE_PROMPT, tuple(sorted(index.categories[c] for c in index.image_categories[image]))
        else:
            prompt, answers = BACKGROUND_PROMPT, (background_word(index.captions[image]),)
        records.append(TaskRecord(NAMING, prompt, (index.image_files[image],), answers, 0, (0, 0), 0))
    return records


def option_records(world: ToyWorld, count: int, seed: int) -> list[TaskRecord]:
    """`count` text-only *option finding* records: "Which caption mentions <category>?" over four
    captions of four different images, exactly one of which shows the category and is given by a
    caption that names it (answer: its letter, balanced over A-D by cycling). Warms up what
    ICIR-MCQ needs besides retrieval: reading the four options and answering with the letter of
    the one that matches.

    Raises:
        ValueError: 64 draws per record did not find enough image quadruples with such a category.
    """
    index = world.index
    images = sorted(index.image_categories)
    rng = np.random.default_rng([seed, 5])
    records: list[TaskRecord] = []
    for _ in range(64 * count):
        if len(records) == count:
            break
        picked = [int(i) for i in rng.choice(images, size=4, replace=False)]
        answer = len(records) % 4
        others = set().union(*(index.image_categories[i] for k, i in enumerate(picked) if k != answer))
        unique = sorted(index.image_categories[picked[answer]] - others)
        if not unique:
            continue
        category = index.categories[unique[int(rng.integers(len(unique)))]]
        # The answer's caption is one that names the category (demo-world captions name one shape each).
        naming_it = [c for c in index.captions[picked[answer]] if category_pattern(category).search(c)]
        captions = [index.captions[i][int(rng.integers(len(index.captions[i])))] for i in picked]
        captions[answer] = naming_it[int(rng.integers(len(naming_it)))]
        records.append(TaskRecord(OPTIONS, _option_finding_prompt(category, captions), (), (LETTERS[answer],),
                                  answer, (0, 0), 0))
    if len(records) < count:
        raise ValueError(f"drew only {len(records)} of {count} option-finding records: the world's images "
                         "rarely have a category the three others lack")
    return records


def option_word_records(world: ToyWorld, count: int, seed: int) -> list[TaskRecord]:
    """`count` text-only option-finding records whose four options are single category names (four
    distinct categories of the world, seeded), asked with the option-finding question; the answer,
    the letter of the queried name, cycles A-D.

    The shortest form of binding a letter to its option: learned from scratch in ~600 steps, after
    which option finding over full captions follows in a few hundred more (`harness.demo_model.train`).
    """
    names = sorted(world.index.categories.values())
    rng = np.random.default_rng([seed, 13])
    records = []
    for k in range(count):
        picked = [names[i] for i in rng.choice(len(names), size=len(LETTERS), replace=False)]
        answer = k % len(LETTERS)
        records.append(TaskRecord(OPTION_WORDS, _option_finding_prompt(picked[answer], picked), (),
                                  (LETTERS[answer],), answer, (0, 0), 0))
    return records


def _option_finding_prompt(category: str, options: list[str]) -> str:
    """The option-finding question about `category`, then the options as ICIR-MCQ lists them."""
    return "\n".join([OPTIONS_QUESTION.format(category=category), *option_lines(options)])


class PixelCache:
    """Processed pixels of every image a set of records uses, computed once per image.

    ``pixel_values[k]`` is image k's [patches, C * T * P * P] float32 block and ``grid[k]`` its
    ``image_grid_thw`` row, exactly as the processor's image processor returns them.
    """

    def __init__(self, processor, world: ToyWorld, image_files: Sequence[str], chunk: int = 256):
        files = sorted(set(image_files))
        self.position = {file: k for k, file in enumerate(files)}
        blocks, grids = [], []
        for start in tqdm(range(0, len(files), chunk), desc="image pixels", unit="chunk", leave=False):
            images = [world.image(file) for file in files[start:start + chunk]]
            out = processor.image_processor(images=images, return_tensors="pt")
            counts = out["image_grid_thw"].prod(dim=1).tolist()
            blocks += list(out["pixel_values"].split(counts))
            grids.append(out["image_grid_thw"])
        self.pixel_values = blocks
        self.grid = torch.cat(grids) if grids else torch.zeros(0, 3, dtype=torch.long)
        self.merge = processor.image_processor.merge_size

    def tokens_per_image(self, file: str) -> int:
        """Visual tokens of `file` in the language model (patches / merge_size^2)."""
        return int(self.grid[self.position[file]].prod()) // self.merge**2

    def batch(self, image_files: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(``pixel_values`` [sum patches, D], ``image_grid_thw`` [n, 3]) of `image_files`, in order."""
        rows = [self.position[file] for file in image_files]
        return torch.cat([self.pixel_values[k] for k in rows]), self.grid[rows]


@dataclasses.dataclass(frozen=True)
class EncodedSample:
    """A record as model input: ``input_ids`` of the rendered, image-expanded prompt, its images and
    the ids of its correct answer tokens."""

    input_ids: tuple[int, ...]
    image_files: tuple[str, ...]
    answer_ids: tuple[int, ...]
    task: str


def encode_records(processor, records: Sequence[TaskRecord], pixels: PixelCache) -> list[EncodedSample]:
    """Token ids of each record as `harness.capture.inputs.encode_requests` produces them.

    The prompt is rendered with the chat template (`render`), each image placeholder of the
    template is expanded to the image's visual-token count, as the Qwen3-VL processor does, and the
    texts are tokenised in one call.
    """
    tokenizer = processor.tokenizer
    texts = []
    for record in records:
        text, _ = render(processor, CaptureRequest(record.prompt, [None] * len(record.image_files)))
        pieces = text.split(IMAGE_TOKEN)
        expanded = pieces[0]
        for file, piece in zip(record.image_files, pieces[1:]):
            expanded += IMAGE_TOKEN * pixels.tokens_per_image(file) + piece
        texts.append(expanded)
    ids = tokenizer(texts)["input_ids"]
    vocabulary = tokenizer.get_vocab()
    missing = sorted({a for r in records for a in r.answers if a not in vocabulary})
    if missing:
        raise ValueError(f"answer word(s) {missing} are not single tokens of the tokenizer; add them to "
                         "`build_processor`'s answer words")
    return [EncodedSample(tuple(i), r.image_files, tuple(vocabulary[a] for a in r.answers), r.task)
            for i, r in zip(ids, records)]


def mrope_position_ids(input_ids: torch.Tensor, attention_mask: torch.Tensor, image_token_id: int,
                       image_grid_thw: torch.Tensor, merge_size: int) -> torch.Tensor:
    """[3, B, T] Qwen3-VL multimodal RoPE positions (temporal, height, width) of a right-padded batch.

    The values `Qwen3VLModel.get_rope_index` computes for images (``tests/test_demo_model.py``
    compares them on ICIR-MCQ and VHs batches and on a hand-worked layout), in a few whole-batch
    tensor operations instead of its Python loop over samples and images, which took 5-12% of a
    training step (`bench/demo_training_step.py`). A text token takes the next position; an image
    of merged grid h x w starts at the next position p and its token at row r, column c gets
    (p, p + r, p + c); the text after it continues at p + max(h, w). Padding gets 0, as there.

    Args:
        input_ids: [B, T] token ids; each image is one run of `image_token_id` between text tokens.
        attention_mask: [B, T], 1 on real tokens (a prefix of each row), 0 on padding.
        image_grid_thw: [n_images, 3] (1, patch rows, patch columns) of the batch's images in order.
        merge_size: the vision tower's spatial merge (patches per visual token along each side).
    """
    valid = attention_mask.bool()
    is_image = (input_ids == image_token_id) & valid
    before = torch.nn.functional.pad(is_image[:, :-1], (1, 0))
    after = torch.nn.functional.pad(is_image[:, 1:], (0, 1))
    first, last = is_image & ~before, is_image & ~after
    image_of = (first.flatten().cumsum(0) - 1).view_as(input_ids).clamp(min=0)  # row-major = the batch's image order
    grid_h, grid_w = image_grid_thw[:, 1] // merge_size, image_grid_thw[:, 2] // merge_size
    columns = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    run_start = torch.where(first, columns, torch.zeros_like(columns)).cummax(dim=1).values
    offset = columns - run_start
    advance = torch.where(last, torch.maximum(grid_h, grid_w)[image_of], (valid & ~is_image).long())
    start = advance.cumsum(dim=1) - advance
    width = grid_w[image_of]
    rows = torch.where(is_image, offset // width, 0)
    cols = torch.where(is_image, offset % width, 0)
    positions = torch.stack([start, start + rows, start + cols])
    return positions.masked_fill(~valid, 0)


def collate(samples: Sequence[EncodedSample], pixels: PixelCache, pad_id: int, image_token_id: int,
            ) -> dict[str, torch.Tensor]:
    """One right-padded batch: each prompt followed by its first correct answer token, as the
    processor's model inputs (``mm_token_type_ids`` is 1 at image tokens, as `Qwen3VLProcessor`
    sets it; with images, ``position_ids`` [3, B, T] from `mrope_position_ids`, which the model
    would otherwise compute itself) plus ``last`` [B] (last prompt token; the appended answer token
    sits at ``last + 1``) and ``answers`` [B, A] (each sample's correct answer ids, padded with -1
    to the most answers in the batch).

    The appended answer token lets training teach the model to end its turn after the answer
    (`harness.demo_model.train.answer_loss`); the positions up to ``last`` see only the prompt
    (causal attention), so they are what `harness.capture.inputs.encode_requests` gives.
    """
    length = max(len(s.input_ids) for s in samples) + 1
    input_ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), length), dtype=torch.long)
    for row, sample in enumerate(samples):
        input_ids[row, : len(sample.input_ids) + 1] = torch.tensor([*sample.input_ids, sample.answer_ids[0]])
        attention_mask[row, : len(sample.input_ids) + 1] = 1
    files = [file for s in samples for file in s.image_files]
    images = dict(zip(("pixel_values", "image_grid_thw"), pixels.batch(files))) if files else {}
    if files:
        images["position_ids"] = mrope_position_ids(input_ids, attention_mask, image_token_id,
                                                    images["image_grid_thw"], pixels.merge)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "mm_token_type_ids": (input_ids == image_token_id).int(),
        **images,
        "last": attention_mask.sum(dim=1) - 2,
        "answers": torch.nn.utils.rnn.pad_sequence([torch.tensor(s.answer_ids) for s in samples],
                                                   batch_first=True, padding_value=-1),
    }
