"""Head rankings and writer probes as files: written by one run, applied by another (§4.3, App. H).

An ICIR-MCQ run writes ``pointer_ranking.json`` (and, with writer probes, ``writer_probes/``)
into its artifacts; a VHs run takes them as ``heads_ranking=FILE`` / ``writer_probes=DIR`` to
vote with the heads found on ICIR-MCQ. Rankings are JSON only (data, never code).

Ranking file (``format: "head-ranking/1"``): ``criterion`` ("pointer" or "writer"),
``position`` (readout position), ``n_layers``, ``n_heads``, ``ranking`` (``LxxHyy`` names, best
first) and ``r1`` (each ranked head's R@1, same order).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.constants import POINTER_SCORES, VOTE_KS
from harness.metrics.rankings import as_flat_indices, head_ranking, ranking_names
from icir_common import UserInputError

if TYPE_CHECKING:
    from harness.metrics.probes import WriterProbes

RANKING_FORMAT = "head-ranking/1"


def ranking_document(grid: np.ndarray, criterion: str, position: str, score: str | None = None) -> dict:
    """The ranking JSON of an ``[L, H]`` R@1 grid (ties: smaller flat index first); `score` names
    the pointer score it ranks by (``exact`` or ``eq3``)."""
    grid = np.asarray(grid, dtype=np.float64)
    order = head_ranking(grid)
    return {
        "format": RANKING_FORMAT,
        "criterion": criterion,
        **({"score": score} if score else {}),
        "position": position,
        "n_layers": int(grid.shape[0]),
        "n_heads": int(grid.shape[1]),
        "ranking": ranking_names(order, grid.shape[1]),
        "r1": [float(grid.ravel()[i]) for i in order],
    }


def load_head_ranking(path: str | os.PathLike, n_layers: int, n_heads: int) -> np.ndarray:
    """Flat head indices ``l*H + h`` (best first) from a ranking file, checked against the model
    (`read_head_ranking` without the score).

    Raises:
        UserInputError: see `read_head_ranking`.
    """
    return read_head_ranking(path, n_layers, n_heads)[0]


def read_head_ranking(path: str | os.PathLike, n_layers: int, n_heads: int) -> tuple[np.ndarray, str | None]:
    """``(flat head indices l*H + h best first, score)`` of a ranking file, checked against the model.

    ``score`` is the pointer score the ranking was made with (``exact`` or ``eq3``, the file's
    ``score``), or None for a file without one (a writer ranking): a transfer set scores the
    ranking's top head with it (§4.3).

    Raises:
        UserInputError: missing or malformed file, a ranking made for another L x H, or a
            ``score`` that is neither ``exact`` nor ``eq3``.
    """
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserInputError(f"cannot read head ranking {path}: {err}") from None
    if not isinstance(document, dict) or document.get("format") != RANKING_FORMAT:
        raise UserInputError(f"{path} is not a head ranking (format {RANKING_FORMAT!r}, e.g. pointer_ranking.json)")
    missing = [key for key in ("n_layers", "n_heads", "ranking") if key not in document]
    if missing:
        raise UserInputError(f"head ranking {path} lacks {', '.join(missing)}; use a pointer_ranking.json of a run")
    if (document["n_layers"], document["n_heads"]) != (n_layers, n_heads):
        raise UserInputError(
            f"head ranking {path} is for {document['n_layers']} layers x {document['n_heads']} heads; "
            f"this model has {n_layers} x {n_heads}"
        )
    ranking = document["ranking"]
    if not isinstance(ranking, list) or len(ranking) != n_layers * n_heads:
        count = len(ranking) if isinstance(ranking, list) else type(ranking).__name__
        raise UserInputError(
            f"head ranking {path} ranks {count} heads; it must rank all {n_layers * n_heads} heads of the model "
            f"(votes up to K = {max(VOTE_KS)} need them)"
        )
    try:
        flat = as_flat_indices(ranking, n_layers, n_heads)
    except UserInputError as err:
        raise UserInputError(f"head ranking {path}: {err}") from None
    if len(set(flat.tolist())) != flat.size:
        repeated = sorted({name for name in ranking if ranking.count(name) > 1}, key=str)[:3]
        raise UserInputError(f"head ranking {path} lists heads more than once ({', '.join(map(str, repeated))})")
    score = document.get("score")
    if score is not None and score not in POINTER_SCORES:
        raise UserInputError(f"head ranking {path} has score {score!r}; a pointer ranking's score is one of "
                             f"{', '.join(POINTER_SCORES)}")
    return flat, score


def load_writer_probes(path: str | os.PathLike, n_layers: int, n_heads: int) -> tuple[WriterProbes, np.ndarray]:
    """Probes saved by an ICIR-MCQ run and their writer ranking (from the saved writer R@1 grid).

    Raises:
        UserInputError: unreadable folder, probes of another L x H, or probes without writer R@1
            (the ranking needs it).
    """
    from harness.metrics.probes import WriterProbes  # needs torch, which reading ranking files does not

    probes = WriterProbes.load(path)
    if (probes.n_layers, probes.n_heads) != (n_layers, n_heads):
        raise UserInputError(
            f"writer probes {path} are for {probes.n_layers} layers x {probes.n_heads} heads; "
            f"this model has {n_layers} x {n_heads}"
        )
    return probes, writer_ranking({"info": probes.info}, n_layers, n_heads, str(path))


def writer_ranking(settings: Mapping[str, Any], n_layers: int, n_heads: int, name: str = "writer probes") -> np.ndarray:
    """Flat head indices, best first, by the writer R@1 grid of a probes settings document.

    `settings` is the probes' ``writer_probes.json`` (`WriterProbes.save`); its ``info.writer_r1``
    is ``{LxxHyy: R@1}`` (ties: smaller flat index, `head_ranking`).

    Raises:
        UserInputError: no writer R@1 grid, or a value that is not a number.
    """
    grid = (settings.get("info") or {}).get("writer_r1") if isinstance(settings, Mapping) else None
    if not isinstance(grid, dict):
        raise UserInputError(f"{name} carry no writer R@1 grid to rank heads by")
    bad = [head for head, value in grid.items() if isinstance(value, bool) or not isinstance(value, (int, float))]
    if bad:
        raise UserInputError(f"{name}: writer R@1 of {', '.join(bad[:3])} is not a number")
    flat = as_flat_indices(list(grid), n_layers, n_heads)
    values = np.full(n_layers * n_heads, -np.inf)
    values[flat] = [grid[head] for head in grid]
    return head_ranking(values.reshape(n_layers, n_heads))
