"""The activation store: shards round-trip, resume after a kill, refuse mixed settings."""

from __future__ import annotations

import json
import re

import pytest
import torch

from harness.activation_store import ActivationStore
from icir_common import UserInputError

SETTINGS = {"model": "tiny", "readout": ["cattok"], "eq3": "proxy"}


def _tensors(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"pointer": torch.rand(1, 2, 3, 5, generator=generator), "image_embeds": torch.rand(5, 4, generator=generator)}


def test_round_trip_through_shards(tmp_path):
    store = ActivationStore(tmp_path, SETTINGS, flush_every=2)
    for doc_id in range(5):
        store.put("icir_mcq_n5", doc_id, {"fingerprint": f"f{doc_id}"}, _tensors(doc_id))
    shards = sorted(p.name for p in (tmp_path / "shards" / "icir_mcq_n5").glob("*.safetensors"))
    assert shards == ["r000-000000.safetensors", "r000-000001.safetensors"]  # doc 4 still buffered
    assert store.record("icir_mcq_n5", 4) == {"fingerprint": "f4"}
    store.flush()

    reopened = ActivationStore(tmp_path, SETTINGS)
    assert reopened.doc_ids("icir_mcq_n5") == [0, 1, 2, 3, 4]
    docs = reopened.load("icir_mcq_n5", [3, 0], fields=["pointer"])
    assert [d.doc_id for d in docs] == [3, 0]
    assert list(docs[0].tensors) == ["pointer"]
    assert torch.equal(docs[0].tensors["pointer"], _tensors(3)["pointer"])
    assert docs[1].record == {"fingerprint": "f0"}


def test_buffered_documents_load_before_a_flush(tmp_path):
    store = ActivationStore(tmp_path, SETTINGS, flush_every=10)
    store.put("t", 7, {"x": 1}, _tensors(7))
    (doc,) = store.load("t", [7])
    assert torch.equal(doc.tensors["image_embeds"], _tensors(7)["image_embeds"])


def test_a_document_is_written_once(tmp_path):
    store = ActivationStore(tmp_path, SETTINGS, flush_every=1)
    store.put("t", 0, {"x": 1}, _tensors(0))
    store.put("t", 0, {"x": 2}, _tensors(1))  # e.g. data-parallel padding repeats a request
    assert len(list((tmp_path / "shards" / "t").glob("*.safetensors"))) == 1
    assert ActivationStore(tmp_path, SETTINGS).record("t", 0) == {"x": 1}


def test_ranks_write_their_own_shards_and_see_each_other(tmp_path):
    rank0 = ActivationStore(tmp_path, SETTINGS, rank=0)
    rank1 = ActivationStore(tmp_path, SETTINGS, rank=1)
    rank0.put("t", 0, {}, _tensors(0))
    rank1.put("t", 1, {}, _tensors(1))
    rank0.flush()
    rank1.flush()
    assert sorted(p.name for p in (tmp_path / "shards" / "t").glob("*.safetensors")) == [
        "r000-000000.safetensors",
        "r001-000000.safetensors",
    ]
    assert [d.doc_id for d in rank0.load("t", [0, 1])] == [0, 1]  # load re-scans for rank 1's shard


def test_a_half_written_shard_is_ignored(tmp_path):
    store = ActivationStore(tmp_path, SETTINGS, flush_every=1)
    store.put("t", 0, {}, _tensors(0))
    (tmp_path / "shards" / "t" / ".r000-000001.safetensors.tmp-123").write_bytes(b"killed mid-write")
    reopened = ActivationStore(tmp_path, SETTINGS)
    assert reopened.doc_ids("t") == [0]
    reopened.put("t", 1, {}, _tensors(1))
    reopened.flush()
    assert ActivationStore(tmp_path, SETTINGS).doc_ids("t") == [0, 1]


def test_other_settings_are_refused(tmp_path):
    ActivationStore(tmp_path, SETTINGS)
    with pytest.raises(UserInputError, match=r"other capture settings \(differing: eq3\)"):
        ActivationStore(tmp_path, {**SETTINGS, "eq3": "proxy_causal"})
    assert json.loads((tmp_path / "capture_settings.json").read_text()) == SETTINGS


def test_missing_documents_are_named(tmp_path):
    store = ActivationStore(tmp_path, SETTINGS)
    with pytest.raises(UserInputError, match=r"no capture for task 't' doc ids \[3\]"):
        store.load("t", [3])


def _shard(tmp_path):
    (shard,) = (tmp_path / "shards" / "task").glob("r*.safetensors")
    return shard


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "edit_records", "no_checksum"])
def test_a_damaged_shard_is_set_aside_and_its_documents_recomputed(tmp_path, damage):
    store = ActivationStore(tmp_path, SETTINGS, flush_every=2)
    store.put("task", 0, {"n": 0}, {"pointer": torch.arange(6.0).reshape(1, 2, 3)})
    store.put("task", 1, {"n": 1}, {"pointer": torch.ones(1, 2, 3)})
    shard = _shard(tmp_path)
    data = bytearray(shard.read_bytes())
    if damage == "flip":
        data[-3] ^= 0xFF  # inside the last tensor's bytes
        shard.write_bytes(bytes(data))
    elif damage == "truncate":
        shard.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "empty":
        shard.write_bytes(b"")
    elif damage == "edit_records":
        edited = bytes(data).replace(b'n\\": 1', b'n\\": 7')  # the records JSON inside the header's JSON
        assert edited != bytes(data)
        shard.write_bytes(edited)
    else:
        (shard.parent / (shard.name + ".sha256")).unlink()
    with pytest.warns(UserWarning, match=rf"shard {re.escape(str(shard))} .*its documents are recomputed"):
        reopened = ActivationStore(tmp_path, SETTINGS)
    assert reopened.doc_ids("task") == []  # nothing unproven is reused
    assert not list((tmp_path / "shards" / "task").glob("r*.safetensors"))  # set aside, not deleted
    assert list((tmp_path / "shards" / "task").glob(".corrupt-r*.safetensors"))
    reopened.put("task", 1, {"n": 1}, {"pointer": torch.ones(1, 2, 3)})
    reopened.flush()
    assert ActivationStore(tmp_path, SETTINGS).load("task", [1])[0].record == {"n": 1}


def test_a_store_without_its_settings_file_is_refused(tmp_path):
    store = ActivationStore(tmp_path, SETTINGS, flush_every=1)
    store.put("task", 0, {"n": 0}, {"pointer": torch.zeros(1)})
    (tmp_path / "capture_settings.json").unlink()
    with pytest.raises(UserInputError, match="holds captures but no capture_settings.json"):
        ActivationStore(tmp_path, {**SETTINGS, "eq3": "proxy_causal"})
