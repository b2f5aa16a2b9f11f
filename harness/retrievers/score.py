"""Text-to-image retrieval inside one haystack: cosine similarity, argmax, R@1 (§4.3, App. A)."""

from __future__ import annotations

from collections.abc import Sequence


def haystack_pick(query, images) -> int:
    """Index of the image most similar to the query.

    Args:
        query: ``[D]`` L2-normalised query embedding.
        images: ``[N, D]`` L2-normalised embeddings of the haystack's N images, context order.

    Returns:
        ``argmax_i cos(query, images[i])`` (the dot product of unit vectors); the first of tied
        images, as ``torch.argmax`` returns.
    """
    return int((images @ query).argmax())


def recall_at_1(picks: Sequence[int], targets: Sequence[int]) -> float:
    """R@1: the fraction of documents whose pick is the target image (Eq. 1's hit, averaged).

    Raises:
        ValueError: empty or unequal-length inputs.
    """
    if not picks or len(picks) != len(targets):
        raise ValueError(f"R@1 needs as many picks as targets, at least one ({len(picks)} vs {len(targets)})")
    return sum(int(p) == int(t) for p, t in zip(picks, targets)) / len(picks)
