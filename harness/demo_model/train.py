"""Train the demo model: answer-token cross-entropy on ICIR-MCQ and VHs samples of a toy world.

The recipe (`TrainingRecipe`) is a curriculum. Every stage draws batches from a mixture of
encoded sample pools (task x haystack size; `harness.demo_model.data`): first single-image naming,
which aligns the vision tower with the category and background words; then background retrieval
over the images alone (N=1, 2, 5), which makes the model find the image a category names; then
option finding over one-word options, which binds each answer letter to its option line; last
ICIR-MCQ n2/n5 and VHs N=5, with background retrieval and option finding over captions beside
them. Throughout, DropHead inside layer 0 zeroes each layer-0 head but the designated pointer head
L00H00 with probability 0.5 at every step (`TrainingRecipe.head_dropout`), and half of the
background-retrieval batches train under the exclusive-pointer mask
(`harness.demo_model.exclusive_pointer`; `TrainingRecipe.exclusive_pointer_p`), in which L00H00 at
a category's mention is the text's only way to the images. The language model's RoPE has Llama-3
frequency scaling (`harness.demo_model.architecture.DEMO_ROPE_SCALING`). Only the answer is
scored: the logits at the last prompt position (where the first answer token is decoded) against
the correct answer tokens, and the logits at the answer token against the end-of-turn token, so
that generation stops after the one-token answer.

Status (issue 7; seed 0; "fresh draw" = 200 ICIR-MCQ n5 samples and 200 VHs N=5 questions of a
fresh evaluation world). The targets are ICIR-MCQ n5 0.90, VHs N=5 0.80, best pointer head 0.90 at
the cattok with the median below 0.40, and ablation separation 0.15, within 15 minutes of this
project's 2-core CPU machine. All are met.

- The default recipe, `icir demo-model train --seed 0` (the shipped checkpoint since 2026-11-30:
  the recipe of the next item with Llama-3 RoPE scaling and the exclusive-pointer mask on half of
  the background-retrieval batches; 4,400 steps; two threads, alone: preparation 45 s, training
  705 s, 12.5 min in all; the first run, with a 15-second test run beside it at the start, 14.2 min,
  bit-identical weights; a masked step costs 1.00-1.05x an unmasked one side by side,
  `bench/exclusive_pointer_step.py`): validation background retrieval N=5 0.54, 0.93, 1.00 at
  steps 1,000, 2,000, 3,000 (previous default 0.45, 0.81, 0.97), ICIR-MCQ n5 0.28, 0.91, 0.97 at
  steps 3,000, 4,000, 4,400 (VHs N=5 0.64, 0.85, 0.865); fresh draw ICIR-MCQ n5 0.945, VHs N=5 0.84, best pointer
  head L00H00 1.00 (all nine categories; next 0.25, median 0.19), ablation separation 0.497 (top 3
  zeroed 0.25, random sets 0.62-0.885); on the draw `tests/test_demo_model.py` checks (toy world
  seed 424242): 0.97, 0.825, 1.00 (median 0.2075), separation 0.463.
- How the mask was found (2026-11-30). With the scaling alone L00H00 found eight categories at the
  cattok and circle by default (next items). A linear probe on L00H00's keys (before RoPE) tells
  circle's image tokens from the rest as well as any other category's (token-level AUC 0.68; the
  others 0.67-0.73), while the head's query at "circle" ranks them at chance (0.48; the others'
  queries 0.60-0.70): the match could be made, but nothing trained it. Fine-tuning that checkpoint
  for 400-500 steps with the default route closed (L00H00 zeroed off the category tokens and each
  head of layers 1-3 kept from the image values with probability 0.5; image attention blocked at
  every text position but the category tokens, for all heads; or the exclusive-pointer mask on
  every retrieval batch) left circle at 0.19-0.27 at the cattok; under the mask circle retrieval
  rose from 0.14 to 0.30 in those steps, so the route was being learned, only slowly. From scratch
  with the mask on every background-retrieval batch, unmasked validation retrieval N=5 was 0.36,
  0.63 and 0.21 at steps 1,000-3,000 (stopped): the other heads never learned to read images from
  text in the batches that teach the finding, and unmasked they disturbed it; on half of them
  (the default) retrieval took off sooner than without the mask. The same with the third stage at
  900 steps (4,100 in all): fresh draw 0.995, 0.855, best head 0.995, separation 0.71, but VHs N=5
  0.80 on the check draw (0.99, 0.80, 0.995), at the target, so the 1,200-step stage stays.
- The previous default recipe (plain RoPE, no mask; shipped until 2026-11-30; two threads, alone;
  4,400 steps; preparation 45 s, training 885 s, 15.5 min in all; run again on 2026-11-30 with
  faster toy VHs drawing, bit-identical weights in 14.4 min (38 s + 828 s) and 15.8 min (34 s +
  914 s); with packed vision attention (`harness.demo_model.packed_vision`) bit-identical in 14.65
  min (35 s + 844 s) and 15.2 min (39 s + 874 s); with the RoPE positions computed by `collate`
  as well (`mrope_position_ids`; the two together make steps 1.13-1.29x faster side by side,
  `bench/demo_training_step.py`) bit-identical in 12.5 min (42 s + 711 s; the run its `TRAINING.md`
  recorded) and 14.2 min (38 s + 817 s); the same computation varies by 10-15% between runs on
  this machine): validation ICIR-MCQ n5
  0.23 at step 3,000 (400 steps into the last stage), 0.755 at 4,000, 0.895 at 4,400 (VHs N=5 0.535,
  0.825, 0.865); fresh draw ICIR-MCQ n5 0.91, VHs N=5 0.83, best pointer head L00H00 0.83 (next
  0.275, median 0.175), ablation separation 0.457 (top 3 zeroed 0.235, random sets 0.57-0.905); on
  the draw `tests/test_demo_model.py` checks (toy world seed 424242): 0.925, 0.80, 0.845 (median
  0.2075), separation 0.435. All targets but the best head's are met.
- Where the shipped L00H00 points (fresh draw). At the question's mention of the category
  ("... that contains star?") it picks the target 0.90 of the time: 1.00 for eight categories and
  0.00 for circle. At the cattok, the same word in option D (the paper's readout, ~40 tokens
  further from the images), it scores 0.83: its query is the same vector, rotated by RoPE, and
  star falls from 1.00 to 0.62 and diamond to 0.85. Circle is found elsewhere: by L00H00 at the
  "?" after the question's "circle" (1.00) and by L02H03 at option D's colour word "red" (0.92).
  At option D's "star", L00H00 puts 0.13 of its attention on image tokens (0.4-0.6 for most
  categories) and 0.2-0.3 on the instruction's "D" and 0.1 on its "B" ("(A, B, C, or D)", 41 and
  46 tokens back, a fixed offset in every prompt); at option D's "circle" it spreads over the
  options' "a" tokens and ``<|im_start|>``. Neither token precedes the question's mention.
- Slower slow RoPE frequencies (2026-11-30, before the mask; scores of the then shipped L00H00
  split by frequency pair on the fresh draw): the eight categories it finds are matched through the five slowest of its
  eight frequencies, never the three fastest, and star through the fourth (wavelength 199 tokens),
  which turns 1.3 rad over the ~40 tokens from the question's mention to option D's: that is why
  star falls at the cattok. Llama-3 RoPE scaling (transformers' ``rope_type="llama3"``, factor 32,
  low and high frequency factors 1 and 2, original context 128: the three fastest frequencies
  kept, the other five turned 32x slower, under 0.15 rad over 150 tokens) fixed star. Seed 0
  (13.2 min): validation ICIR-MCQ n5 0.25, 0.91, 0.975 at steps 3,000, 4,000, 4,400; fresh draw
  ICIR-MCQ n5 0.95, VHs N=5 0.82, best head L00H00 0.90 (star 1.00, circle 0.27, the other seven
  0.96-1.00; median 0.18), separation 0.38; on the check draw (seed 424242) 0.95, 0.755, 0.90.
  Circle stays where it was: L00H00 finds it at the "?" after the question's mention and at the
  chat template's tokens before the answer (20 of 20 circle questions each), where its query is the
  same whatever the category, so circle images are what the head selects by default; its query at
  "circle" spreads over the options' "a" tokens. Zeroing L00H00 after the question's mention in
  background-retrieval batches (so that it could not find circle after the mention) moved the
  circle finding to L01H04 (20 of 20 at most tokens after the mention), not to L00H00's mention:
  fresh draw 0.99, 0.835, best head 0.89 (circle 0.19), check draw 0.985, 0.78, 0.89. With the
  last stage at VHs 0.5 and ICIR-MCQ n5 0.25 (instead of 0.45 and 0.3) as well: fresh 0.98,
  0.805, 0.89, check 0.99, 0.78, 0.89; the scaling with that reweighting alone: fresh 0.865, 0.88,
  0.895, check 0.835, 0.79, 0.89. Seeds 1 and 3 with the scaling: background retrieval N=5 stayed
  at 0.42-0.47 up to step 3,000 (stopped; not run with plain RoPE, so the seed and the scaling
  are not separated); seed 2 with the zeroing: fresh 0.83, 0.84, best head 0.825. None shipped:
  with the scaling VHs N=5 on the check draw was 0.755-0.79 in all four seed-0 runs (the target
  0.80; the shipped checkpoint 0.80), and the best head stayed at 0.89-0.90, short while circle is
  found by default.
- Cattok retrieval (2026-11-30, seed 0): the ICIR-MCQ prompt cut after the cattok, answered with
  the target's background word, so that option D's category word has to find the image. In place
  of the caption background retrieval of the last stage (10% of its batches): with the tokenizer
  fitted to every pool (so all draws changed), background retrieval never formed (cattok
  retrieval 0.64 at the end; fresh draw ICIR-MCQ n5 0.27, VHs N=5 0.56, best head L01H01 0.445);
  with the default tokenizer and draws, so that the first 2,600 steps were the shipped run's and
  only those 10% of last-stage batches differed, the letters came ~400 steps later (validation
  0.355 at step 4,000, 0.50 at 4,400) and the best head stayed where it was (fresh draw ICIR-MCQ
  n5 0.54, VHs N=5 0.78, best head L00H00 0.825, separation 0.23). DropHead on every head of
  layers 1-3 (p 0.25) in the last stage only, otherwise the shipped run (so the same first 2,600
  steps): validation ICIR-MCQ n5 0.285 at step 4,000, 0.395 at 4,400; fresh draw 0.37, VHs N=5
  0.79, best head L00H00 0.775, separation 0.087.
- Runs of 2026-11-30, seed 0, after the toy VHs filler fix (preparation 33-38 s instead of 45 s):
  batch 28 instead of 32 (4,400 steps; 13.8 min): validation ICIR-MCQ n5 0.25 at step 3,000, 0.415
  at 4,000, 0.49 at 4,400; fresh draw ICIR-MCQ n5 0.455, VHs N=5 0.68, best pointer head 0.625.
  Batch 28 with a 2,050-step last stage (4,650 steps; 13.2 min): validation 0.265, 0.565, 0.805 at
  4,650; fresh draw 0.805, 0.78, best head L00H00 0.835 (median 0.2075), separation 0.368. The same
  with a 2,350-step last stage (4,950 steps; 14.9 min): validation 0.235, 0.25, 0.29 at 4,950 (the
  letters never came); fresh draw 0.30, 0.685, best head 0.72. With the third stage at 1,000 steps
  and 4,000 option-finding records (batch 32), background retrieval N=5 was at 0.44, 0.47 and 0.62
  at steps 1,000-3,000 (the default: 0.45, 0.81, 0.97), so the run was stopped. One thread each, two
  runs at a time, default recipe otherwise: 3 heads of dimension 32 per layer (12 heads; same width)
  gave background retrieval N=5 0.34, 0.41, 0.77, 0.83 at steps 1,000-4,000 and a fresh draw of
  ICIR-MCQ n5 0.275, VHs N=5 0.625, best head 0.53; RoPE base 1e5, 0.42, 0.71, 0.74, 0.78 and 0.395,
  0.60, 0.59; DropHead on every head but L00H00 (p 0.5 in layer 0 and 0.25 or 0.5 elsewhere),
  0.45-0.48 at step 1,000 and 0.42-0.55 up to step 3,000 (stopped). When retrieval takes off varies
  by 800+ steps between runs (the stage-3 run above differs from the default before step 2,000 only
  in its tokenizer and learning-rate schedule), so one run per change does not separate its effect
  from chance.
- The default recipe with 4,700 steps (1,300 two-and-five-image retrieval, 500 one-word option
  finding, 1,900 ICIR-MCQ/VHs with VHs at 40% and ICIR-MCQ n2 at 15%; validation every 500 steps;
  17.0 min, two threads, alone): validation ICIR-MCQ n5 0.23 at step 3,000 (200 steps into the last
  stage), 0.41, 0.90 at 4,000, 0.965 at 4,700; fresh draw ICIR-MCQ n5 0.96, VHs N=5 0.755, best
  pointer head L00H00 0.765 (next 0.28, median 0.1975), ablation separation 0.485 (top 3 zeroed
  0.24, random sets 0.495-0.94).
- Without DropHead the finding is spread over layer 0 or split by category. 5,500 steps (1,600
  two-and-five-image retrieval, 2,400 ICIR-MCQ/VHs with VHs at 35%; 29 min, one thread beside
  another run): fresh draw ICIR-MCQ n5 0.97, VHs N=5 0.73, best pointer head 0.34 (all six layer-0
  heads 0.285-0.34), separation 0.06. With DropHead, otherwise the same (30.6 min): ICIR-MCQ n5
  0.98, VHs N=5 0.795, best pointer head L00H00 0.715 (next 0.275, median 0.21), separation 0.59.
- The best head finds at most 7 of the 9 categories. Scored per category on the fresh draw,
  L00H00 of the DropHead run above picks the target every time for arrow, diamond, heart, square,
  star and triangle and at most 0.35 for circle, cross and leaf (which the model still answers
  0.88-1.00, so it finds those images elsewhere). Session 4's best run continued for 1,200 more
  ICIR-MCQ/VHs steps (fresh draw ICIR-MCQ n5 1.00, VHs N=5 0.825, separation 0.625) split them
  as L00H03 for seven categories, L00H04 for leaf, and no head at the cattok for cross (best
  L01H03 0.63; at the cattok of background retrieval over the images alone no layer-0 head puts
  more than 0.1 of its attention on the cross image). Its best head stayed at 0.79 after 600 more
  steps of DropHead on every head (p 0.25: 0.78) or on layer 0 but L00H03 (p 0.5: 0.79). A
  likely bound (not measured): with RoPE base 1e4 and 16 dimensions per head only the slowest
  ~3 of 8 frequency pairs stay nearly unrotated over the ~100-150 tokens between a question and
  the images, so a layer-0 head has about 6 position-free dimensions to match category words to
  image tokens.
- The letters come late: ICIR-MCQ n5 stays at chance for the first 750-1,200 steps of the last
  stage in every run; 1,200 steps of option finding before it (one-word and over captions)
  instead of 500 did not shorten that (0.495 versus 0.62 about 1,000 steps in).
- Step times, alone, two threads versus one: ICIR-MCQ n5 0.40 / 0.61 s, background retrieval
  over five images 0.23 / 0.32 s, naming 0.09 / 0.13 s, VHs N=5 0.21 / 0.26 s (batch 32).

Earlier, without DropHead or the end-of-turn target, on the current demo world
(`icir_mcq.toy.worlds`: one caption per shape, so the four options differ only in the background
and the answer is the background of the one image that shows the category):

- session 4's default (4,000 steps; no DropHead; 1,000 two-and-five-image retrieval steps, 1,500
  ICIR-MCQ/VHs steps with VHs at 20%), run by the experiment runner of the session that found it
  (same stages and pools; 19.1 min on one thread with other jobs on both cores): validation ICIR-MCQ n5
  0.29 at step 3,250, 0.50, 0.695, then 0.865 at step 4,000 (n2 0.905, background retrieval N=5
  1.00, VHs N=5 0.645), still rising; fresh draw ICIR-MCQ n5 0.88, VHs N=5 0.67, best pointer head
  0.78 at the cattok (L00H03; next L00H04 0.50, median 0.21), ablation separation 0.39 (top 3
  zeroed 0.28, three random sets of 3 0.615-0.77). Retrieval comes from layer 0's heads. The
  same recipe through `icir demo-model train --seed 0` (other draws of the same pools, so another
  tokenizer and batch stream; 16.8 min, alone on one thread): background retrieval took off ~800
  steps later (N=5 0.655 at step 2,400 versus 0.88), so ICIR-MCQ had less time: validation n5 0.77
  at step 4,000 (0.465 at 3,600); fresh draw ICIR-MCQ n5 0.80, VHs N=5 0.575, best pointer head
  0.545 (L00H02, median 0.21), separation 0.24 (top 3 zeroed 0.32, random 0.39-0.785). When the
  finding half takes off varies by ~800 steps with the draws, so a fixed schedule needs slack;
- letters first (one-word option finding, naming, small haystacks, then ICIR-MCQ with VHs; 3,400
  steps, 16.4 min with other jobs on both cores; `icir demo-model train`): fresh draw ICIR-MCQ n5
  0.505, VHs N=5 0.545, best pointer head 0.28 (median 0.195), ablation separation -0.08: with
  retrieval only mixed in, the model matched the options against every image;
- the previous default (naming, then VHs N=1-5 with a little ICIR-MCQ; 2,400 steps; 11.2 min
  with another run beside it): fresh draw VHs N=5 0.74, ICIR-MCQ n5 0.25 (it never saw option
  letters bound), best pointer head 0.40 at the cattok (median 0.25), separation -0.02. VHs first
  makes more of a pointer than the default does, but no letters;
- one-word option finding from scratch leaves chance after ~350 steps; its training loss is below
  0.06 by step 600 in 8 of 8 runs (learning rate 1e-3 or 2e-3; validation 1.00 in the 3 that
  measured it). Option finding over captions then reaches 0.97 within 800 more steps (60% of the
  batches); over captions alone it took ~1,000 steps (0.94). After naming, or naming and
  retrieval (the default), it was still at a loss of 1.2-1.25 (chance 1.39) 500 steps in; in the
  default the letters then come within ICIR-MCQ training, 750-1,000 steps into it;
- ICIR-MCQ with the target image alone (n1) reaches 0.995 by step 2,400 (on the previous world,
  whose captions named every shape, it levelled off at 0.78-0.80 after 3,000 steps); n2 0.73-0.77
  and n5 0.39-0.51 by steps 2,700-4,800. With 2 images, matching the options against every image
  is expected to give ~0.7 (the distractor shows a wrong option's background 3 times in 5), and
  in 97% of n5 samples a distractor shows a wrong option's background (tests/test_toy_worlds.py),
  so n5 ~0.5 is what matching without finding gives;
- background retrieval ("What colour is the background of the image above that contains
  <category>?"), the finding half of ICIR-MCQ with the bare answer, stays at 0.57-0.68 (N=2) and
  0.36-0.44 (N=5) after 500 dedicated steps and 3,000 mixed ones: no pointer forms. A 4,800-step
  run (25 min, 1 thread beside another run) scored on a fresh draw ICIR-MCQ n5 0.51, VHs N=5 0.515,
  best pointer head 0.28 at the cattok (median 0.21), ablation separation -0.015;
- background retrieval over the images alone (`BARE_RETRIEVAL`), after 400 naming steps, with
  only naming (20%) beside it: N=2 / N=5 stay at 0.61-0.70 / 0.38-0.43 until step 1,600 (1,200
  retrieval steps), then rise within 400 steps to 0.99 / 0.97 (step 2,000, 6 min on one thread
  beside another run); with passages, never trained on, 0.96 / 0.89, and by step 2,600 all four
  are at 0.995-1.00. So the finding half is learnable here, given batches of its own. It is not
  one pointer head, though: on 200 fresh N=5 retrievals the best head picks the target 0.545 of
  the time at the cattok (L00H03) and 0.465 at the last position (median 0.21-0.23), and 0.385 at
  the ICIR-MCQ cattok: the model finds the image with several heads at once;
- VHs N=5 stays at 0.45-0.60 in every recipe that starts with letters and gives VHs under a third
  of the batches.

On the previous demo world (every caption named every shape and the background, in varied
templates; 2026-11-28/29):

- the naming warm-up took VHs N=1 from chance to 0.98 within 300 steps after it; without it VHs
  N=1 stayed at 0.50-0.64 after 2,500 steps;
- the VHs-first recipe (2,400 steps, 11.7 min): fresh draw VHs N=5 0.765, ICIR-MCQ n5 0.26, best
  pointer head 0.33 (median 0.22), separation 0.002;
- pools of ~3,000 records get memorised (option finding on 2,840 records: training loss 0.88 at
  step 600, validation 0.43); RoPE base 1e4 instead of 5e6 (`architecture.DEMO_ROPE_THETA`) moved
  option finding off chance ~300 steps sooner (0.78 versus 0.45 at step 1,000);
- option finding, then ICIR-MCQ n1, then n5/n2/n1/VHs (37 min): fresh draw ICIR-MCQ n5 0.47, VHs
  N=5 0.565, best pointer head 0.325, separation -0.03; with the distractors swapped for images of
  a wrong option's scene minus the category, n5 fell to 0.31: it matched options against every
  image, not the one the category names;
- a 14-configuration sweep on a 16-core machine (learning rates 1e-3/2e-3, batch 16-64, 4 or 6
  layers, 6 or 8 heads; 800-1,570 steps each): ICIR-MCQ n1, n2 and n5 at chance throughout.

Reproducible: the toy world, the sample draws, the tokenizer, the initial weights and the batch
order all follow from the seed; torch runs deterministic algorithms on a fixed number of threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from harness.capture import ablate_heads, answer_token_ids
from harness.demo_model.architecture import DEMO_SIZES, VOCAB_SIZE, build_model, build_processor
from harness.demo_model.data import (
    BACKGROUND_WORDS,
    BARE_RETRIEVAL,
    MCQ,
    NAMING,
    OPTION_WORDS,
    OPTIONS,
    RETRIEVAL,
    VHS,
    EncodedSample,
    PixelCache,
    TaskRecord,
    ToyWorld,
    collate,
    encode_records,
    mcq_records,
    naming_records,
    open_world,
    option_records,
    option_word_records,
    retrieval_records,
    vhs_records,
)
from harness.demo_model.exclusive_pointer import exclusive_pointer
from harness.demo_model.packed_vision import packed_vision_attention
from harness.tiny_models.parts import TextSizes


POOL_SEEDS = 100  # draw seeds per training seed, shared by training and validation pools


def pool_name(task: str, n_images: int) -> str:
    """Name of the pool of `task` at haystack size `n_images`, e.g. ``"icir_mcq-n5"``."""
    return f"{task}-n{n_images}"


@dataclasses.dataclass(frozen=True)
class Pool:
    """One source of training samples: `count` records of `task` at haystack size `n_images`."""

    task: str
    n_images: int
    count: int


@dataclasses.dataclass(frozen=True)
class Stage:
    """`steps` optimiser steps, each on a batch from one pool drawn with probabilities `weights`
    (pool name ``"<task>-n<N>"`` -> weight)."""

    steps: int
    weights: dict[str, float]


@dataclasses.dataclass(frozen=True)
class TrainingRecipe:
    """Everything that defines a training run besides the seed."""

    world_images: int = 4000
    pools: tuple[Pool, ...] = (
        Pool(NAMING, 1, 3600), Pool(BARE_RETRIEVAL, 1, 4000), Pool(BARE_RETRIEVAL, 2, 8000),
        Pool(BARE_RETRIEVAL, 5, 8000), Pool(RETRIEVAL, 5, 8000), Pool(OPTION_WORDS, 0, 12000),
        Pool(OPTIONS, 0, 12000), Pool(MCQ, 2, 8000), Pool(MCQ, 5, 12000), Pool(VHS, 5, 8000),
    )  # large enough that few records are seen twice: with 3,000-record pools option finding was memorised
    # Finding the image first, on its own, then letters, then ICIR-MCQ with VHs (module docstring).
    stages: tuple[Stage, ...] = (
        Stage(400, {pool_name(NAMING, 1): 1.0}),
        Stage(600, {pool_name(BARE_RETRIEVAL, 1): 0.3, pool_name(BARE_RETRIEVAL, 2): 0.5, pool_name(NAMING, 1): 0.2}),
        Stage(1200, {pool_name(BARE_RETRIEVAL, 2): 0.4, pool_name(BARE_RETRIEVAL, 5): 0.4, pool_name(NAMING, 1): 0.2}),
        Stage(400, {pool_name(OPTION_WORDS, 0): 0.8, pool_name(BARE_RETRIEVAL, 5): 0.2}),
        Stage(1800, {pool_name(MCQ, 2): 0.1, pool_name(MCQ, 5): 0.3, pool_name(RETRIEVAL, 5): 0.1,
                     pool_name(OPTIONS, 0): 0.05, pool_name(VHS, 5): 0.45}),
    )
    # DropHead (Zhou et al., 2020, "Scheduled DropHead") inside one layer: at every step each head of
    # `pointer_head`'s layer other than it is zeroed with probability `head_dropout`, so that the
    # finding concentrates in that head instead of being spread over the layer's heads.
    pointer_head: tuple[int, int] = (0, 0)
    head_dropout: float = 0.5
    # Each batch of these tasks trains under `exclusive_pointer` (the pointer head at a category's
    # mention the only way to the images) with probability `exclusive_pointer_p`.
    exclusive_pointer_tasks: tuple[str, ...] = (BARE_RETRIEVAL, RETRIEVAL)
    exclusive_pointer_p: float = 0.5
    validation: tuple[Pool, ...] = (Pool(MCQ, 5, 200), Pool(VHS, 5, 200), Pool(RETRIEVAL, 5, 100))
    validate_every: int = 1000
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    sizes: TextSizes = DEMO_SIZES
    vocab_size: int = VOCAB_SIZE
    threads: int = 2

    def __post_init__(self):
        # Pool k draws with seed POOL_SEEDS * seed + k and validation pool k with POOL_SEEDS * seed +
        # POOL_SEEDS - 1 - k: more pools would give a validation pool the draw seed of a training pool.
        if len(self.pools) + len(self.validation) > POOL_SEEDS:
            raise ValueError(f"{len(self.pools)} training and {len(self.validation)} validation pools: "
                             f"at most {POOL_SEEDS} in all, or validation draws would repeat training draws")

    @property
    def total_steps(self) -> int:
        return sum(stage.steps for stage in self.stages)


def pool_task(name: str) -> str:
    """The task of the pool called `name` (`pool_name`'s inverse for the task)."""
    return name.rsplit("-n", 1)[0]


def draw_records(world: ToyWorld, task: str, n_images: int, count: int, seed: int) -> list[TaskRecord]:
    """`count` records of `task` (``MCQ`` and the retrievals round `count` down to a balanced multiple
    of lcm(N, 4); ``NAMING`` is single-image, `n_images` must be 1; option finding is text-only, 0)."""
    if task == NAMING:
        if n_images != 1:
            raise ValueError(f"naming shows one image, got a pool of haystack size {n_images}")
        return naming_records(world, count, seed)
    if task in (OPTIONS, OPTION_WORDS):
        if n_images != 0:
            raise ValueError(f"option finding is text-only, got a pool of haystack size {n_images}")
        return (option_records if task == OPTIONS else option_word_records)(world, count, seed)
    if task in (MCQ, RETRIEVAL, BARE_RETRIEVAL):
        step = math.lcm(max(n_images, 2), 4)
        samples = max(step, count // step * step)
        if task == MCQ:
            return mcq_records(world, n_images, samples, seed)
        return retrieval_records(world, n_images, samples, seed, passages=task == RETRIEVAL)
    return vhs_records(world, n_images, count - count % 2, seed)


def answer_loss(model, batch: dict[str, torch.Tensor], end_of_turn_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(scalar loss, [B] bool correct) of a `collate` batch: the answer at ``batch["last"]``
    (``answers`` [B, A] correct answer ids, -1 padded) and the end of the turn after it.

    Only two positions per sample are projected by the LM head: the last prompt position (where the
    first answer token is decoded) and the appended answer token, whose target is `end_of_turn_id`
    (``<|im_end|>``), so that generation stops after the one-token answer as a chat model's does
    (lm-eval's VHs scoring reads the generated text). A sample's answer loss is the mean negative
    log-probability of its correct answers (cross-entropy against the uniform distribution over
    them; plain cross-entropy for one answer); the loss is its mean plus the mean end-of-turn
    cross-entropy. A sample is correct when the full-vocabulary argmax at ``last`` is one of its answers.
    """
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "mm_token_type_ids", "pixel_values", "image_grid_thw",
                                    "position_ids") if k in batch}
    hidden = model.model(**inputs, use_cache=False).last_hidden_state
    rows = torch.arange(hidden.shape[0])
    logits, end_logits = model.lm_head(torch.stack([hidden[rows, batch["last"]], hidden[rows, batch["last"] + 1]]))
    answers = batch["answers"]
    valid = answers >= 0
    log_p = logits.log_softmax(-1).gather(1, answers.clamp(min=0))
    answer_nll = -((log_p * valid).sum(1) / valid.sum(1)).mean()
    end_nll = torch.nn.functional.cross_entropy(end_logits, torch.full_like(rows, end_of_turn_id))
    correct = ((logits.argmax(-1, keepdim=True) == answers) & valid).any(1)
    return answer_nll + end_nll, correct


@torch.no_grad()
def accuracy(model, samples: Sequence[EncodedSample], pixels: PixelCache, pad_id: int, image_token_id: int,
             end_of_turn_id: int, batch_size: int = 64) -> float:
    """Fraction of `samples` whose answer token is the argmax of the full-vocabulary next-token logits."""
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, len(samples), batch_size):
        batch = collate(samples[start:start + batch_size], pixels, pad_id, image_token_id)
        correct += int(answer_loss(model, batch, end_of_turn_id)[1].sum())
    model.train(was_training)
    return correct / len(samples)


def _learning_rate(step: int, recipe: TrainingRecipe) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak (fraction of ``learning_rate``)."""
    if step < recipe.warmup_steps:
        return (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, recipe.total_steps - recipe.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


@dataclasses.dataclass
class TrainingResult:
    """A trained model, its processor, and the log of the run (validation accuracies by step, seconds)."""

    model: object
    processor: object
    history: list[dict]
    seconds: dict[str, float]


def train_demo_model(seed: int, work_dir: Path, recipe: TrainingRecipe = TrainingRecipe()) -> TrainingResult:
    """Train a demo model from scratch with `seed`; the toy world is written under `work_dir`.

    The training world uses toy-corpus seed ``1_000_000 + seed`` (evaluations use other seeds, so
    no image is shared); each pool draws its records with its own seed derived from `seed`.

    Returns:
        `TrainingResult` with the model in eval mode.
    """
    with _reproducible(recipe.threads):
        return _train(seed, work_dir, recipe)


@contextlib.contextmanager
def _reproducible(threads: int) -> Iterator[None]:
    """Deterministic torch algorithms on `threads` intra-op threads; the previous settings are restored."""
    previous = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])


def _train(seed: int, work_dir: Path, recipe: TrainingRecipe) -> TrainingResult:
    started = time.perf_counter()
    world = open_world(work_dir / "toy", recipe.world_images, seed=1_000_000 + seed)
    records: dict[str, list[TaskRecord]] = {}
    for k, pool in enumerate(tqdm(recipe.pools, desc="drawing samples", unit="pool")):
        records[pool_name(pool.task, pool.n_images)] = draw_records(world, pool.task, pool.n_images, pool.count,
                                                                    seed=POOL_SEEDS * seed + k)
    validation = {
        "val-" + pool_name(pool.task, pool.n_images): draw_records(world, pool.task, pool.n_images, pool.count,
                                                                   seed=POOL_SEEDS * seed + POOL_SEEDS - 1 - k)
        for k, pool in enumerate(recipe.validation)
    }
    all_records = [r for group in (*records.values(), *validation.values()) for r in group]
    processor = build_processor([r.prompt.replace("<image>", "") for r in all_records], recipe.vocab_size,
                                answer_words=[*sorted(world.index.categories.values()), *BACKGROUND_WORDS])
    pixels = PixelCache(processor, world, [f for r in all_records for f in r.image_files])
    encoded = {name: encode_records(processor, group, pixels) for name, group in records.items()}
    encoded_validation = {name: encode_records(processor, group, pixels) for name, group in validation.items()}
    prepared = time.perf_counter()

    model = build_model(processor, recipe.sizes, seed)
    model.train()
    pad_id, image_token_id = processor.tokenizer.pad_token_id, model.config.image_token_id
    end_of_turn_id = processor.tokenizer.eos_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _learning_rate(step, recipe))
    rng = np.random.default_rng([seed, 7])
    drop_rng = np.random.default_rng([seed, 8])  # its own stream: the batches do not depend on `head_dropout`
    exclusive_rng = np.random.default_rng([seed, 9])  # likewise for `exclusive_pointer_p`
    category_ids = None
    if recipe.exclusive_pointer_p > 0 and {pool.task for pool in recipe.pools} & set(recipe.exclusive_pointer_tasks):
        categories = sorted(world.index.categories.values())
        category_ids = torch.tensor(answer_token_ids(processor, [" " + name for name in categories]))
    layer, pointer = recipe.pointer_head
    droppable = [(layer, head) for head in range(recipe.sizes.num_attention_heads) if head != pointer]
    history: list[dict] = []
    step = 0
    progress = tqdm(total=recipe.total_steps, desc="training", unit="step")
    with packed_vision_attention(model):
        for stage in recipe.stages:
            names = list(stage.weights)
            probabilities = np.array([stage.weights[n] for n in names]) / sum(stage.weights.values())
            for _ in range(stage.steps):
                # One pool per batch: its prompts have similar lengths, so little padding is computed.
                name = names[rng.choice(len(names), p=probabilities)]
                pool = encoded[name]
                batch_samples = [pool[i] for i in rng.integers(len(pool), size=recipe.batch_size)]
                batch = collate(batch_samples, pixels, pad_id, image_token_id)
                dropped = [head for head in droppable if drop_rng.random() < recipe.head_dropout]
                exclusive = (pool_task(name) in recipe.exclusive_pointer_tasks
                             and exclusive_rng.random() < recipe.exclusive_pointer_p)
                mask = (exclusive_pointer(model, batch["input_ids"], category_ids, recipe.pointer_head)
                        if exclusive else contextlib.nullcontext())
                with ablate_heads(model, dropped), mask:
                    loss, _ = answer_loss(model, batch, end_of_turn_id)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                progress.update()
                progress.set_postfix(loss=f"{loss.item():.3f}")
                if step % recipe.validate_every == 0 or step == recipe.total_steps:
                    row = {"step": step, "loss": round(loss.item(), 4),
                           "seconds": round(time.perf_counter() - started, 1)}
                    row |= {name: accuracy(model, samples, pixels, pad_id, image_token_id, end_of_turn_id)
                            for name, samples in encoded_validation.items()}
                    history.append(row)
                    progress.write(" ".join(f"{k}={v}" for k, v in row.items()))
    progress.close()
    model.eval()
    finished = time.perf_counter()
    return TrainingResult(model, processor, history,
                          {"preparation": round(prepared - started, 1), "training": round(finished - prepared, 1),
                           "total": round(finished - started, 1)})
