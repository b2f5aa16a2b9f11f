"""App. D's per-model writer batch inside the protocol: 128 for a Qwen3-VL-8B-shaped model, 256 for
any other, both on protocol, decided from the architecture and shape a run records."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from harness.analyze import run_spec
from harness.protocol import (
    analysis_writer_config,
    architecture_shape,
    deviations,
    protocol_record,
    protocol_writer_config,
)
from icir_common import UserInputError

# Qwen3-VL-8B-Instruct's config.json (language model; vision tower out to its hidden size).
QWEN3_VL_8B_TEXT = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                    "hidden_size": 4096, "intermediate_size": 12288}
# Qwen3-VL-4B-Instruct's: the same layers and heads, a narrower hidden size.
QWEN3_VL_4B_TEXT = {**QWEN3_VL_8B_TEXT, "hidden_size": 2560, "intermediate_size": 9728}
TINY_TEXT = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "hidden_size": 64, "intermediate_size": 128}


def _meta_qwen3_vl(text: dict) -> Qwen3VLForConditionalGeneration:
    """A Qwen3-VL with the language-model sizes `text`, built on the meta device (no weights allocated)."""
    config = Qwen3VLConfig(
        text_config={**text, "vocab_size": 1024,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0,
                                         "mrope_section": [24, 20, 20] if text["head_dim"] == 128 else [4, 2, 2],
                                         "mrope_interleaved": True}},
        vision_config={"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                       "out_hidden_size": text["hidden_size"], "deepstack_visual_indexes": [0]},
    )
    with torch.device("meta"):
        return Qwen3VLForConditionalGeneration(config)


@pytest.fixture(scope="module")
def shapes() -> dict[str, dict]:
    return {name: architecture_shape(_meta_qwen3_vl(text))
            for name, text in (("8b", QWEN3_VL_8B_TEXT), ("4b", QWEN3_VL_4B_TEXT), ("tiny", TINY_TEXT))}


def _capture(shape: dict) -> dict:
    """Capture settings as `HFMultimodalHeadsLM.capture_settings` writes them, on the protocol's readout
    and image inputs."""
    return {"model": "some/model", "identity": {"source": "hub", "commit": "c" * 40}, "dtype": "torch.bfloat16",
            "attn_implementation": "sdpa", "eq3": "proxy", "readout": ["cattok"],
            "image_inputs": {"family": "qwen3_vl", "side": 448, "side_source": "protocol"},
            "model_type": "qwen3_vl", "n_parameters": 1, **shape}


def _record(shape: dict, model_args: dict) -> dict:
    capture = _capture(shape)
    return protocol_record(capture, model_args, {"config": {}}, {}, analysis_writer_config(model_args, capture))


def test_the_shape_is_read_from_the_model(shapes):
    assert shapes["8b"] == {"architecture": "Qwen3VLForConditionalGeneration", "layers": 36, "heads": 32,
                            "hidden_size": 4096, "attention_layers": list(range(36))}
    assert shapes["4b"]["hidden_size"] == 2560
    assert shapes["tiny"] == {"architecture": "Qwen3VLForConditionalGeneration", "layers": 2, "heads": 4,
                              "hidden_size": 64, "attention_layers": [0, 1]}


def test_qwen3_vl_8b_gets_batch_128_and_every_other_shape_256(shapes):
    assert protocol_writer_config(shapes["8b"])[0].batch_size == 128
    assert protocol_writer_config(shapes["4b"])[0].batch_size == 256
    assert protocol_writer_config(shapes["tiny"])[0].batch_size == 256
    assert protocol_writer_config({**shapes["8b"], "architecture": "InternVLForConditionalGeneration"})[0].batch_size == 256
    # Only the batch differs from App. D's selected configuration.
    eight, _ = protocol_writer_config(shapes["8b"])
    other, _ = protocol_writer_config(shapes["tiny"])
    assert (eight.proj_dim, eight.lr, eight.epochs, eight.temperature) == (other.proj_dim, other.lr, other.epochs,
                                                                            other.temperature) == (256, 1e-3, 30, 0.07)


@pytest.mark.parametrize(("name", "batch"), [("8b", 128), ("tiny", 256)])
def test_both_batches_are_on_protocol_and_recorded_with_their_reason(shapes, name, batch):
    record = _record(shapes[name], {})
    assert record["on_protocol"] and record["deviations"] == []
    settings = record["settings"]
    assert settings["writer_config"]["batch_size"] == batch
    assert settings["writer_protocol"]["batch_size"] == batch
    # the shape the writer protocol decides from: architecture, layers, heads, hidden size
    assert settings["writer_protocol"]["model"] == {k: v for k, v in shapes[name].items() if k != "attention_layers"}
    assert "App. D" in settings["writer_protocol"]["reason"]
    assert ("Qwen3-VL-8B probe uses batch 128" in settings["writer_protocol"]["reason"]) == (name == "8b")
    assert record["model"]["hidden_size"] == shapes[name]["hidden_size"]
    # The record alone decides it again: `deviations` reads the recorded shape, not a model.
    assert deviations(json.loads(json.dumps(settings))) == []


@pytest.mark.parametrize(("name", "given", "protocol"), [("8b", "64", 128), ("8b", "256", 128), ("tiny", "128", 256)])
def test_another_batch_is_a_named_deviation(shapes, name, given, protocol):
    record = _record(shapes[name], {"writer_batch_size": given})
    assert record["settings"]["writer_config"]["batch_size"] == int(given)
    assert not record["on_protocol"]
    (line,) = record["deviations"]
    assert line.startswith(f"writer probes {{'batch_size': {given}}} (protocol: {{'batch_size': {protocol}}}; App. D")


def test_other_writer_settings_are_named_against_the_models_protocol(shapes):
    record = _record(shapes["8b"], {"writer_epochs": "5"})
    assert record["settings"]["writer_config"]["batch_size"] == 128  # an unchanged field keeps the model's value
    assert record["deviations"] == ["writer probes {'epochs': 5} (protocol: {'epochs': 30})"]


def test_a_qwen3_vl_36x32_record_without_hidden_size_is_refused(shapes):
    unsized = {key: value for key, value in shapes["8b"].items() if key != "hidden_size"}
    with pytest.raises(UserInputError, match="record no hidden_size.*capture again"):
        protocol_writer_config(unsized)
    # Other shapes do not need it: no Qwen3-VL-8B can have them.
    tiny = {key: value for key, value in shapes["tiny"].items() if key != "hidden_size"}
    assert protocol_writer_config(tiny)[0].batch_size == 256


@pytest.mark.parametrize(("name", "model_args", "batch"),
                         [("8b", {}, 128), ("tiny", {}, 256), ("8b", {"writer_batch_size": "64"}, 64)])
def test_the_analysis_trains_with_the_protocols_batch_for_the_stored_model(shapes, tmp_path, name, model_args, batch):
    (tmp_path / "capture_settings.json").write_text(json.dumps(_capture(shapes[name])))
    spec = run_spec({"n-samples": {}}, {"store": str(tmp_path), **model_args})
    assert spec.writer_config.batch_size == batch


def test_the_model_class_records_the_shape_it_loaded(tmp_path):
    from harness.lm_eval_plugin.model import HFMultimodalHeadsLM
    from harness.tiny_models import save_tiny

    save_tiny("qwen3_vl", tmp_path / "model", seed=0)
    lm = HFMultimodalHeadsLM(pretrained=str(tmp_path / "model"), store=str(tmp_path / "store"), device="cpu")
    text = json.loads((tmp_path / "model" / "config.json").read_text())["text_config"]
    settings = lm.capture_settings()
    assert {key: settings[key] for key in ("architecture", "layers", "heads", "hidden_size")} == {
        "architecture": "Qwen3VLForConditionalGeneration", "layers": text["num_hidden_layers"],
        "heads": text["num_attention_heads"], "hidden_size": text["hidden_size"]}
    assert protocol_writer_config(settings)[0].batch_size == 256
