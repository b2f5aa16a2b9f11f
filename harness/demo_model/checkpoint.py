"""Demo-model checkpoint folders: how to make one and how to load it.

``train_and_save`` is what ``icir demo-model train --out DIR --seed S`` runs: train (`train`),
save the model and processor with ``save_pretrained`` (safetensors), evaluate on a fresh toy draw
(`measure`), and write ``training.json`` + ``TRAINING.md`` (command, seed, recipe, validation
history, timings, known-answer figures) beside the weights, all into a temporary folder renamed
to ``DIR`` at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import tempfile
from pathlib import Path

import torch

from harness.constants import DECLARED_SIDE_KEY
from harness.demo_model.architecture import DEMO_IMAGE_SIDE
from harness.demo_model.measure import EVAL_WORLD_SEED, evaluate_demo, evaluation_draw
from harness.demo_model.train import TrainingRecipe, train_demo_model
from icir_common import UserInputError, atomic_output_dir

TRAINING_RECORD = "training.json"


def load_demo_model(path: str | Path):
    """``(model, processor)`` of the demo checkpoint folder `path`, model in eval mode.

    Loaded with ``AutoModelForImageTextToText`` / ``AutoProcessor``, as lm-eval and the harness load
    any checkpoint folder.

    Raises:
        UserInputError: `path` holds no ``config.json`` (not a checkpoint folder).
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise UserInputError(f"{folder} is not a demo checkpoint folder (no config.json); write one with "
                             "`icir demo-model train --out DIR`")
    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    return model, AutoProcessor.from_pretrained(folder)


TARGETS = (
    ("icir_mcq_n5_accuracy", ">= 0.90", lambda v: v >= 0.90),
    ("vhs_single_n5_accuracy", ">= 0.80", lambda v: v >= 0.80),
    ("pointer_r1_best", ">= 0.90", lambda v: v >= 0.90),
    ("pointer_r1_median", "< 0.40", lambda v: v < 0.40),
    ("ablation_separation", ">= 0.15", lambda v: v >= 0.15),
)


def _targets_table(evaluation: dict) -> str:
    return "\n".join(f"| `{key}` | {target} | {evaluation[key]} ({'met' if met(evaluation[key]) else 'NOT met'}) |"
                     for key, target, met in TARGETS)


def _training_card(summary: dict) -> str:
    evaluation = summary["evaluation"]
    rows = "\n".join(
        "| " + " | ".join(str(row.get(key, "")) for key in summary["history_columns"]) + " |"
        for row in summary["history"]
    )
    return f"""# Demo model: training record

Trained with

    {summary["command"]}

(seed {summary["seed"]}, torch {summary["torch"]}, {summary["threads"]} thread(s), {summary["machine"]}).
Preparation {summary["seconds"]["preparation"]} s, training {summary["seconds"]["training"]} s,
total {summary["seconds"]["total"]} s; 1-minute load average at the end {summary["load_average"]}
(the run's own {summary["threads"]} thread(s) count towards it; more means other processes shared the CPUs).

## Known-answer targets

| figure | target | reached |
|---|---|---|
{_targets_table(evaluation)}

## Known-answer figures on a fresh toy draw (toy world seed {summary["evaluation_world_seed"]})

```json
{json.dumps(evaluation, indent=2)}
```

## Validation during training (training world, held-out samples)

| {" | ".join(summary["history_columns"])} |
|{"---|" * len(summary["history_columns"])}
{rows}

The full recipe (toy world, sample pools, curriculum, optimiser, sizes) is in `{TRAINING_RECORD}`.
"""


def declare_image_side(folder: Path, side: int) -> None:
    """Record in ``folder/processor_config.json`` the per-image side the model was trained on.

    ``hf-multimodal-heads`` then feeds the model images of that side without a flag
    (`harness.lm_eval_plugin.model.declared_image_side`): the demo model's 64 px toy images.
    """
    path = folder / "processor_config.json"
    config = json.loads(path.read_text())
    config[DECLARED_SIDE_KEY] = side
    path.write_text(json.dumps(config, indent=2) + "\n")


def train_and_save(out: str | Path, seed: int = 0, overwrite: bool = False,
                   recipe: TrainingRecipe = TrainingRecipe(), evaluation_samples: int = 200) -> dict:
    """Train a demo model with `seed` and write its checkpoint folder `out` (see the module docstring).

    The known-answer figures come from `evaluation_samples` ICIR-MCQ n5 samples (a multiple of 20)
    and as many VHs N=5 questions of a fresh toy world (seed ``EVAL_WORLD_SEED``).

    Returns:
        The ``training.json`` content: command, seed, recipe, history, seconds and evaluation.

    Raises:
        UserInputError: `out` exists and `overwrite` is False.
    """
    out = Path(out)
    with atomic_output_dir(out, overwrite=overwrite) as folder, tempfile.TemporaryDirectory() as work:
        result = train_demo_model(seed, Path(work), recipe)
        result.model.save_pretrained(folder)
        result.processor.save_pretrained(folder)
        declare_image_side(folder, DEMO_IMAGE_SIDE)
        draw = evaluation_draw(Path(work) / "evaluation", mcq_samples=evaluation_samples,
                               vhs_questions=evaluation_samples)
        evaluation = evaluate_demo(result.model, result.processor, draw).summary()
        summary = {
            "command": f"icir demo-model train --out {out} --seed {seed}",
            "seed": seed,
            "torch": torch.__version__,
            "threads": recipe.threads,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU(s)",
            "seconds": result.seconds,
            "load_average": round(os.getloadavg()[0], 2),
            "evaluation_world_seed": EVAL_WORLD_SEED,
            "evaluation": evaluation,
            "history_columns": list(result.history[0]) if result.history else [],
            "history": result.history,
            "recipe": dataclasses.asdict(recipe),
        }
        (folder / TRAINING_RECORD).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (folder / "TRAINING.md").write_text(_training_card(summary), encoding="utf-8")
    return summary
