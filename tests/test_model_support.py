"""docs/models.md is what the code does: every model type of AutoModelForImageTextToText is
supported (an adapter and a conformance-tested tiny model), untested (a derived adapter, no tiny
model yet), refused with its reason, or has no default config; the page is regenerated and compared."""

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
    assert {row.status for row in rows} <= {"supported", "untested", "refused", "no default"}
    assert all(row.reason and "\n" not in row.reason for row in rows)
    supported = {name for row in rows if row.status == "supported" for name in row.tiny.split(", ")}
    assert supported <= set(ARCHS) and all(row.shape for row in rows if row.status in ("supported", "untested"))
    assert {"qwen3_vl", "qwen2_5_vl", "internvl", "llava_onevision", "gemma3"} <= supported
