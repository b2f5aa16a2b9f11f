"""Head names: ``LxxHyy`` with a 0-based layer and head index, two digits each (paper-notes.md)."""

from __future__ import annotations

import re

_HEAD_RE = re.compile(r"^L(\d{2,})H(\d{2,})$")


def head_name(layer: int, head: int) -> str:
    """Name head ``(layer, head)`` as ``LxxHyy``, e.g. ``head_name(21, 10) == "L21H10"``.

    Both indices are 0-based; ``ValueError`` for a negative index.
    """
    if layer < 0 or head < 0:
        raise ValueError(f"head indices must be >= 0, got layer={layer}, head={head}")
    return f"L{layer:02d}H{head:02d}"


def parse_head_name(name: str) -> tuple[int, int]:
    """Inverse of :func:`head_name`: ``"L21H10" -> (21, 10)``; ``ValueError`` on any other form."""
    match = _HEAD_RE.match(name)
    if match is None:
        raise ValueError(f"not a head name of the form LxxHyy: {name!r}")
    return int(match.group(1)), int(match.group(2))


def all_head_names(n_layers: int, n_heads: int) -> list[str]:
    """Every head name in row-major ``[L, H]`` order (the flattening used for per-head grids)."""
    return [head_name(layer, head) for layer in range(n_layers) for head in range(n_heads)]
