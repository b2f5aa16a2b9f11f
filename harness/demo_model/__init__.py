"""A known-answer demo LVLM: a small real Qwen3-VL trained on the toy world to retrieve images in context.

No real LVLM weights can be downloaded here or in CI, and a random model has no retrieval heads.
This package trains a small `Qwen3VLForConditionalGeneration` (real architecture, processor and
chat template) on Visual Haystacks and ICIR-MCQ samples drawn from a demo-world toy corpus of its
own (`icir_mcq.toy.worlds`), after single-image naming and text-only option-finding warm-ups,
writes the checkpoint folder (safetensors + config + tokenizer + processor + training record),
and measures it on a fresh toy draw (`evaluate`: accuracies, pointer R@1, head ablation).

No checkpoint ships yet: the recipe does not reach the issue-7 targets within the 15-minute CPU
budget (measured figures in `harness.demo_model.train`), so the default model of ``icir eval``
is still the random tiny Qwen3-VL (`harness.lm_eval_plugin.default_model`).

Modules: ``architecture`` (sizes, tokenizer, model), ``data`` (toy worlds, records, encoding),
``train`` (the curriculum and loop), ``evaluate`` (accuracy, pointer R@1, head ablation),
``checkpoint`` (loading, ``train_and_save``) and ``cli`` (``icir demo-model``).
"""
