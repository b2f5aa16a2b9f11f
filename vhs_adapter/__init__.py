"""Visual Haystacks (VHs) adapter: seeded haystacks of size N with anchor/target spans.

Reads the VHs question files and a COCO image root, fixes each haystack's filler choice and
order with a seed (paper App. A), parses the anchor and target objects with their character spans
(§4.3 cattok, §6.1 ablation start), and writes a Hub-style folder loadable with
``datasets.load_dataset(OUT, "single_needle_n10")``.

Modules: ``build`` (``build_vhs``, the ``icir build-vhs`` command's work), ``questions``
(templates, prompt, spans), ``question_files`` (reading ``VHs_qa/``), ``haystack`` (seeded
haystacks), ``scoring`` (Yes/No parsing as the VHs toolkit scores), ``toy_questions``
(VHs-format question files over a toy COCO corpus) and ``cli``.
"""
