"""The few package-neutral pieces that `icir_mcq`, `vhs_adapter` and `harness` all use.

Nothing here imports any of the three packages, so each of them may import this module without
an import cycle (`tests/test_layering.py` walks the imports):

- `UserInputError`: bad input a user can fix; the ``icir`` CLI prints it as one line, exit 2.
- `atomic_file` / `write_json` / `atomic_output_dir`: every file and folder this project writes
  appears whole under its final name or not at all (a temporary name in the same folder, then
  ``os.replace``), so a killed run never leaves a half-written output.
- `IMAGE_PLACEHOLDER`: the literal that marks an image in every stored prompt.
- `head_name` / `parse_head_name` / `all_head_names` / `flat_head_name`: heads named ``LxxHyy``
  (0-based layer and head, two digits each; docs/protocol.md), and flat indices ``l * H + h``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

IMAGE_PLACEHOLDER = "<image>"

_HEAD_RE = re.compile(r"^L(\d{2,})H(\d{2,})$")


class UserInputError(ValueError):
    """Bad input, with a message that names the file or record and says what to do.

    The CLI prints the message without a traceback and exits with status 2.
    """


# ---------------------------------------------------------------------------- atomic writes


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` (``os.replace``).

    The parent folder is created. On any exception the temporary file is removed and `path` is
    left as it was. Mirrors the write-then-rename idiom of ``safetensors``/``datasets`` writers.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, obj: Any, *, sort_keys: bool = False) -> None:
    """Write `obj` as indented JSON (trailing newline) to `path` through `atomic_file`."""
    with atomic_file(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n")


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``out``; rename it to ``out`` on success.

    On any exception the temporary folder is removed and ``out`` is left as it was, so a
    failed or killed build never leaves a half-written dataset behind.

    Raises:
        UserInputError: ``out`` exists and ``overwrite`` is False.
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserInputError(f"{out} already exists; pass --overwrite or choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    # mkdtemp makes the folder private (0700); a published folder gets the usual umask mode.
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


# ---------------------------------------------------------------------------- head names


def head_name(layer: int, head: int) -> str:
    """Name head ``(layer, head)`` as ``LxxHyy``, e.g. ``head_name(21, 10) == "L21H10"``.

    Both indices are 0-based; ``ValueError`` for a negative index.
    """
    if layer < 0 or head < 0:
        raise ValueError(f"head indices must be >= 0, got layer={layer}, head={head}")
    return f"L{layer:02d}H{head:02d}"


def flat_head_name(index: int, n_heads: int) -> str:
    """``LxxHyy`` of flat head index ``l * n_heads + h`` (row-major ``[L, H]``)."""
    layer, head = divmod(int(index), int(n_heads))
    return head_name(layer, head)


def parse_head_name(name: str) -> tuple[int, int]:
    """Inverse of :func:`head_name`: ``"L21H10" -> (21, 10)``; ``ValueError`` on any other form."""
    match = _HEAD_RE.match(name)
    if match is None:
        raise ValueError(f"not a head name of the form LxxHyy: {name!r}")
    return int(match.group(1)), int(match.group(2))


def all_head_names(n_layers: int, n_heads: int) -> list[str]:
    """Every head name in row-major ``[L, H]`` order (the flattening used for per-head grids)."""
    return [head_name(layer, head) for layer in range(n_layers) for head in range(n_heads)]
