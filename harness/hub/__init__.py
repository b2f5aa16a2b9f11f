"""The Hugging Face Hub side of the project: ``icir publish`` (a built ICIR-MCQ / VHs folder as a
Hub dataset repo that is also a benchmark, `publish`) and ``icir submit --eval-results``
(a submission's headline numbers as ``.eval_results/*.yaml`` entries for the model's repo,
`eval_results`). Everything up to the upload call works offline; see docs/hub.md.
"""
