"""Head-level capture and metrics for in-context image retrieval in LVLMs.

Pointer R@1 (paper Eq. 1-3), writer R@1 (Eq. 4-5, App. D), majority-vote R@1 (App. H) and
head ablations (§6), plus the lm-evaluation-harness tasks and model class that report them.
"""

from harness.evaluation import evaluate  # (`harness.evaluate(...)`; imports lm-eval lazily)

__all__ = ["evaluate"]
