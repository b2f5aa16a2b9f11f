"""External text-to-image retrievers on the Visual Haystacks documents of LVLM runs (§4.3, Table 2).

`encoders` loads CLIP, SigLIP and Qwen3-VL-Embedding-style models with transformers and embeds
anchor queries and images (App. A: the 80-template ensemble, the embedding query); `score` picks
the argmax image of a haystack and computes R@1; `run` takes the documents from finished runs and
checks their fingerprint; `cli` is ``icir retrievers``.
"""
