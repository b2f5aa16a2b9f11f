"""Shared fixtures: a small toy corpus (COCO 2017 + MM-NIAH layout) written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from icir_mcq.toy import write_toy_corpus

# Tiny models run far faster single-threaded, and pytest-xdist already keeps both cores busy.
torch.set_num_threads(1)

TOY_IMAGES = 300
TOY_SEED = 0


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> Path:
    """The lm-eval plugin tests' shared material (`lm_eval_helpers.build_shared`), built once."""
    from lm_eval_helpers import build_shared, shared_root

    return build_shared(shared_root(tmp_path_factory))


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory) -> Path:
    """Root of a 300-image toy corpus (seed 0) with JPEG files: ``ROOT/coco`` is a COCO 2017
    root and ``ROOT/mm_niah/mm_niah_val/annotations/retrieval-image.jsonl`` the MM-NIAH file."""
    root = tmp_path_factory.mktemp("toy") / "corpus"
    write_toy_corpus(root, TOY_IMAGES, seed=TOY_SEED, image_files=True)
    return root


@pytest.fixture(scope="session")
def toy_coco_root(toy_corpus: Path) -> Path:
    """The COCO 2017 root inside :func:`toy_corpus` (``annotations/``, ``train2017/``, ``val2017/``)."""
    return toy_corpus / "coco"


@pytest.fixture(scope="session")
def toy_mmniah_file(toy_corpus: Path) -> Path:
    """The MM-NIAH ``retrieval-image.jsonl`` inside :func:`toy_corpus`."""
    return toy_corpus / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"


@pytest.fixture
def toy_corpus_copy(toy_corpus: Path, tmp_path: Path):
    """Factory: ``toy_corpus_copy(images=False)`` copies :func:`toy_corpus` into this test's tmp
    dir (JPEGs only when ``images``) and returns the copy's root, for tests that damage files."""
    import shutil

    def make(images: bool = False) -> Path:
        root = tmp_path / "corpus"
        ignore = None if images else shutil.ignore_patterns("*.jpg")
        shutil.copytree(toy_corpus, root, ignore=ignore)
        return root

    return make
