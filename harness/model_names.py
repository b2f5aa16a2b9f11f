"""The name a model's runs go under: ``OUTPUT/<name>/``, and ``results/<name>/`` on the leaderboard."""

from __future__ import annotations

import os
from pathlib import Path

DEMO_MODEL_NAME = "icir-demo-model"


def model_name(pretrained: str | os.PathLike) -> str:
    """The folder name of a model's runs: its Hub id (``org__name``) or its folder's last component.

    The shipped demo model is ``icir-demo-model``. The name never holds the clone's absolute
    path, so the same run lands in the same folder on every machine.
    """
    from harness.demo_model import SHIPPED_DEMO_MODEL

    path = Path(pretrained).expanduser()
    if path.exists():
        return DEMO_MODEL_NAME if path.resolve() == SHIPPED_DEMO_MODEL else path.resolve().name
    return str(pretrained).replace("/", "__")
