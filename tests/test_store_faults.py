"""The activation store never gives stale or corrupt numbers (issue: trustworthy store).

A shard with flipped bytes, a deleted settings file and new weights at the same model path each
lead to the numbers of a fresh store or to a refusal, never to the old numbers.
"""

from __future__ import annotations

import shutil
import warnings

import pytest
from lm_eval_helpers import icir_args, results_of

from harness.cli import main as icir_main

pytestmark = pytest.mark.slow


def _results(out):
    return results_of(out)["results"]["icir_mcq_n5"]


def test_flipped_bytes_in_a_shard_are_recomputed_to_the_fresh_numbers(shared, tmp_path):
    out = tmp_path / "run"
    assert icir_main(icir_args(shared, out, model_args="store_flush=4")) == 0
    (store,) = out.glob("*/activations")
    shard = sorted((store / "shards" / "icir_mcq_n5").glob("r*.safetensors"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensors
    shard.write_bytes(bytes(data))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert icir_main(icir_args(shared, out, model_args="store_flush=4")) == 0
    assert any(str(shard) in str(w.message) and "recomputed" in str(w.message) for w in caught)
    assert _results(out) == _results(shared / "ref_mcq")  # as a fresh store gives them


def test_new_weights_at_the_same_path_are_refused(shared, tmp_path, capsys):
    from harness.tiny_models import save_tiny

    model = tmp_path / "model"
    shutil.copytree(shared / "model", model)
    args = [a.replace(str(shared / "model"), str(model)) for a in icir_args(shared, tmp_path / "run")]
    assert icir_main(args) == 0
    save_tiny("qwen3_vl", model, seed=5, overwrite=True)  # other weights, same architecture and path
    assert icir_main(args) == 2
    assert "other capture settings (differing: identity)" in capsys.readouterr().err


def test_a_store_whose_settings_file_was_deleted_is_refused(shared, tmp_path, capsys):
    out = tmp_path / "run"
    assert icir_main(icir_args(shared, out)) == 0
    (store,) = out.glob("*/activations")
    (store / "capture_settings.json").unlink()
    assert icir_main(icir_args(shared, out, model_args="pointer_mode=proxy_causal")) == 2
    assert "holds captures but no capture_settings.json" in capsys.readouterr().err


def test_weights_are_hashed_once_per_path_size_and_mtime(tmp_path, monkeypatch):
    import hashlib
    import os

    import harness.activation_store
    from harness.protocol import weights_sha256

    monkeypatch.setenv("ICIR_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights one")
    (folder / "config.json").write_text("{}")  # not a weight file
    hashed = []
    real = harness.activation_store.file_sha256
    monkeypatch.setattr(harness.activation_store, "file_sha256", lambda p: hashed.append(p) or real(p))
    expected = hashlib.sha256(f"model.safetensors {hashlib.sha256(b'weights one').hexdigest()}\n".encode())
    assert weights_sha256(folder) == weights_sha256(folder) == expected.hexdigest()
    assert len(hashed) == 1  # the second call reads the cache
    (folder / "model.safetensors").write_bytes(b"weights two")  # same path, new weights
    os.utime(folder / "model.safetensors", ns=(1, 1))
    assert weights_sha256(folder) != expected.hexdigest() and len(hashed) == 2
