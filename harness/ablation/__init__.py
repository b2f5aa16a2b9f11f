"""The set-partition ablation grid (paper §6, App. I-J): arms, random controls, prefix-shared cells.

``icir ablate`` (`harness.ablation.cli`) zeroes, for each VHs document, the first K heads of each
arm of the pointer/writer set partition (`arms`) and of K-head random controls, from the anchor
phrase to the last prefill position. Every cell of a document shares the prefix before the
anchor, so it is prefilled once (`cells`). Accuracy, drops, the difference from the random mean
and McNemar tests (`stats`) are written with the per-sample outcomes, Table 14 and the
dose-response figure (`results`).
"""
