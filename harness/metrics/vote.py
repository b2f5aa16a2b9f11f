"""Top-K majority-vote retrieval over ranked heads (paper App. H).

Each head casts one vote per sample, an image index: (A) the argmax of its attention mass
(:func:`harness.metrics.pointer.pointer_votes`, heads taken from the pointer ranking) or (B) the
argmax of its trained writer probe over the sample's own images
(:meth:`harness.metrics.probes.WriterProbes.in_context_votes`, heads from the writer ranking).
The sample's prediction is the most frequent vote among the top-K heads, ties broken by the
smallest image index, so K = 1 is the single best head.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.constants import VOTE_KS as DEFAULT_KS
from harness.metrics.rankings import as_flat_indices
from icir_common import UserInputError, flat_head_name

NO_VOTE = -1


def majority_vote(votes: np.ndarray) -> np.ndarray:
    """The most frequent image index in each row of ``votes`` (int ``[S, K]``), int64 ``[S]``.

    Ties go to the smallest image index. Raises ``UserInputError`` for a negative vote.
    """
    votes = np.asarray(votes, dtype=np.int64)
    if votes.ndim != 2 or votes.shape[1] == 0:
        raise UserInputError(f"votes must be [samples, K >= 1], got shape {votes.shape}")
    if (votes < 0).any():
        raise UserInputError("votes must be image indices >= 0")
    counts = np.zeros((votes.shape[0], int(votes.max()) + 1), dtype=np.int64)
    np.add.at(counts, (np.arange(votes.shape[0])[:, None], votes), 1)
    return counts.argmax(axis=1)  # argmax returns the first (smallest) index among equal counts


def top_k_predictions(head_votes: np.ndarray, ranking: Sequence[int | str], k: int) -> np.ndarray:
    """Majority-vote prediction ``[S]`` of the first ``k`` heads of ``ranking``.

    Args:
        head_votes: int ``[S, L, H]`` per-head votes; ``NO_VOTE`` (-1) marks a head without a
            vote (e.g. a head whose writer probe was not saved).
        ranking: heads best first, as flat indices ``l*H + h`` or ``LxxHyy`` names.
        k: number of heads that vote.

    Raises:
        UserInputError: ``k`` outside ``[1, len(ranking)]`` or a top-``k`` head without a vote.
    """
    head_votes = np.asarray(head_votes)
    if head_votes.ndim != 3:
        raise UserInputError(f"head votes must be [samples, layers, heads], got shape {head_votes.shape}")
    n_samples, n_layers, n_heads = head_votes.shape
    flat = as_flat_indices(ranking, n_layers, n_heads)
    if not 1 <= k <= flat.size:
        raise UserInputError(f"K = {k} must be between 1 and the {flat.size} ranked heads")
    selected = head_votes.reshape(n_samples, n_layers * n_heads)[:, flat[:k]]
    missing = np.flatnonzero((selected == NO_VOTE).any(axis=0))
    if missing.size:
        index = int(flat[missing[0]])
        raise UserInputError(
            f"head {flat_head_name(index, n_heads)} is among the top {k} but cast no vote; "
            f"provide votes (e.g. save writer probes) for the whole top {k}"
        )
    return majority_vote(selected)


def vote_r1_curve(
    head_votes: np.ndarray,
    targets: Sequence[int],
    ranking: Sequence[int | str],
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[int, float]:
    """Majority-vote R@1 for each K in ``ks`` (App. H, Figure 6): ``{K: R@1}``.

    ``targets`` are the 0-based target image indices ``[S]``. Ks larger than the ranking raise
    ``UserInputError``; for tiny models pass ``[k for k in DEFAULT_KS if k <= n_heads_total]``.
    """
    targets = np.asarray(targets, dtype=np.int64)
    if targets.shape != (np.shape(head_votes)[0],):
        raise UserInputError(f"got {targets.size} targets for {np.shape(head_votes)[0]} samples")
    return {int(k): float(np.mean(top_k_predictions(head_votes, ranking, k) == targets)) for k in ks}
