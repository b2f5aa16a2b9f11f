"""Head capture: pointer scores, head outputs and image embeddings of every LVLM head in one prefill.

Public entry points: `capture_heads` / `capture_heads_batch` (-> `HeadCapture`), `ablate_heads`
(head ablation, §6.1), `answer_token_ids` (answer strings -> token ids), and the adapter table
`SUPPORTED_ARCHITECTURES`. See `engine` for the shapes and the paper equations behind them.
"""

from .ablation import ablate_heads
from .adapters import SUPPORTED_ARCHITECTURES
from .answers import answer_token_ids
from .engine import MODES, HeadCapture, capture_heads, capture_heads_batch
from .inputs import CaptureRequest
from .readout import READOUT_POSITIONS

__all__ = [
    "MODES",
    "READOUT_POSITIONS",
    "SUPPORTED_ARCHITECTURES",
    "CaptureRequest",
    "HeadCapture",
    "ablate_heads",
    "answer_token_ids",
    "capture_heads",
    "capture_heads_batch",
]
