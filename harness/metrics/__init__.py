"""Head-level metrics: pointer R@1, writer probes and writer R@1, majority vote, rankings.

Sources: paper Eq. 1-5, §4-5, App. C.2, D, E.2, H, I. Per-head grids are ``[L, H]``; heads print
as ``LxxHyy`` (:mod:`icir_common`).

The names below are imported from their submodules on first use (`icir_common.lazy_exports`),
so the numpy-only ones (``harness.metrics.rankings``, ``.vote``, ``.pointer``: what ``icir
report`` and the leaderboard read with) load without torch, which the candidates, probes and
writer modules need.
"""

from icir_common import lazy_exports

# Each public name and the submodule that defines it.
_SOURCES = {
    "InContextCandidates": "candidates",
    "pointer_r1": "pointer",
    "pointer_votes": "pointer",
    "WriterProbes": "probes",
    "image_pool": "probes",
    **dict.fromkeys((
        "CorrelationDifference", "SetPartition", "chance_overlap", "compare_rankings", "correlation_difference_ci",
        "grid_by_name", "head_ranking", "layer_max_correlation", "pearson", "ranking_names", "set_partition",
        "spearman", "top_heads", "top_k_overlap",
    ), "rankings"),
    **dict.fromkeys(("DEFAULT_KS", "NO_VOTE", "majority_vote", "top_k_predictions", "vote_r1_curve"), "vote"),
    **dict.fromkeys(("WriterFit", "WriterProbeConfig", "fit_writer_probes"), "writer"),
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
