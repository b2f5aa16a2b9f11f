"""lm-eval plugin: the ``hf-multimodal-heads`` model and the ICIR-MCQ / Visual Haystacks tasks.

Importing `harness.lm_eval_plugin.model` (or reading `HFMultimodalHeadsLM` here) registers the
model with lm-eval's registry; `TASKS_DIR` is the folder to pass as ``--include_path`` (``icir
eval`` and `harness.evaluate` do both). The model is imported on first use
(`icir_common.lazy_exports`), so the plugin's torch-free modules
(`harness.lm_eval_plugin.rankings_io`: the ranking files the leaderboard reads) load without
torch, transformers and lm-eval.
"""

from pathlib import Path

from harness.constants import MODEL_NAME
from icir_common import lazy_exports

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"

__all__ = ["MODEL_NAME", "TASKS_DIR", "HFMultimodalHeadsLM"]
__getattr__, __dir__ = lazy_exports(__name__, {"HFMultimodalHeadsLM": "model"})
