"""A toy world of rendered shapes written as COCO 2017 + MM-NIAH files, for tests, demos and benches.

The names below are imported from their submodules on first use (`icir_common.lazy_exports`), so
reading the worlds (`icir_mcq.toy.worlds`, what ``icir toy-corpus --help`` lists) loads no image
or COCO library.
"""

from icir_common import lazy_exports

_SOURCES = {"CATEGORIES": "shapes", "ShapeCategory": "shapes", "ToyCorpus": "corpus", "write_toy_corpus": "corpus"}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
