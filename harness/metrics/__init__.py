"""Head-level metrics: pointer R@1, writer probes and writer R@1, majority vote, rankings.

Sources: paper Eq. 1-5, §4-5, App. C.2, D, E.2, H, I. Per-head grids are ``[L, H]``; heads print
as ``LxxHyy`` (:mod:`icir_common`).
"""

from harness.metrics.candidates import InContextCandidates
from harness.metrics.pointer import pointer_r1, pointer_votes
from harness.metrics.probes import WriterProbes, image_pool
from harness.metrics.rankings import (
    CorrelationDifference,
    SetPartition,
    chance_overlap,
    compare_rankings,
    correlation_difference_ci,
    grid_by_name,
    head_ranking,
    layer_max_correlation,
    pearson,
    ranking_names,
    set_partition,
    spearman,
    top_heads,
    top_k_overlap,
)
from harness.metrics.vote import DEFAULT_KS, NO_VOTE, majority_vote, top_k_predictions, vote_r1_curve
from harness.metrics.writer import WriterFit, WriterProbeConfig, fit_writer_probes

__all__ = [
    "DEFAULT_KS",
    "NO_VOTE",
    "CorrelationDifference",
    "InContextCandidates",
    "SetPartition",
    "WriterFit",
    "WriterProbeConfig",
    "WriterProbes",
    "chance_overlap",
    "compare_rankings",
    "correlation_difference_ci",
    "fit_writer_probes",
    "grid_by_name",
    "head_ranking",
    "image_pool",
    "layer_max_correlation",
    "majority_vote",
    "pearson",
    "pointer_r1",
    "pointer_votes",
    "ranking_names",
    "set_partition",
    "spearman",
    "top_heads",
    "top_k_overlap",
    "top_k_predictions",
    "vote_r1_curve",
]
