"""A known-answer demo LVLM: a small real Qwen3-VL trained on the toy world to retrieve images in context.

No real LVLM weights can be downloaded here or in CI, and a random model has no retrieval heads.
This package trains a small `Qwen3VLForConditionalGeneration` (real architecture, processor and
chat template) on Visual Haystacks and ICIR-MCQ samples drawn from a demo-world toy corpus of its
own (`icir_mcq.toy.worlds`), after single-image naming and text-only option-finding warm-ups,
writes the checkpoint folder (safetensors + config + tokenizer + processor + training record),
and measures it on a fresh toy draw (`measure`: accuracies, pointer R@1, head ablation).

The checkpoint trained with the default recipe ships in ``shipped/`` (`SHIPPED_DEMO_MODEL`, with
its ``TRAINING.md``: command, seed, figures) and is the default model of ``icir eval`` and
``icir demo`` (`default_model_path`).

Modules: ``architecture`` (sizes, tokenizer, model), ``data`` (toy worlds, records, encoding),
``train`` (the curriculum and loop), ``measure`` (accuracy, pointer R@1, head ablation),
``checkpoint`` (loading, ``train_and_save``) and ``cli`` (``icir demo-model``).
"""

from pathlib import Path

from harness.model_names import SHIPPED_DEMO_MODEL
from icir_common import UserInputError


def default_model_path() -> Path:
    """Folder of the shipped demo model: the default model of ``icir eval`` and ``icir demo``.

    A ``save_pretrained`` layout (safetensors, config, tokenizer, processor and ``TRAINING.md``),
    loadable with ``from_pretrained``; it is package data, so nothing is downloaded and every
    process of a data-parallel run loads the same files.

    Raises:
        UserInputError: the folder has no ``config.json`` or ``model.safetensors`` (the package was
            installed without its data files).
    """
    missing = [name for name in ("config.json", "model.safetensors") if not (SHIPPED_DEMO_MODEL / name).is_file()]
    if missing:
        raise UserInputError(f"the shipped demo model {SHIPPED_DEMO_MODEL} lacks {', '.join(missing)}: reinstall the "
                             "package with its data (`pip install -e .` from a clone), or pass a model with "
                             "--model_args pretrained=DIR")
    return SHIPPED_DEMO_MODEL
