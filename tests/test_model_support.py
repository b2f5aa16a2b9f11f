"""docs/models.md is what the code does: every model type of AutoModelForImageTextToText is
supported (an adapter and a conformance-tested tiny model), refused with its reason (a derivable
layout without a tiny model is refused as not conformance-tested), or has no default config; the
page is regenerated and compared."""

from __future__ import annotations

import pytest
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

from harness.capture.model_support import DOC, render, support_rows
from harness.tiny_models import ARCHS


@pytest.fixture(scope="module")
def rows():
    return support_rows()


def test_the_committed_page_is_the_generated_one(rows, monkeypatch):
    """README's command, ``python -m harness.capture.model_support`` (its --check), on these rows."""
    from harness.capture import model_support

    assert DOC.read_text() == render(rows), "docs/models.md is stale: run python -m harness.capture.model_support"
    monkeypatch.setattr(model_support, "support_rows", lambda: rows)
    assert model_support.main(["--check"]) == 0


def test_every_model_type_has_a_status_and_every_refusal_a_reason(rows):
    assert [row.model_type for row in rows] == sorted(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)
    assert {row.status for row in rows} <= {"supported", "refused", "no default"}
    assert all(row.reason and "\n" not in row.reason for row in rows)
    supported = {name for row in rows if row.status == "supported" for name in row.tiny.split(", ")}
    assert supported == set(ARCHS) and all(row.shape for row in rows if row.status == "supported")
    untested = [row for row in rows if "not conformance-tested" in row.reason]
    assert all(row.status == "refused" and row.shape and not row.tiny for row in untested)
    assert {"qwen3_vl", "qwen2_5_vl", "internvl", "llava_onevision", "gemma3"} <= supported


def test_at_least_30_model_types_are_supported_a_hybrid_and_a_latent_one_among_them(rows):
    supported = {row.model_type for row in rows if row.status == "supported"}
    assert len(supported) >= 30
    assert {"qwen3_5", "lfm2_vl", "lfm3_vl"} <= supported and "kimi_k25" in supported  # hybrid; latent attention
    assert next(row for row in rows if row.model_type == "qwen3_5").shape == "8 (of 32 layers) x 16"


def test_readme_states_the_pages_count(rows):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    supported = sum(row.status == "supported" for row in rows)
    assert f"{supported} of the {len(rows)} are supported" in " ".join(readme.split())
