"""The model `icir eval` uses when none is given: a tiny random Qwen3-VL, saved at first use.

It has the real Qwen3-VL architecture, processor and chat template (`harness.tiny_models`) but
random weights, so it exercises the whole pipeline without a download; its head metrics sit near
chance. It is saved under ``$ICIR_CACHE`` (default ``~/.cache/icir``) so that every process of a
data-parallel run loads the same folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_ARCH = "qwen3_vl"
DEFAULT_SEED = 0


def icir_cache_dir() -> Path:
    """``$ICIR_CACHE`` or ``~/.cache/icir``: where the default model is saved."""
    return Path(os.environ.get("ICIR_CACHE") or Path.home() / ".cache" / "icir")


def default_model_path() -> Path:
    """Folder of the default model, written atomically on first call (``save_pretrained`` layout)."""
    from harness.tiny_models import save_tiny

    path = icir_cache_dir() / "models" / f"tiny-{DEFAULT_ARCH}-seed{DEFAULT_SEED}"
    if (path / "config.json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_tiny(DEFAULT_ARCH, tmp, seed=DEFAULT_SEED)
        os.replace(tmp, path)
    except OSError:
        # Another process (data-parallel rank) saved it first; its folder is identical.
        if not (path / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
