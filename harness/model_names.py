"""The name a model's runs go under: ``OUTPUT/<name>/``, and ``results/<name>/`` on the leaderboard."""

from __future__ import annotations

import os
from pathlib import Path

DEMO_MODEL_NAME = "icir-demo-model"
# The shipped demo model's folder (package data of `harness.demo_model`, which re-exports it).
SHIPPED_DEMO_MODEL = Path(__file__).resolve().with_name("demo_model") / "shipped"


def model_name(pretrained: str | os.PathLike) -> str:
    """The folder name of a model's runs: its Hub id (``org__name``) or its folder's last component.

    The shipped demo model is ``icir-demo-model``. The name never holds the clone's absolute
    path, so the same run lands in the same folder on every machine.
    """
    path = Path(pretrained).expanduser()
    if path.exists():
        return DEMO_MODEL_NAME if path.resolve() == SHIPPED_DEMO_MODEL else path.resolve().name
    return str(pretrained).replace("/", "__")
