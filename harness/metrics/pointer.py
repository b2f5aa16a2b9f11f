"""Pointer criterion: per-head votes and R@1 from per-image attention mass (paper Eq. 1-3, Eq. 2).

Each sample's pointer scores come from the capture engine as ``pointer`` ``[P, L, H, N_s]``
(P readout positions, L layers, H heads, N_s images of sample s; N_s may differ between
samples). A head votes for the image with the largest attention mass; R@1 averages the
indicator ``argmax_i s_i == i*`` over samples (Eq. 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from icir_common import UserInputError


def _as_numpy(array: Any) -> np.ndarray:
    """A torch tensor (any device) or array-like as a numpy array, without copying numpy input."""
    if hasattr(array, "detach"):
        return array.detach().cpu().numpy()
    return np.asarray(array)


def sample_pointer_scores(capture: Any, position: int = 0) -> np.ndarray:
    """The pointer scores ``[L, H, N]`` of one sample at readout position index ``position``.

    ``capture`` is an object with a ``.pointer`` attribute (torch tensor or ndarray
    ``[P, L, H, N]``), or a bare array ``[P, L, H, N]`` or ``[L, H, N]`` (then ``position`` is
    ignored). Raises ``UserInputError`` for another number of axes or a position out of range.
    """
    scores = _as_numpy(capture.pointer if hasattr(capture, "pointer") else capture)
    if scores.ndim == 4:
        if not -scores.shape[0] <= position < scores.shape[0]:
            raise UserInputError(
                f"readout position index {position} is out of range for pointer scores with "
                f"{scores.shape[0]} positions"
            )
        scores = scores[position]
    if scores.ndim != 3:
        raise UserInputError(
            f"pointer scores must have shape [P, L, H, N] or [L, H, N], got {tuple(scores.shape)}"
        )
    return scores


def _votes_and_counts(captures: Sequence[Any], position: int) -> tuple[np.ndarray, np.ndarray]:
    """``(votes [S, L, H], image counts [S])``, both int64; see :func:`pointer_votes`."""
    if len(captures) == 0:
        raise UserInputError("no captures given: pointer votes need at least one sample")
    votes, counts = [], []
    for index, capture in enumerate(captures):
        scores = sample_pointer_scores(capture, position)
        if scores.shape[-1] == 0:
            raise UserInputError(f"sample {index} has no images (pointer scores {scores.shape})")
        if votes and scores.shape[:2] != votes[0].shape:
            raise UserInputError(
                f"sample {index} has pointer scores for {scores.shape[:2]} (layers, heads), "
                f"sample 0 for {votes[0].shape}; all samples must come from the same model"
            )
        votes.append(scores.argmax(axis=-1))
        counts.append(scores.shape[-1])
    return np.stack(votes).astype(np.int64), np.array(counts, dtype=np.int64)


def pointer_votes(captures: Sequence[Any], position: int = 0) -> np.ndarray:
    """Each head's vote per sample: ``argmax_i`` of its pointer scores (Eq. 2; App. H voting A).

    Args:
        captures: per-sample captures (see :func:`sample_pointer_scores`); the number of images
            N_s may vary between samples, L and H may not.
        position: index into the readout-position axis P.

    Returns:
        int64 ``[S, L, H]`` image indices; ties go to the smallest image index (numpy argmax).

    Raises:
        UserInputError: no captures, a sample with no images, or a sample whose L x H differs.
    """
    return _votes_and_counts(captures, position)[0]


def check_targets(targets: Sequence[int], image_counts: np.ndarray) -> np.ndarray:
    """``targets`` as int64 ``[S]``, checked against each sample's image count N_s.

    Raises ``UserInputError`` naming the first sample whose target is not in ``[0, N_s)`` or when
    the number of targets differs from the number of samples.
    """
    targets = np.asarray(targets)
    if targets.shape != image_counts.shape:
        raise UserInputError(
            f"got {targets.size} targets for {image_counts.size} samples; give one target image index per sample"
        )
    targets = targets.astype(np.int64)
    bad = np.flatnonzero((targets < 0) | (targets >= image_counts))
    if bad.size:
        s = int(bad[0])
        raise UserInputError(
            f"sample {s}: target image index {targets[s]} is outside its {image_counts[s]} images"
        )
    return targets


def pointer_r1(
    captures: Sequence[Any], targets: Sequence[int], position: int = 0
) -> tuple[np.ndarray, float]:
    """Per-head pointer R@1 (Eq. 2 with the pointer score of Eq. 1/3) and its chance level.

    Args:
        captures: per-sample captures with ``.pointer`` ``[P, L, H, N_s]`` or bare arrays
            ``[L, H, N_s]`` (see :func:`sample_pointer_scores`); N_s may vary between samples.
        targets: the target image index i* of each sample, ``[S]``, 0-based.
        position: index into the readout-position axis P.

    Returns:
        ``(r1, chance)``: ``r1`` float64 ``[L, H]``, the fraction of samples whose target image has
        the largest attention mass (ties go to the smallest image index), and ``chance`` =
        mean over samples of 1/N_s (docs/protocol.md: .183 for equal halves of N = 5 and 6).

    Raises:
        UserInputError: see :func:`pointer_votes` and :func:`check_targets`.
    """
    votes, counts = _votes_and_counts(captures, position)
    targets = check_targets(targets, counts)
    r1 = (votes == targets[:, None, None]).mean(axis=0, dtype=np.float64)
    return r1, float(np.mean(1.0 / counts))
