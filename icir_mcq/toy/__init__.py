"""A toy world of rendered shapes written as COCO 2017 + MM-NIAH files, for tests, demos and benches."""

from icir_mcq.toy.corpus import ToyCorpus, write_toy_corpus
from icir_mcq.toy.shapes import CATEGORIES, ShapeCategory

__all__ = ["CATEGORIES", "ShapeCategory", "ToyCorpus", "write_toy_corpus"]
