"""ICIR-MCQ as a ``datasets.GeneratorBasedBuilder``, for programmatic use without a folder.

It runs the same sampling as :func:`icir_mcq.build.build_icir_mcq` (same seed, same records)::

    builder = IcirMcqBuilder(config_name="n5", coco_root="coco", mmniah_files=["retrieval-image.jsonl"],
                             samples=3000, seed=0)
    builder.download_and_prepare()
    ds = builder.as_dataset(split="test")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import datasets

from icir_common import UserInputError
from icir_mcq.coco_index import load_coco
from icir_mcq.features import icir_features
from icir_mcq.hub_folder import SPLIT
from icir_mcq.images import with_images
from icir_mcq.mmniah import load_contexts
from icir_mcq.sampling import PASSAGE_RULES, check_passage_rule, sample_configs

_CITATION = """@article{park2026headsthatwrite,
  title   = {Heads That Write, Not Just Point: Image Retrieval Heads in Vision-Language Models},
  journal = {arXiv preprint arXiv:2611.04903},
  year    = {2026}
}"""


class IcirMcqConfig(datasets.BuilderConfig):
    """One ICIR-MCQ config (``name`` is ``"n<N>"``) and the inputs it is sampled from.

    ``coco_root``: COCO 2017 root; ``mmniah_files``: MM-NIAH ``retrieval-image.jsonl`` paths;
    the other fields are those of :func:`icir_mcq.build.build_icir_mcq`.
    """

    def __init__(self, *, coco_root: str | Path | None = None, mmniah_files: Sequence[str | Path] = (),
                 seed: int = 0, samples: int = 3000, embed_images: bool = True,
                 max_passage_chars: int | None = None, categories: Sequence[str] | None = None,
                 passages: str = PASSAGE_RULES[0], **kwargs):
        super().__init__(**kwargs)
        self.coco_root = coco_root
        self.mmniah_files = [str(f) for f in mmniah_files]
        self.seed = seed
        self.samples = samples
        self.embed_images = embed_images
        self.max_passage_chars = max_passage_chars
        self.categories = list(categories) if categories else None
        self.passages = passages


class IcirMcqBuilder(datasets.GeneratorBasedBuilder):
    """ICIR-MCQ (paper §3.2, App. B): configs ``n5`` and ``n6`` (any ``n<N>`` works), split ``test``."""

    BUILDER_CONFIG_CLASS = IcirMcqConfig
    BUILDER_CONFIGS = [IcirMcqConfig(name="n5"), IcirMcqConfig(name="n6")]
    DEFAULT_CONFIG_NAME = "n5"

    def _info(self) -> datasets.DatasetInfo:
        return datasets.DatasetInfo(
            description="ICIR-MCQ: pick the caption of the one image in an interleaved context that "
            "contains the queried COCO category (paper §3.2, App. B).",
            features=icir_features(self.config.embed_images),
            citation=_CITATION,
            license="cc-by-4.0",
        )

    def _split_generators(self, dl_manager) -> list[datasets.SplitGenerator]:
        # Checked here, not in _generate_examples, where datasets would wrap the error.
        if self.config.coco_root is None or not self.config.mmniah_files:
            raise UserInputError("IcirMcqBuilder needs coco_root=... (a COCO 2017 root) and mmniah_files=[...] "
                                 "(MM-NIAH retrieval-image.jsonl files)")
        check_passage_rule(self.config.passages)
        return [datasets.SplitGenerator(name=SPLIT)]

    def _generate_examples(self):
        config = self.config
        index = load_coco(config.coco_root)
        records, _ = sample_configs(index, load_contexts(config.mmniah_files), [config.name], config.samples,
                                    config.seed, config.categories, config.max_passage_chars, config.passages)
        for record in with_images(records[config.name], Path(config.coco_root), config.embed_images):
            yield record["id"], record
