"""One encoding and one prefill per VHs document: decoding continues from the capture's KV cache.

For every tiny architecture, the tokens that `generation.continue_greedy` decodes from the capture
prefill equal a plain ``model.generate`` on the capture's own encoded inputs, with and without
the answer-word stop; the model class generates from exactly the capture's input ids (one BOS),
and its store records the generation settings exactly as the task asked for them.
"""

from __future__ import annotations

import copy
import types

import pytest
import torch
import transformers

from harness.capture.adapters import image_token_id, resolve_adapter
from harness.capture.engine import capture_encoded
from harness.capture.inputs import CaptureRequest, encode_requests
from harness.lm_eval_plugin.generation import GreedySettings, continue_greedy, greedy_settings
from harness.lm_eval_plugin.stopping import StopAtAnswerWord
from harness.tiny_models import ARCHS, build_tiny, random_images, save_tiny
from icir_common import UserInputError

PROMPT = "<image><image><image>\nFor the image with a cat, is there a dog? Answer Yes or No."
MAX_NEW = 6


@pytest.fixture(scope="module", params=ARCHS)
def arch_setup(request):
    torch.manual_seed(0)
    model, processor = build_tiny(request.param, seed=1)
    request_ = CaptureRequest(PROMPT, random_images(3, seed=2), (PROMPT.index("cat"), PROMPT.index("cat") + 3))
    inputs, layouts = encode_requests(processor, [request_], image_token_id(model, resolve_adapter(model)))
    return request.param, model, processor, inputs, layouts


def _captured_continuation(model, processor, inputs, layouts, settings):
    cache = transformers.DynamicCache(config=model.config)
    vocab = range(model.get_output_embeddings().out_features)
    (capture,) = capture_encoded(model, inputs, layouts, ("cattok",), "exact", vocab, cache)
    return continue_greedy(model, processor.tokenizer, inputs["input_ids"], cache, capture.answer_logits, settings)


def test_decoding_from_the_capture_prefill_equals_plain_generate(arch_setup):
    _, model, processor, inputs, layouts = arch_setup
    length = inputs["input_ids"].shape[1]
    plain = model.generate(**inputs, max_new_tokens=MAX_NEW, do_sample=False)[0, length:].tolist()
    settings = GreedySettings({}, (), MAX_NEW, ())
    assert _captured_continuation(model, processor, inputs, layouts, settings) == plain
    assert len(plain) == MAX_NEW  # a random model does not stop early: every step is compared


def test_answer_word_stop_matches_plain_generate(arch_setup):
    _, model, processor, inputs, layouts = arch_setup
    tokenizer = processor.tokenizer
    length = inputs["input_ids"].shape[1]
    # Stop at whatever complete word the model writes first, so the stop really fires.
    free = model.generate(**inputs, max_new_tokens=12, do_sample=False)[0, length:]
    words = tokenizer.decode(free, skip_special_tokens=True).split()
    stop = (words[0].strip(".,!?;:()\"").lower(),) if len(words) > 1 else ("yes",)
    criteria = transformers.StoppingCriteriaList([StopAtAnswerWord(tokenizer, stop, length)])
    plain = model.generate(**inputs, max_new_tokens=12, do_sample=False, stopping_criteria=criteria)
    settings = GreedySettings({}, (), 12, stop)
    assert _captured_continuation(model, processor, inputs, layouts, settings) == plain[0, length:].tolist()


@pytest.mark.parametrize("arch", ["gemma3", "llava_pixtral"])
def test_capture_encoding_holds_one_bos(arch):
    """These templates write the BOS themselves: processing their text as usual adds a second one."""
    from harness.capture.inputs import render

    model, processor = build_tiny(arch, seed=1)
    request = CaptureRequest(PROMPT, random_images(3, seed=2), None)
    inputs, _ = encode_requests(processor, [request], image_token_id(model, resolve_adapter(model)))
    bos = processor.tokenizer.bos_token_id
    assert inputs["input_ids"][0].tolist().count(bos) == 1 and int(inputs["input_ids"][0, 0]) == bos
    naive = processor(text=[render(processor, request)[0]], images=[list(request.images)], return_tensors="pt")
    assert naive["input_ids"][0].tolist().count(bos) == 2  # what a second encoding without the guard gives


def test_generation_settings_are_copied_never_shared():
    asked = {"until": [], "do_sample": False, "max_gen_toks": 8, "stop_at_words": ["yes", "no"]}
    kept = copy.deepcopy(asked)
    settings = greedy_settings(asked, eos="<|im_end|>", default_max=256)
    assert asked == kept  # lm-eval's stop handling appends the end token to a copy only
    assert settings.requested == kept and settings.until == ("<|im_end|>",)
    assert greedy_settings(asked, eos="<|im_end|>", default_max=256) == settings
    with pytest.raises(UserInputError, match="decodes greedily"):
        greedy_settings({"do_sample": True}, eos="", default_max=8)
    with pytest.raises(UserInputError, match="unsupported generation kwargs for hf-multimodal-heads: top_p"):
        greedy_settings({"top_p": 0.9}, eos="", default_max=8)


@pytest.mark.parametrize("arch", ["gemma3", "llava_pixtral", "qwen3_vl"])
def test_model_class_generates_from_the_capture_input_ids(arch, tmp_path):
    """Gemma 3 and Llava+Pixtral templates write the BOS themselves: no second one may be added."""
    from harness.lm_eval_plugin.model import HFMultimodalHeadsLM

    save_tiny(arch, tmp_path / "model", seed=3)
    lm = HFMultimodalHeadsLM(pretrained=str(tmp_path / "model"), store=str(tmp_path / "store"), device="cpu",
                             image_budget=64)
    images = random_images(3, seed=4)
    span = (PROMPT.index("cat"), PROMPT.index("cat") + 3)
    doc = {"prompt": PROMPT, "cattok_char_span": list(span), "needle_positions": [1], "answer": "No"}
    asked = {"until": [], "do_sample": False, "max_gen_toks": MAX_NEW}
    request = types.SimpleNamespace(args=(PROMPT, asked, {"visual": images}), doc=doc, task_name="vhs_single_n3",
                                    doc_id=0)
    (text,) = lm.generate_until([request])
    record = lm.store.record("vhs_single_n3", 0)
    inputs, _ = encode_requests(lm.processor, [CaptureRequest(PROMPT, images, span)],
                                image_token_id(lm.model, resolve_adapter(lm.model)))
    length = inputs["input_ids"].shape[1]
    plain = lm.model.generate(**inputs, max_new_tokens=MAX_NEW, do_sample=False)[0, length:].tolist()
    assert record["generated_ids"] == plain and record["response"] == text
    assert record["generation_kwargs"] == asked and asked == {"until": [], "do_sample": False, "max_gen_toks": MAX_NEW}
    assert record["fields"] == {"needle_positions": [1], "answer": "No"}
    assert (lm.generate_until([request])) == [text]  # from the store: the same settings are accepted


def test_max_length_refuses_a_prompt_that_does_not_fit(tmp_path):
    """``max_length`` cuts nothing: a prompt (plus its answer tokens) over it is an error naming the document."""
    from harness.lm_eval_plugin.documents import doc_input
    from harness.lm_eval_plugin.model import HFMultimodalHeadsLM

    save_tiny("qwen3_vl", tmp_path / "model", seed=3)
    images = random_images(3, seed=4)
    span = (PROMPT.index("cat"), PROMPT.index("cat") + 3)
    request = types.SimpleNamespace(args=(PROMPT, {"max_gen_toks": 4}, {"visual": images}), task_name="vhs_single_n3",
                                    doc={"prompt": PROMPT, "cattok_char_span": list(span)}, doc_id=7)
    unlimited = HFMultimodalHeadsLM(pretrained=str(tmp_path / "model"), store=str(tmp_path / "store"), device="cpu",
                                    image_budget=64)
    length = unlimited._encode([doc_input(request)])[1][0].last + 1
    for limit, fits in ((length + 3, False), (length + 4, True)):
        lm = HFMultimodalHeadsLM(pretrained=str(tmp_path / "model"), store=str(tmp_path / f"store{limit}"),
                                 device="cpu", image_budget=64, max_length=limit)
        if fits:
            assert len(lm.generate_until([request])) == 1
        else:
            with pytest.raises(UserInputError, match=rf"task vhs_single_n3 doc 7: the prompt is {length} tokens "
                                                     rf"\(\+ 4 to generate\), over max_length={limit}"):
                lm.generate_until([request])


def test_a_document_that_cannot_be_mapped_is_named(tmp_path):
    """A span error names the task and document, also inside a batch of several documents."""
    from harness.lm_eval_plugin.model import HFMultimodalHeadsLM

    save_tiny("qwen3_vl", tmp_path / "model", seed=3)
    lm = HFMultimodalHeadsLM(pretrained=str(tmp_path / "model"), store=str(tmp_path / "store"), device="cpu",
                             image_budget=64, batch_size=2)
    images = random_images(3, seed=4)
    span = [PROMPT.index("cat"), PROMPT.index("cat") + 3]

    def request(doc_id, prompt):
        doc = {"prompt": prompt, "cattok_char_span": span}
        return types.SimpleNamespace(args=(prompt, "A", {"visual": images}), doc=doc, task_name="icir_mcq_n5",
                                     doc_id=doc_id)

    broken = PROMPT.replace("<image>", "", 1)  # two placeholders for three images
    with pytest.raises(UserInputError, match=r"^task icir_mcq_n5 doc 5 \(.*model\): the prompt holds 2 <image>"):
        lm.loglikelihood([request(4, PROMPT), request(5, broken)])
