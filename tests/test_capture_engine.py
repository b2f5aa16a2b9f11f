"""capture_heads on a tiny random model of every supported architecture, against independent references.

References: eager attention (`output_attentions=True`) of an eager copy of the same model for the
exact pointer; an o_proj pre-hook of our own for head outputs; a hand softmax over q_proj/k_proj
outputs for the proxy pointer; the language model's `inputs_embeds` for image embeddings; the
plain forward's logits for answer logits; one-at-a-time captures for the batched path.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from harness.capture import (
    SUPPORTED_ARCHITECTURES,
    CaptureRequest,
    answer_token_ids,
    capture_heads,
    capture_heads_batch,
)
from harness.capture.adapters import (attention_modules, decoder_layers, key_sources, language_model, projection,
                                      resolve_adapter)
from harness.capture.inputs import encode_requests
from harness.tiny_models import ARCHS, build_tiny, random_images
from icir_common import UserInputError

PROMPT = (
    "Passage one is about a cat on a mat. <image> Then a dog runs in the park. <image> "
    "Question: which image shows the zebra? A. the first B. the second. Answer with a letter."
)
QUERY = (PROMPT.index("zebra"), PROMPT.index("zebra") + len("zebra"))
POSITIONS = ("cattok", "+1", "mid", "last")
TOLERANCE = 1e-5
# Gemma 4 alone: its head outputs are RMS-normed activations of size O(1), and the float32 rounding
# in which a padded row's kernels differ from an unpadded one's grows with them through its layers
# (tiny Gemma 4, seed 1, last layer: 2.4e-5), so its batched and lone head outputs are compared at
# 1e-4; every other family and field keeps TOLERANCE.
ACTIVATION_TOLERANCE = 1e-4
GEMMA4_HEAD_OUTPUTS = {("gemma4", "head_output"), ("gemma4_unified", "head_output")}


def test_every_tiny_architecture_has_an_adapter():
    """The table's families are its rows; every other tiny family's adapter is derived (no row)."""
    from harness.capture.adapters import derive_adapter, resolve_adapter
    from harness.tiny_models import DERIVED_ARCHS, TABLE_ARCHS

    assert set(TABLE_ARCHS) == set(SUPPORTED_ARCHITECTURES)
    for arch in DERIVED_ARCHS:
        model, _ = build_tiny(arch)
        assert resolve_adapter(model) == derive_adapter(model) and resolve_adapter(model).images.derived


@pytest.fixture(scope="module", params=ARCHS)
def arch_setup(request):
    """(arch, sdpa model, eager copy, processor, images) for one architecture."""
    model, processor = build_tiny(request.param, seed=1)
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    return request.param, model, eager, processor, random_images(2, seed=3, size=(64, 48))


def _encode(model, processor, prompt, images, span):
    inputs, _ = encode_requests(processor, [CaptureRequest(prompt, images, span)], int(model.config.image_token_id))
    return inputs


def _reference_image_spans(input_ids: torch.Tensor, image_token: int, special_ids: set[int]) -> list[tuple[int, int]]:
    """Runs of the image token, merged across gaps made only of added tokens (row-break markers)."""
    positions = (input_ids == image_token).nonzero()[:, 0].tolist()
    spans: list[list[int]] = []
    for pos in positions:
        if spans and all(int(t) in special_ids for t in input_ids[spans[-1][1] : pos]):
            spans[-1][1] = pos + 1
        else:
            spans.append([pos, pos + 1])
    return [tuple(span) for span in spans]


def _hooked_forward(model, inputs, modules_by_name):
    """Run a plain forward, recording the inputs/outputs of the named submodules with our own hooks."""
    seen: dict[str, list] = {name: [] for name in modules_by_name}
    handles = []
    for name, (module, kind) in modules_by_name.items():
        if kind == "pre":
            handles.append(module.register_forward_pre_hook(lambda m, a, n=name: seen[n].append(a[0].detach())))
        elif kind == "pre_hidden":
            hook = lambda m, a, kw, n=name: seen[n].append((a[0] if a else kw["hidden_states"]).detach())  # noqa: E731
            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        else:
            handles.append(module.register_forward_hook(lambda m, a, o, n=name: seen[n].append(o.detach())))
    try:
        with torch.no_grad():
            logits = model(**inputs, use_cache=False).logits
    finally:
        for handle in handles:
            handle.remove()
    return seen, logits


def test_exact_pointer_equals_eager_attention_rows(arch_setup):
    arch, model, eager, processor, images = arch_setup
    capture = capture_heads(model, processor, PROMPT, images, QUERY, positions=POSITIONS)
    inputs = _encode(model, processor, PROMPT, images, QUERY)
    ids = inputs["input_ids"][0]
    special = set(processor.tokenizer.added_tokens_decoder)
    spans = _reference_image_spans(ids, int(model.config.image_token_id), special)
    assert capture.image_spans == spans
    with torch.no_grad():
        attentions = eager(**inputs, output_attentions=True, use_cache=False).attentions
    assert len(attentions) == capture.n_layers
    rows = capture.readout_indices
    last = len(ids) - 1
    cattok = rows[0]
    assert rows == [cattok, cattok + 1, (cattok + last) // 2, last]
    # The cattok holds the last character of "zebra".
    assert processor.tokenizer.decode(ids[cattok]).endswith("a")
    reference = torch.stack(
        [torch.stack([att[0][:, rows, s:e].sum(-1) for s, e in spans], dim=-1) for att in attentions]
    ).permute(2, 0, 1, 3)  # [P, L, H, N]
    assert capture.pointer.shape == reference.shape == (4, capture.n_layers, capture.n_heads, 2)
    assert capture.pointer.dtype == torch.float32
    torch.testing.assert_close(capture.pointer, reference, atol=TOLERANCE, rtol=0)
    assert reference.sum(-1).max() < 1  # text tokens take attention too: not a trivially normalised score
    # The routing is undone: the language model is back on its own kernel.
    assert language_model(model, resolve_adapter(model)).config._attn_implementation == "sdpa"


def test_head_output_image_embeds_and_answer_logits_match_own_hooks(arch_setup):
    arch, model, _, processor, images = arch_setup
    answers = answer_token_ids(processor, ["A", "B"])
    capture = capture_heads(model, processor, PROMPT, images, QUERY, positions=POSITIONS, answer_tokens=answers)
    adapter = resolve_adapter(model)
    modules = attention_modules(model, adapter)
    inputs = _encode(model, processor, PROMPT, images, QUERY)
    watched = {f"o{l}": (projection(m, adapter, "o_proj"), "pre") for l, m in enumerate(modules)}  # o_proj / out_proj
    # §5.1: the input of decoder layer 0, after any embedding multiplier the language model applies
    watched["lm"] = (decoder_layers(model, adapter)[0], "pre_hidden")
    seen, logits = _hooked_forward(model, inputs, watched)
    rows = capture.readout_indices
    # each head's slice of the o_proj input: v_head_dim wide in latent attention, else head_dim
    widths = tuple(getattr(m, "v_head_dim", None) or m.head_dim for m in modules)
    assert capture.head_dims == widths and capture.head_dim == max(capture.head_dims)
    for layer, d_h in enumerate(capture.head_dims):
        o_in = seen[f"o{layer}"][0][0, rows]  # [P, H * d_h]
        head_output = capture.head_output[:, layer]
        torch.testing.assert_close(head_output[..., :d_h], o_in.view(len(rows), -1, d_h), atol=1e-6, rtol=0)
        assert not head_output[..., d_h:].any()  # narrower heads than the widest layer's: zero-padded
    embeds = seen["lm"][0][0]
    image_positions = inputs["input_ids"][0] == int(model.config.image_token_id)
    for index, (start, end) in enumerate(capture.image_spans):
        inside = torch.zeros_like(image_positions)
        inside[start:end] = True
        expected = embeds[image_positions & inside].mean(0)
        torch.testing.assert_close(capture.image_embeds[index], expected, atol=1e-6, rtol=0)
    assert capture.image_embeds.shape == (2, model.config.get_text_config().hidden_size)
    torch.testing.assert_close(capture.answer_logits, logits[0, -1, answers], atol=1e-5, rtol=0)


def _watched_projections(modules, sources) -> dict:
    """The projections whose outputs are each layer's queries and keys, read from the modules as
    transformers' own attention forwards use them: q_proj (or latent attention's q_b_proj) and
    k_proj, or for multi-head latent attention kv_a_proj_with_mqa and kv_b_proj."""
    watched = {}
    for layer, module in enumerate(modules):
        watched[f"q{layer}"] = (getattr(module, "q_proj", None) or module.q_b_proj, "out")
        if layer in set(sources) and hasattr(module, "kv_b_proj"):
            watched[f"kva{layer}"] = (module.kv_a_proj_with_mqa, "out")
            watched[f"kvb{layer}"] = (module.kv_b_proj, "out")
        elif layer in set(sources):
            watched[f"k{layer}"] = (module.k_proj, "out")
    return watched


def _hand_queries_keys(module, seen, layer, source, heads):
    """([T, H, d] queries, [T, KV, d] keys) of one layer before RoPE, from the hooked outputs:
    a gated q_proj (Qwen3.5) gives each head its query, then its output gate ([T, H, 2d]); latent
    attention's key of head h is kv_b_proj's first qk_nope_head_dim of head h, then the rotary
    part kv_a_proj_with_mqa gives every head (its columns after kv_lora_rank)."""
    width = getattr(module, "qk_head_dim", None) or module.head_dim
    queries = seen[f"q{layer}"][0][0]
    queries = queries.view(len(queries), heads, -1)[..., :width]
    if f"kvb{source}" not in seen:
        keys = seen[f"k{source}"][0][0]
        return queries, keys.view(len(keys), -1, width)
    nope = module.qk_nope_head_dim
    k_nope = seen[f"kvb{source}"][0][0].reshape(-1, heads, nope + module.v_head_dim)[..., :nope]
    k_rot = seen[f"kva{source}"][0][0][:, module.kv_lora_rank:]
    return queries, torch.cat([k_nope, k_rot[:, None, :].expand(-1, heads, -1)], dim=-1)


@pytest.mark.parametrize("mode", ["proxy", "proxy_causal"])
def test_proxy_pointer_equals_hand_softmax_of_projections(arch_setup, mode):
    arch, model, _, processor, images = arch_setup
    capture = capture_heads(model, processor, PROMPT, images, QUERY, positions=POSITIONS, mode=mode)
    modules = attention_modules(model, resolve_adapter(model))
    sources = key_sources(model, resolve_adapter(model))  # a KV-shared layer: the layer whose keys it reuses
    inputs = _encode(model, processor, PROMPT, images, QUERY)
    seen, _ = _hooked_forward(model, inputs, _watched_projections(modules, sources))
    heads = capture.n_heads
    expected = torch.zeros_like(capture.pointer_eq3)
    for layer, module in enumerate(modules):
        queries, keys = _hand_queries_keys(module, seen, layer, sources[layer], heads)
        group = heads // keys.shape[1]
        for head in range(heads):
            q, k = queries[:, head], keys[:, head // group]
            for p_index, p in enumerate(capture.readout_indices):
                visible = k if mode == "proxy" else k[: p + 1]
                weights = torch.softmax(visible @ q[p] / math.sqrt(q.shape[-1]), dim=0)
                for index, (start, end) in enumerate(capture.image_spans):
                    expected[p_index, layer, head, index] = weights[start:end].sum()
    torch.testing.assert_close(capture.pointer_eq3, expected, atol=TOLERANCE, rtol=0)
    # The same prefill also gave the exact score (Eq. 1), whatever the mode ranks by.
    exact = capture_heads(model, processor, PROMPT, images, QUERY, positions=POSITIONS)
    torch.testing.assert_close(capture.pointer, exact.pointer, atol=TOLERANCE, rtol=0)
    assert not torch.allclose(capture.pointer, capture.pointer_eq3)  # two different scores


def test_kv_shared_layers_take_the_keys_of_the_layer_that_stores_them():
    """Gemma 4 E2B/E4B layout: a KV-shared layer has no k_proj; its Eq. 3 keys are the k_proj output
    of the layer whose keys transformers stores for its kind (``kv_sharing_modes`` "store")."""
    model, _ = build_tiny("gemma4")
    text = model.config.get_text_config()
    modes, kinds = text.kv_sharing_modes, text.layer_types
    stored = {kinds[layer]: layer for layer, mode in enumerate(modes) if mode == "store"}
    expected = [stored[kinds[layer]] if mode == "reuse" else layer for layer, mode in enumerate(modes)]
    assert expected != list(range(len(modes)))  # some layers do reuse keys
    assert key_sources(model, resolve_adapter(model)) == expected


def test_batched_capture_equals_one_at_a_time(arch_setup):
    arch, model, _, processor, _ = arch_setup
    prompts = [
        PROMPT,
        "A short one: <image> has a zebra? Yes or No.",
        "First <image> second <image> third <image> and which one shows the zebra on grass? A B C",
    ]
    samples = []
    for seed, prompt in enumerate(prompts):
        images = random_images(prompt.count("<image>"), seed=10 + seed, size=(64, 48 + 16 * seed))
        start = prompt.index("zebra")
        samples.append(CaptureRequest(prompt, images, (start, start + 5)))
    answers = answer_token_ids(processor, ["A", "B"])
    for mode in ("exact", "proxy"):
        batched = capture_heads_batch(model, processor, samples, positions=POSITIONS, mode=mode, answer_tokens=answers)
        for sample, together in zip(samples, batched):
            alone = capture_heads(
                model, processor, sample.prompt, sample.images, sample.query_char_span, POSITIONS, mode, answers
            )
            assert together.image_spans == alone.image_spans
            assert together.readout_indices == alone.readout_indices
            for field in ("pointer", "pointer_eq3", "head_output", "image_embeds", "answer_logits"):
                atol = ACTIVATION_TOLERANCE if (arch, field) in GEMMA4_HEAD_OUTPUTS else TOLERANCE
                torch.testing.assert_close(getattr(together, field), getattr(alone, field), atol=atol, rtol=0)


NEEDLE_PROMPT = (
    "Passage one is about a cat on a mat. <image> The special magic number is 4821907. Then a dog runs. <image> "
    "What is the special magic number mentioned in the text above? Answer with the number only."
)
NEEDLE = (NEEDLE_PROMPT.index("The special"), NEEDLE_PROMPT.index("4821907.") + len("4821907."))
NEEDLE_QUERY = (NEEDLE_PROMPT.rindex("number"), NEEDLE_PROMPT.rindex("number") + len("number"))


def test_needle_mass_equals_eager_attention_on_the_needle_tokens(arch_setup):
    arch, model, eager, processor, images = arch_setup
    capture = capture_heads(model, processor, NEEDLE_PROMPT, images, NEEDLE_QUERY, positions=("cattok", "+1"),
                            needle_char_span=NEEDLE)
    request = CaptureRequest(NEEDLE_PROMPT, images, NEEDLE_QUERY, NEEDLE)
    inputs, (layout,) = encode_requests(processor, [request], int(model.config.image_token_id))
    ids = inputs["input_ids"][0]
    start, end = layout.needle_span
    # The span slices the needle sentence exactly: its tokens decode to it, one token less does not.
    assert processor.tokenizer.decode(ids[start:end]).strip() == NEEDLE_PROMPT[slice(*NEEDLE)]
    assert NEEDLE_PROMPT[slice(*NEEDLE)] not in processor.tokenizer.decode(ids[start + 1:end])
    assert NEEDLE_PROMPT[slice(*NEEDLE)] not in processor.tokenizer.decode(ids[start:end - 1])
    with torch.no_grad():
        attentions = eager(**inputs, output_attentions=True, use_cache=False).attentions
    last = len(ids) - 1
    reference = torch.stack([att[0][:, last, start:end].sum(-1) for att in attentions])  # [L, H]
    torch.testing.assert_close(capture.needle_mass, reference, atol=TOLERANCE, rtol=0)
    assert capture.needle_mass_eq3.shape == reference.shape
    # The needle adds a row and a column internally; everything else is what a capture without it gives.
    plain = capture_heads(model, processor, NEEDLE_PROMPT, images, NEEDLE_QUERY, positions=("cattok", "+1"))
    assert plain.needle_mass is None and capture.readout_indices == plain.readout_indices
    for name in ("pointer", "pointer_eq3", "head_output", "image_embeds"):
        torch.testing.assert_close(getattr(capture, name), getattr(plain, name), atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("arch", ["qwen3_vl", "qwen2_5_vl", "internvl", "llava_onevision", "llava_pixtral", "gemma3"])
def test_the_derived_adapter_finds_the_table_rows_paths(arch):
    """transformers' common layout: what the table's rows name is what `derive_adapter` finds from
    the model itself (the rows keep only the paper's image inputs)."""
    from harness.capture.adapters import derive_adapter, image_token_id, resolve_adapter

    model, _ = build_tiny(arch)
    row, derived = resolve_adapter(model), derive_adapter(model)
    for field in ("language_model", "layers", "attention", "o_proj", "q_proj", "k_proj"):
        assert getattr(derived, field) == getattr(row, field), field
    assert image_token_id(model, derived) == image_token_id(model, row)
    assert derived.images.derived and not row.images.derived


def _meta_model(model_type: str):
    from transformers import AutoConfig, AutoModelForImageTextToText

    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(AutoConfig.for_model(model_type))


def test_architectures_that_cannot_be_measured_are_refused_with_their_reason():
    """Refusals name the architecture and the reason, before any capture (meta-device models)."""
    from harness.capture.adapters import resolve_adapter

    reasons = {"mllama": "cross-attention", "florence2": "encoder-decoder", "fuyu": "query_key_value",
               "mistral_large4": "sparse latent attention", "nemotron_h_omni": "no decoder layer holds softmax",
               "mistral4": "a text-only model"}
    for model_type, reason in reasons.items():
        model = _meta_model(model_type)
        with pytest.raises(UserInputError, match=reason) as found:
            resolve_adapter(model)
        assert type(model).__name__ in str(found.value) and "\n" not in str(found.value)


def test_a_model_type_no_tiny_model_tests_is_refused_unless_a_user_opts_in(monkeypatch):
    """``llava_next`` has the common layout; taken out of the conformance-tested model types, the
    capture refuses it in one line naming the opt-in, and with the opt-in derives its adapter,
    marked untested (the protocol record's deviation)."""
    import harness.tiny_models
    from harness.capture.adapters import UNTESTED_MODEL_ARG, refusal_reason, resolve_adapter

    model = _meta_model("llava_next")
    assert resolve_adapter(model).conformance_tested and refusal_reason(model) is None
    monkeypatch.setattr(harness.tiny_models, "TESTED_MODEL_TYPES", harness.tiny_models.TESTED_MODEL_TYPES - {"llava_next"})
    with pytest.raises(UserInputError, match=f"not.*conformance tests.*{UNTESTED_MODEL_ARG}=true") as found:
        resolve_adapter(model)
    assert "\n" not in str(found.value)
    adapter = resolve_adapter(model, allow_untested=True)
    assert not adapter.conformance_tested and adapter.images.derived


@pytest.mark.parametrize(("model_type", "attention", "total"), [("qwen3_5", 8, 32), ("lfm3_vl", 11, 24)])
def test_a_hybrid_decoders_heads_are_those_of_its_attention_layers(model_type, attention, total):
    """Qwen3.5's default config: softmax attention in every 4th of 32 layers (``layer_types``), the
    others Gated DeltaNet; the grid rows are those 8 layers, in order."""
    from harness.capture.adapters import attention_layers, decoder_layers, resolve_adapter

    model = _meta_model(model_type)
    adapter = resolve_adapter(model, allow_untested=True)
    layers = attention_layers(model, adapter)
    kinds = model.config.get_text_config().layer_types
    assert len(decoder_layers(model, adapter)) == total and len(layers) == attention
    assert layers == [index for index, kind in enumerate(kinds) if "attention" in kind and "linear" not in kind]
