"""A known-answer demo LVLM: a small real Qwen3-VL trained on the toy world to retrieve images in context.

No real LVLM weights can be downloaded here or in CI, and a random model has no retrieval heads.
This package trains a small `Qwen3VLForConditionalGeneration` (real architecture, processor and
chat template) on Visual Haystacks and ICIR-MCQ samples drawn from a demo-world toy corpus of its
own (`icir_mcq.toy.worlds`), after single-image naming and text-only option-finding warm-ups,
writes the checkpoint folder (safetensors + config + tokenizer + processor + training record),
and measures it on a fresh toy draw (`evaluate`: accuracies, pointer R@1, head ablation).

The checkpoint trained with the default recipe ships in ``shipped/`` (`SHIPPED_DEMO_MODEL`, with
its ``TRAINING.md``: command, seed, figures) and is the default model of ``icir eval`` and
``icir demo`` (`harness.lm_eval_plugin.default_model`).

Modules: ``architecture`` (sizes, tokenizer, model), ``data`` (toy worlds, records, encoding),
``train`` (the curriculum and loop), ``evaluate`` (accuracy, pointer R@1, head ablation),
``checkpoint`` (loading, ``train_and_save``) and ``cli`` (``icir demo-model``).
"""

from pathlib import Path

SHIPPED_DEMO_MODEL = Path(__file__).resolve().with_name("shipped")
