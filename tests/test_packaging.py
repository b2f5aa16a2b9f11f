"""What pip installs: the declared extras and their one-line refusals, and the lm-eval entry point."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import tomllib
from pathlib import Path

import pytest
from lm_eval_helpers import icir_args

from harness.cli import main as icir_main
from icir_common import UserInputError

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_optional_packages_are_extras_and_the_hub_client_a_dependency():
    project = _project()
    names = [requirement.split(">")[0].split("=")[0].split("<")[0] for requirement in project["dependencies"]]
    assert "huggingface-hub" in names and "open_clip_torch" not in names and "flash-attn" not in names
    extras = project["optional-dependencies"]
    assert extras["retrievers"] == ["open_clip_torch>=2.24"] and extras["flash"][0].startswith("flash-attn")
    assert {"Paper", "Repository", "Changelog"} <= set(project["urls"]) and (ROOT / "CHANGELOG.md").is_file()
    assert all((ROOT / package / "py.typed").is_file() for package in ("harness", "icir_mcq", "vhs_adapter"))


def test_lm_eval_finds_the_model_class_through_its_entry_point():
    """lm-eval releases with plugin discovery read the ``lm_eval.models`` entry points."""
    (entry,) = [e for e in importlib.metadata.entry_points(group="lm_eval.models") if e.name == "hf-multimodal-heads"]
    from harness.lm_eval_plugin.model import HFMultimodalHeadsLM

    assert entry.load() is HFMultimodalHeadsLM


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed here")
def test_flash_attention_without_flash_attn_is_one_line_before_the_model_loads(shared, tmp_path, capsys, monkeypatch):
    import harness.lm_eval_plugin.model as plugin

    monkeypatch.setattr(plugin.HFMultimodalHeadsLM, "_create_model", lambda *a, **k: pytest.fail("model loaded"))
    code = icir_main(icir_args(shared, tmp_path / "out", model_args="attn_implementation=flash_attention_2"))
    # the last line (a handler an earlier in-process test left on lm-eval's logger may write above it)
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and error.startswith("icir eval: error: attn_implementation=flash_attention_2 needs flash-attn")
    assert "image-retrieval-heads[flash]" in error


def test_clip_retrievers_without_open_clip_name_the_extra(tmp_path, monkeypatch):
    from harness.retrievers.encoders import RetrieverSpec
    from harness.tiny_models.retrievers import save_tiny_retriever

    folder = save_tiny_retriever("clip", tmp_path / "clip")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "open_clip" else real(name, *a))
    with pytest.raises(UserInputError, match=r"needs open_clip.*image-retrieval-heads\[retrievers\]"):
        RetrieverSpec.parse(f"clip={folder}").check()
