"""The model `icir eval` and `icir demo` use when none is given: the shipped demo model.

A small real Qwen3-VL trained on the demo toy world to find the image a question is about
(`harness.demo_model`, issue 7). Its checkpoint folder (safetensors, config, tokenizer, processor
and the training record ``TRAINING.md`` with the command and seed that made it) is package data,
so nothing is downloaded and every process of a data-parallel run loads the same files.
"""

from __future__ import annotations

from pathlib import Path

from harness.demo_model import SHIPPED_DEMO_MODEL
from icir_mcq.errors import UserInputError


def default_model_path() -> Path:
    """Folder of the shipped demo model (``save_pretrained`` layout, loadable with ``from_pretrained``).

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
