"""lm-eval plugin: the ``hf-multimodal-heads`` model and the ICIR-MCQ / Visual Haystacks tasks.

Importing this package registers the model with lm-eval's registry; `TASKS_DIR` is the folder to
pass as ``--include_path`` (``icir eval`` and `harness.evaluate` do both).
"""

from pathlib import Path

from harness.lm_eval_plugin.model import MODEL_NAME, HFMultimodalHeadsLM

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"

__all__ = ["MODEL_NAME", "TASKS_DIR", "HFMultimodalHeadsLM"]
