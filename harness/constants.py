"""Every list the harness shares, written once: model name, tasks, sizes, vote Ks, metric names
(and the one parser of the VHs single-needle task names they generate, `vhs_single_size`).

The per-size task YAMLs in ``harness/tasks/`` are generated from this module by
``harness/tasks/_generate_configs.py`` (as lm-eval generates its task variants);
``tests/test_task_configs.py`` fails when the committed YAMLs differ from what it generates.
"""

from __future__ import annotations

import re

from vhs_adapter.question_files import DEFAULT_SIZES

MODEL_NAME = "hf-multimodal-heads"

# ICIR-MCQ configs (paper §3.2, App. B: 5 and 6 candidate images); the group pools both.
ICIR_MCQ_CONFIGS: tuple[str, ...] = ("n5", "n6")
ICIR_MCQ_GROUP = "icir_mcq"
ICIR_MCQ_TASKS: tuple[str, ...] = tuple(f"icir_mcq_{config}" for config in ICIR_MCQ_CONFIGS)



def icir_mcq_unit(units) -> str | None:
    """The unit ICIR-MCQ figures are reported on, among `units` (names): the pooled group when
    present, else the first ``icir_mcq_n*`` task; None without either."""
    return next((unit for unit in (ICIR_MCQ_GROUP, *ICIR_MCQ_TASKS) if unit in units), None)


# The text needle-in-a-haystack probe (App. K), a hand-written task YAML.
TEXT_NEEDLE_TASKS: tuple[str, ...] = ("text_needle",)
# The store's tensors of a text needle document: [L, H] needle mass, exact (Eq. 1) and Eq. 3.
NEEDLE_TENSORS: tuple[str, ...] = ("needle_mass", "needle_mass_eq3")

# Visual Haystacks haystack sizes N (§4.3, App. A): the toolkit's files; multi-needle has no oracle.
VHS_SINGLE_SIZES: tuple[int, ...] = tuple(DEFAULT_SIZES)
VHS_MULTI_SIZES: tuple[int, ...] = tuple(n for n in DEFAULT_SIZES if n > 1)
VHS_GROUPS: dict[str, tuple[str, ...]] = {
    "vhs_single": tuple(f"vhs_single_n{n}" for n in VHS_SINGLE_SIZES),
    "vhs_multi": tuple(f"vhs_multi_n{n}" for n in VHS_MULTI_SIZES),
}



def vhs_single_size(task: str) -> int | None:
    """Haystack size N of a ``vhs_single_n{N}`` task name, None for any other task."""
    match = re.fullmatch(r"vhs_single_n(\d+)", task)
    return None if match is None else int(match.group(1))


# Groups whose head metrics are computed over all their tasks' documents at once (the paper
# reports one best head and one set of writer probes over all of ICIR-MCQ).
POOLED_GROUPS: dict[str, tuple[str, ...]] = {ICIR_MCQ_GROUP: ICIR_MCQ_TASKS}

# Top-K majority votes (App. H, Figure 6).
VOTE_KS: tuple[int, ...] = (1, 3, 5, 10, 20, 30)

# Size K of the top-K head sets the paper compares (App. G, I, J: the top-100 of 1,152 heads),
# capped at L*H for smaller models.
TOP_K_SETS = 100

# Readout positions (App. G): the cattok, the next four tokens, the prompt's middle, its last token.
READOUT_POSITIONS: tuple[str, ...] = ("cattok", "+1", "+2", "+3", "+4", "mid", "last")

# The two pointer scores of one prefill: Eq. 1 (the model's attention rows) and the Eq. 3 proxy.
POINTER_SCORES: tuple[str, ...] = ("exact", "eq3")

# Name suffixes of the pointer metrics (protocol icir-heads/2): the bare name is the unit's ranking
# score (Eq. 3 on protocol), ``_exact`` always Eq. 1 and ``_eq3`` always Eq. 3.
POINTER_SUFFIXES: tuple[str, ...] = ("", *(f"_{score}" for score in POINTER_SCORES))

# Head metrics the analysis stage adds to lm-eval's results (key ``<metric>,none``).
POINTER_METRICS: tuple[str, ...] = (
    *(f"{metric}{suffix}" for metric in ("pointer_r1", "pointer_top_head", "pointer_r1_median", "pointer_r1_oracle")
      for suffix in POINTER_SUFFIXES),
    "chance_r1", "pointer_rank_spearman", "pointer_top10_overlap",
)
# Metrics that are indices or reference levels, not scores (lm-eval's table gives them no arrow).
POINTER_INDEX_METRICS: tuple[str, ...] = (*(f"pointer_top_head{suffix}" for suffix in POINTER_SUFFIXES), "chance_r1")
WRITER_METRICS: tuple[str, ...] = ("writer_r1",)
VOTE_METRICS: tuple[str, ...] = tuple(f"vote_r1@{k}" for k in VOTE_KS)
WRITER_VOTE_METRICS: tuple[str, ...] = tuple(f"writer_vote_r1@{k}" for k in VOTE_KS)

# The key of a model folder's processor_config.json under which a model declares the per-image side
# it was trained on (the shipped demo model: 64 px), used instead of its family's protocol side.
DECLARED_SIDE_KEY = "icir_image_side"

# Documents per activation-store shard: a killed run recomputes at most this many.
STORE_FLUSH = 16

# Folder names inside a run folder ``OUTPUT/<model name>/``.
ARTIFACTS_FOLDER = "icir_artifacts"
STORE_FOLDER = "activations"
# The settings file of a writer probes folder (`harness.metrics.probes.WriterProbes.save`).
WRITER_PROBES_SETTINGS = "writer_probes.json"
