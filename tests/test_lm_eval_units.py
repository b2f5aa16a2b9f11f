"""Pieces of the lm-eval plugin: answer-word stopping, model arguments, rankings, request checks."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.analysis import vote_curve as _vote_curve
from harness.evaluation import check_task_names, task_manager
from harness.lm_eval_plugin.documents import doc_input, fingerprint, group_by_doc
from harness.lm_eval_plugin.model import image_side, parse_readout
from harness.lm_eval_plugin.rankings_io import load_head_ranking, load_writer_probes, ranking_document
from harness.lm_eval_plugin.stopping import StopAtAnswerWord, has_answer_word
from harness.metrics.probes import WriterProbes
from harness.tiny_models import build_tiny
from icir_common import UserInputError, write_json


@pytest.mark.parametrize(
    ("text", "stops"),
    [
        ("No", False),  # could still become "Nothing"
        ("No,", True),
        ("Nothing ", False),
        ("Yes there", True),
        ("I think the answer is yes.", True),
        ("NO!", True),
        ("no-one ", False),  # the toolkit keeps "no-one" as one word
        ("Maybe", False),
    ],
)
def test_answer_word_is_complete_before_stopping(text, stops):
    assert has_answer_word(text, ("yes", "no")) is stops


def test_stopping_criterion_reads_only_generated_tokens():
    _, processor = build_tiny("qwen3_vl")
    tokenizer = processor.tokenizer
    prompt = tokenizer("Answer yes or no: ", return_tensors="pt")["input_ids"]
    rows = [tokenizer.encode(text, add_special_tokens=False) for text in ("Yes, it", "Nothing he")]
    width = max(len(r) for r in rows)
    generated = torch.tensor([r + [r[-1]] * (width - len(r)) for r in rows])
    ids = torch.cat([prompt.repeat(2, 1), generated], dim=1)
    done = StopAtAnswerWord(tokenizer, ("yes", "no"), prompt.shape[1])(ids, None)
    assert done.tolist() == [True, False]


def test_readout_argument():
    assert parse_readout("cattok/+1/last") == ("cattok", "+1", "last")
    assert parse_readout(2) == ("+2",)  # lm-eval parses "readout=+2" to the integer 2
    assert parse_readout(["mid", "last"]) == ("mid", "last")
    with pytest.raises(UserInputError, match="unknown readout position"):
        parse_readout("cattok/first")


def test_image_side_comes_from_the_user_the_model_folder_or_the_protocol(tmp_path):
    from harness.demo_model import default_model_path

    assert image_side(96, str(tmp_path)) == (96, "user")
    assert image_side(None, str(tmp_path)) == (None, None)  # the family's protocol side
    assert image_side(None, str(default_model_path())) == (64, "model")  # the demo model's toy images
    assert image_side("protocol", str(default_model_path())) == (64, "model")
    with pytest.raises(UserInputError, match="image_budget must be a side in pixels"):
        image_side("big", str(tmp_path))


def test_ranking_file_round_trip(tmp_path):
    grid = np.array([[0.1, 0.7, 0.3], [0.7, 0.0, 0.2]])
    document = ranking_document(grid, "pointer", "cattok")
    assert document["ranking"][:3] == ["L00H01", "L01H00", "L00H02"]  # tie: smaller flat index first
    write_json(tmp_path / "ranking.json", document)
    assert load_head_ranking(tmp_path / "ranking.json", 2, 3).tolist() == [1, 3, 2, 5, 0, 4]
    with pytest.raises(UserInputError, match="2 layers x 3 heads; this model has 4 x 4"):
        load_head_ranking(tmp_path / "ranking.json", 4, 4)
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(UserInputError, match="is not a head ranking"):
        load_head_ranking(tmp_path / "other.json", 2, 3)


def test_writer_probe_ranking_comes_from_their_writer_grid(tmp_path):
    probes = WriterProbes.initialise(np.arange(4), 2, 2, 3, 5, 4, seed=0)
    probes.info = {"writer_r1": {"L00H00": 0.1, "L00H01": 0.4, "L01H00": 0.4, "L01H01": 0.9}}
    probes.save(tmp_path / "probes")
    loaded, ranking = load_writer_probes(tmp_path / "probes", 2, 2)
    assert ranking.tolist() == [3, 1, 2, 0]
    assert torch.equal(loaded.f_weight, probes.f_weight)
    with pytest.raises(UserInputError, match="this model has 3 x 2"):
        load_writer_probes(tmp_path / "probes", 3, 2)


def test_vote_over_more_heads_than_the_model_has_uses_all():
    votes = np.array([[[0, 1], [1, 1]], [[2, 2], [0, 2]]])  # 2 samples, 2 x 2 heads
    curve = _vote_curve(votes, np.array([1, 2]), np.array([0, 1, 2, 3]))
    assert curve[1] == 0.5 and curve[3] == 1.0  # top-3 votes {0,1,1} -> 1 and {2,2,0} -> 2
    assert curve[5] == curve[30] == 1.0  # all four heads: {0,1,1,1} -> 1, {2,2,0,2} -> 2


def _request(context, doc, visual=(Image.new("RGB", (8, 8)),), task="icir_mcq_n5", doc_id=3):
    return types.SimpleNamespace(args=(context, "A", {"visual": list(visual)}), doc=doc, task_name=task, doc_id=doc_id)


def test_requests_must_carry_the_stored_prompt_and_a_cattok_span():
    doc = {"prompt": "<image> Which shape? circle", "cattok_char_span": [21, 27]}
    parsed = doc_input(_request(doc["prompt"], doc))
    assert (parsed.task, parsed.doc_id, parsed.query_char_span) == ("icir_mcq_n5", 3, (21, 27))
    assert parsed.fingerprint == fingerprint(doc["prompt"], [21, 27], [Image.new("RGB", (8, 8))])
    assert parsed.fingerprint != fingerprint(doc["prompt"], [21, 27], [Image.new("RGB", (8, 8), "red")])
    with pytest.raises(UserInputError, match="do not pass --apply_chat_template"):
        doc_input(_request("<|im_start|>user\n" + doc["prompt"], doc))
    with pytest.raises(UserInputError, match="'cattok_char_span' fields"):
        doc_input(_request(doc["prompt"], {"prompt": doc["prompt"]}))


def test_requests_group_by_document():
    requests = [types.SimpleNamespace(task_name=t, doc_id=d) for t, d in [("a", 0), ("a", 1), ("a", 0), ("b", 0)]]
    assert group_by_doc(requests) == {("a", 0): [0, 2], ("a", 1): [1], ("b", 0): [3]}


def test_task_names_are_checked_with_suggestions():
    known = task_manager({}).all_tasks
    assert {"icir_mcq", "icir_mcq_n5", "icir_mcq_n6", "vhs_single", "vhs_single_n100", "vhs_multi_n10"} <= set(known)
    assert check_task_names(["icir_mcq_n5,vhs_single_n10"], known) == ["icir_mcq_n5", "vhs_single_n10"]
    with pytest.raises(UserInputError, match="unknown task 'icir_mcq_5'; did you mean icir_mcq_n5"):
        check_task_names(["icir_mcq_5"], known)
    with pytest.raises(UserInputError, match="choose from icir_mcq"):
        check_task_names(["hellaswag"], known)


def test_default_model_is_the_shipped_demo_model(tmp_path, monkeypatch):
    from harness import demo_model as default_model
    from harness.lm_eval_plugin.model import check_architecture

    path = default_model.default_model_path()
    assert path == Path(default_model.__file__).parent / "shipped"
    check_architecture(str(path), None, False)  # a supported LVLM: no error
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(default_model, "SHIPPED_DEMO_MODEL", tmp_path)
    with pytest.raises(UserInputError, match="lacks model.safetensors: reinstall the package with its data"):
        default_model.default_model_path()
