"""The exclusive-pointer training mask: which text positions can see the images, and through which head.

Checked by behaviour, not by the mask's layout: under the mask a text position's logits may depend
on the pixels only through the pointer head at a category token, so changing the pixels must leave
the logits of every text position before the first category token unchanged, must change them
from that token on, and must change nothing at any text position once the pointer head is zeroed.
"""

from __future__ import annotations

import pytest
import torch

from harness.capture import CaptureRequest, ablate_heads, answer_token_ids
from harness.capture.inputs import encode_requests
from harness.demo_model.exclusive_pointer import exclusive_pointer, exclusive_pointer_blocks
from harness.tiny_models import build_tiny, random_images

PROMPT = "A cat <image> a dog <image> a bird <image> Which image shows the dog? Answer with a letter."
POINTER = (1, 2)


@pytest.fixture(scope="module")
def model_and_processor():
    return build_tiny("qwen3_vl", seed=3)


def _inputs(model, processor, pixel_seed: int) -> dict[str, torch.Tensor]:
    requests = [CaptureRequest(PROMPT, random_images(3, seed=pixel_seed + row), (0, 1)) for row in range(2)]
    inputs, _ = encode_requests(processor, requests, int(model.config.image_token_id))
    return inputs


def _text_logits(model, inputs, category_ids: torch.Tensor | None, ablated=()) -> torch.Tensor:
    with torch.no_grad(), ablate_heads(model, list(ablated)):
        if category_ids is None:
            return model(**inputs).logits
        with exclusive_pointer(model, inputs["input_ids"], category_ids, POINTER):
            return model(**inputs).logits


def test_blocks_of_a_hand_written_row():
    # text, image, image, category, text, image, text
    ids = torch.tensor([[5, 9, 9, 7, 6, 9, 5]])
    other, pointer = exclusive_pointer_blocks(ids, image_token_id=9, category_ids=torch.tensor([7, 8]),
                                              num_heads=3, pointer_head=1)
    text_rows = torch.tensor([1, 0, 0, 1, 1, 0, 1], dtype=torch.bool)
    image_cols = torch.tensor([0, 1, 1, 0, 0, 1, 0], dtype=torch.bool)
    expected_other = text_rows[:, None] & image_cols[None, :]
    assert other.shape == (1, 1, 7, 7) and torch.equal(other[0, 0], expected_other)
    assert pointer.shape == (1, 3, 7, 7)
    assert torch.equal(pointer[0, 0], expected_other) and torch.equal(pointer[0, 2], expected_other)
    expected_pointer = expected_other.clone()
    expected_pointer[3] = False  # the category token may attend every image
    assert torch.equal(pointer[0, 1], expected_pointer)


def test_text_sees_images_only_through_the_pointer_head_at_a_category(model_and_processor):
    model, processor = model_and_processor
    first, second = _inputs(model, processor, 0), _inputs(model, processor, 100)
    ids = first["input_ids"]
    assert torch.equal(ids, second["input_ids"]) and not torch.equal(first["pixel_values"], second["pixel_values"])
    category = torch.tensor(answer_token_ids(processor, [" dog"]))
    mentions = torch.where(ids[0] == category)[0]
    first_mention = int(mentions.min())
    assert len(mentions) == 2  # "a dog <image>" ... "the dog?"
    text = ids[0] != model.config.image_token_id

    def changed(category_ids, ablated=()) -> torch.Tensor:
        """[T] whether the logits at each position differ between the two pixel sets (row 0)."""
        a, b = (_text_logits(model, inputs, category_ids, ablated)[0] for inputs in (first, second))
        return (a - b).abs().amax(-1) > 0

    positions = torch.arange(len(text))
    first_image = int(torch.where(ids[0] == model.config.image_token_id)[0].min())
    before_mention = text & (positions > first_image) & (positions < first_mention)  # " a" of "a dog"
    from_mention = text & (positions >= first_mention)
    assert before_mention.any()
    assert changed(None)[before_mention].all()
    masked = changed(category)
    assert not masked[before_mention].any()
    assert masked[from_mention].all()
    assert not changed(category, ablated=[POINTER])[text].any()


def test_the_model_is_restored_after_the_block(model_and_processor):
    model, processor = model_and_processor
    inputs = _inputs(model, processor, 0)
    before = _text_logits(model, inputs, None)
    with pytest.raises(RuntimeError, match="inside"):
        with exclusive_pointer(model, inputs["input_ids"], torch.tensor([0]), POINTER):
            raise RuntimeError("inside")
    assert model.model.language_model.config._attn_implementation == "sdpa"
    assert not any(hasattr(layer.self_attn, "_exclusive_pointer_block") for layer in model.model.language_model.layers)
    assert torch.equal(_text_logits(model, inputs, None), before)


def test_without_images_the_mask_changes_nothing(model_and_processor):
    model, processor = model_and_processor
    texts = ["Which image shows the dog?", "A cat and a bird. Which image shows the dog? Answer with a letter."]
    inputs = dict(processor.tokenizer(texts, return_tensors="pt", padding=True))
    assert not inputs["attention_mask"].all()  # padded: SDPA gets a mask tensor, not the causal flag
    category = torch.tensor(answer_token_ids(processor, [" dog"]))
    plain = _text_logits(model, inputs, None)
    masked = _text_logits(model, inputs, category)
    valid = inputs["attention_mask"].bool()
    torch.testing.assert_close(masked[valid], plain[valid], rtol=0, atol=1e-5)


def test_refuses_a_model_not_on_sdpa():
    model, processor = build_tiny("qwen3_vl", seed=3, attn_implementation="eager")
    with pytest.raises(ValueError, match="SDPA"):
        with exclusive_pointer(model, torch.zeros(1, 4, dtype=torch.long), torch.tensor([0]), POINTER):
            pass
