"""The adapter table: where each supported LVLM keeps its language-model heads and image tokens.

Adding a model family is one row in `ADAPTERS`. Every row is read the same way:

- ``language_model``: dotted attribute path from the ``...ForConditionalGeneration`` model to the
  language-model decoder (a ``PreTrainedModel`` with its own text config); its attention
  implementation is what the capture switches, so the vision tower keeps its own.
- ``layers`` / ``attention`` / ``o_proj`` / ``q_proj`` / ``k_proj``: paths to the decoder layers,
  the attention module inside one layer, and the projections inside that module.
- ``image_token_id``: the config attribute holding the id of the model's own image-placeholder
  token (the token whose runs in ``input_ids`` are replaced by projected visual tokens).
- ``images``: how the protocol feeds images to the family's processor (an `ImageInputs`: the
  per-image side, whether a user may change it, a square resize before the processor, and the
  keyword arguments of the processor call); `harness.capture.image_inputs.resolve_image_inputs`
  turns it into the transform and call arguments `inputs.encode_requests` applies.
- Image embeddings (paper §5.1, ``docs/protocol.md``) are read the same way for every row: the input
  of decoder layer 0 at the image-token positions, i.e. the projected visual tokens that replaced
  the placeholders, after any embedding scaling and before features some models inject into later
  layers (Qwen3-VL DeepStack).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from icir_common import UserInputError

from .projections import LATENT_PROJECTIONS, is_latent, query_projection


@dataclasses.dataclass(frozen=True)
class ImageSlot:
    """A value of `ImageInputs.call_kwargs` filled in from the resolved side (`SIDE` or `PIXELS`)."""

    name: str

    def value(self, side: int) -> int:
        """``side`` for `SIDE`, ``side * side`` for `PIXELS`."""
        return side if self.name == "side" else side * side

    def __repr__(self) -> str:
        return self.name.upper()


SIDE = ImageSlot("side")
"""The resolved per-image side in pixels."""
PIXELS = ImageSlot("pixels")
"""The resolved per-image pixel budget, side x side."""


@dataclasses.dataclass(frozen=True)
class ImageInputs:
    """How the protocol feeds one family's images to its processor (paper App. A, App. J.1).

    The protocol fixes the per-image input so that every image of a prompt gives the same number of
    visual tokens (App. J.1) and models are compared at a fixed input size (App. A: 448 x 448 px).

    Attributes:
        side: the protocol's per-image side in pixels; None: the image processor's own square input
            (its ``size`` height == width, i.e. the vision tower's tile: InternVL 448, LLaVA-OneVision
            384, Gemma 3 896 on the real checkpoints).
        user_side: whether a user may pick another side. False where the side is the vision tower's
            tile: another one is resized back to the tile or changes the tiling, never the budget.
        square: resize each image to ``side x side`` (PIL, BICUBIC, after RGB conversion) before the
            processor (App. A: "448x448 resize (BICUBIC)"); False keeps the image as given and lets
            the processor resize it.
        call_kwargs: ``images_kwargs`` of the processor call, `SIDE` / `PIXELS` filled in from the
            resolved side (they override the processor's defaults and its image processor's
            attributes for this call only).
        lone_images: pass the images as one flat list, so the processor (and the model, through the
            ``batch_num_images`` it returns) treats every image as a prompt's only image
            (LLaVA-OneVision: base tile + any-res crops for every image, not the base tile alone
            for prompts holding several images).
        derived: the family is outside the table: its processor's own input, tiling switches
            (`TILING_SWITCHES`) off; no protocol side exists, so a run is off the protocol.
        source: where the setting comes from (paper section, processor behaviour), for the record.
    """

    side: int | None = None
    user_side: bool = False
    square: bool = False
    call_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    lone_images: bool = False
    derived: bool = False
    source: str = ""


# Qwen2.5-VL / Qwen3-VL: aspect ratio kept, pixel count fixed (App. A). Each side is rounded to a
# multiple of patch x merge (28 / 32 px), so the token count follows the budget (~192 at 448 px).
_QWEN_IMAGES = ImageInputs(
    side=448,
    user_side=True,
    call_kwargs={"size": {"shortest_edge": PIXELS, "longest_edge": PIXELS}},
    source="App. A: min_pixels = max_pixels = side x side, aspect ratio kept",
)


@dataclasses.dataclass(frozen=True)
class ModelAdapter:
    """One row of the adapter table (see the module docstring for what each path means).

    ``conformance_tested`` is False only for an adapter derived for a model type that no tiny model
    of `harness.tiny_models` tests, run because a user opted in (`derive_adapter`); the protocol
    record names it as a deviation."""

    name: str
    model_type: str
    vision_model_type: str | None = None
    language_model: str = "model.language_model"
    layers: str = "layers"
    attention: str = "self_attn"
    o_proj: str = "o_proj"
    q_proj: str = "q_proj"
    k_proj: str = "k_proj"
    image_token_id: str = "image_token_id"
    images: ImageInputs = dataclasses.field(default_factory=ImageInputs, kw_only=True)
    conformance_tested: bool = dataclasses.field(default=True, kw_only=True)

    def matches(self, config) -> bool:
        """Whether a top-level model config (``model.config``) belongs to this row."""
        if config.model_type != self.model_type:
            return False
        if self.vision_model_type is None:
            return True
        vision_config = getattr(config, "vision_config", None)
        return getattr(vision_config, "model_type", None) == self.vision_model_type


ADAPTERS: tuple[ModelAdapter, ...] = (
    ModelAdapter("qwen3_vl", model_type="qwen3_vl", images=_QWEN_IMAGES),
    ModelAdapter("qwen2_5_vl", model_type="qwen2_5_vl", images=_QWEN_IMAGES),
    # One tile per image: the processor's own crop_to_patches=True would cut a 640x480 image into
    # 12 tiles + a thumbnail; only the call argument turns it off (not the image-processor attribute).
    ModelAdapter(
        "internvl",
        model_type="internvl",
        images=ImageInputs(
            square=True,
            call_kwargs={"crop_to_patches": False},
            source="App. A: one 448x448 BICUBIC tile (256 tokens), crop_to_patches=False",
        ),
    ),
    # Square tile-size input, each image a lone image: base tile + exactly one any-res crop with its
    # newline tokens (27x27 + 27x27 + 27 = 1,485 at 384 px, App. J.2). The crop grid is chosen from
    # the processor's and the model config's own image_grid_pinpoints (which hold [384, 384]); an
    # image_grid_pinpoints call argument would reach the image processor only and break the model.
    ModelAdapter(
        "llava_onevision",
        model_type="llava_onevision",
        images=ImageInputs(
            square=True,
            lone_images=True,
            source="App. J.1: 384-px single-tile input per image (~1,485 tokens)",
        ),
    ),
    # Pixtral keeps the aspect ratio within longest_edge: a square side x side input gives every
    # image (side / 16)^2 [IMG] tokens (784 at 448 px) plus its row breaks.
    ModelAdapter(
        "llava_pixtral",
        model_type="llava",
        vision_model_type="pixtral",
        images=ImageInputs(
            side=448,
            user_side=True,
            square=True,
            call_kwargs={"size": {"longest_edge": SIDE}},
            source="App. J.1: 448-px square input, longest_edge = side",
        ),
    ),
    # Gemma 3 resizes every image to its fixed 896x896 input (256 soft tokens); pan-and-scan crops
    # would add tokens for elongated images.
    ModelAdapter(
        "gemma3",
        model_type="gemma3",
        images=ImageInputs(
            call_kwargs={"do_pan_and_scan": False},
            source="Gemma 3's fixed 896x896 input (256 tokens), do_pan_and_scan=False",
        ),
    ),
)
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(adapter.name for adapter in ADAPTERS)

# Where transformers' common layout keeps the language-model decoder of a
# ``...ForConditionalGeneration`` (tried in order), the output-projection names it uses, and the
# config attributes that hold the image placeholder's id.
DECODER_PATHS: tuple[str, ...] = ("model.language_model", "model.text_model", "language_model.model", "language_model")
O_PROJ_NAMES: tuple[str, ...] = ("o_proj", "out_proj")
IMAGE_TOKEN_ATTRIBUTES: tuple[str, ...] = ("image_token_id", "image_token_index")

# Families outside the paper's table take their processor's own image input with tiling turned
# off (App. J.1: equal tokens per image); these image-processor switches turn tiling off.
TILING_SWITCHES: tuple[str, ...] = ("do_image_splitting", "crop_to_patches", "do_pan_and_scan", "image_splitting")
DERIVED_IMAGES_SOURCE = "family outside the icir-heads table: processor defaults"
UNTESTED_MODEL_ARG = "untested_architecture"
UNTESTED_REASON = (f"its layout is derivable, but no tiny model of this model type passes the conformance tests "
                   f"in this release (docs/models.md); pass --model_args {UNTESTED_MODEL_ARG}=true to measure it "
                   f"anyway on the derived adapter (a deviation the protocol record names)")

_REGISTERED: list[ModelAdapter] = []


def register_adapter(adapter: ModelAdapter) -> None:
    """Add a row to the table for this process (before `ADAPTERS`' own rows are tried): a family
    whose layout cannot be derived, or whose protocol image inputs a user fixes, without editing
    the package (the pyvene-style per-family mapping users extend; docs/models.md has an example).

    Raises:
        UserInputError: `adapter` is not a `ModelAdapter`.
    """
    if not isinstance(adapter, ModelAdapter):
        raise UserInputError(f"register_adapter takes a ModelAdapter, got {type(adapter).__name__}")
    _REGISTERED.insert(0, adapter)


def _child(module: nn.Module, dotted: str) -> nn.Module | None:
    for name in dotted.split("."):
        module = getattr(module, name, None)
        if not isinstance(module, nn.Module):
            return None
    return module


def _kv_source(attentions: Sequence[nn.Module | None], index: int, k_proj: str = "k_proj") -> int | None:
    """The layer whose `k_proj` forms layer `index`'s keys: `index` itself when it has one (or is
    latent attention, `projections.is_latent`, which forms its own keys); for a
    KV-shared layer (transformers' ``is_kv_shared_layer``: Gemma 3n, Gemma 4 E2B/E4B), which reuses
    the keys that the last earlier layer of its ``layer_type`` stores, that layer; else None."""
    attention = attentions[index]
    if isinstance(_child(attention, k_proj), nn.Module) or (attention is not None and is_latent(attention)):
        return index
    if getattr(attention, "is_kv_shared_layer", False) is not True:
        return None
    kind = getattr(attention, "layer_type", None)
    return next((earlier for earlier in range(index - 1, -1, -1)
                 if isinstance(_child(attentions[earlier], k_proj), nn.Module)
                 and getattr(attentions[earlier], "layer_type", None) == kind), None)


def refusal_reason(model: nn.Module) -> str | None:
    """Why head capture cannot measure `model`'s architecture (one clause), or None when it can:
    images that enter through cross-attention have no per-image span in the decoder sequence;
    encoder-decoder models have no decoder-only prefill; a decoder whose attention layers are not
    softmax attention with separate q/k/o projections is a variant not handled yet (a KV-shared
    layer's k_proj is that of the layer whose keys it reuses, `_kv_source`). A hybrid decoder's
    layers without ``self_attn`` (linear attention, convolutions) hold no heads and are skipped;
    a decoder with no ``self_attn`` layer at all is refused."""
    config = model.config
    text = config.get_text_config()
    if getattr(text, "cross_attention_layers", None) or config.model_type in ("idefics", "mllama"):
        return "images enter the decoder through cross-attention, so no image has a span of visual tokens to measure"
    if getattr(config, "is_encoder_decoder", False) or getattr(text, "is_encoder_decoder", False):
        return "an encoder-decoder model: the question is not read in one decoder prefill with the images"
    if not any(key.endswith("_config") for key in config.to_dict()):  # no vision (or any) sub-config
        return f"a text-only model ({type(model).__name__}): no vision tower puts images in its sequence"
    if getattr(text, "altup_num_inputs", None):  # Gemma 3n
        return ("AltUp decoder layers read several stacked predictions of each token's hidden state, which the "
                "image-embedding readout at layer 0 does not handle yet")
    decoder = next((found for path in DECODER_PATHS if (found := _child(model, path)) is not None
                    and isinstance(getattr(found, "layers", None), nn.ModuleList)), None)
    if decoder is None:
        return f"no language-model decoder with layers at {' / '.join(DECODER_PATHS)}"
    attentions = [getattr(layer, "self_attn", None) for layer in decoder.layers]
    if not any(isinstance(attention, nn.Module) for attention in attentions):
        kinds = sorted({name for layer in decoder.layers for name, _ in layer.named_children()
                        if "attn" in name or "conv" in name or "mixer" in name})
        return (f"no decoder layer holds softmax attention as self_attn (its token mixers: "
                f"{', '.join(kinds) or 'none found'}; not handled yet)")
    for index, attention in enumerate(attentions):
        if attention is None:  # a hybrid decoder's linear-attention or conv layer: no heads to capture
            continue
        if hasattr(attention, "query_key_value"):
            return "a fused query_key_value projection (per-head slices not handled yet)"
        reason = _attention_refusal(attentions, index)
        if reason is not None:
            return reason
    if not any(getattr(config, name, None) is not None for name in IMAGE_TOKEN_ATTRIBUTES):
        return f"no image placeholder token id in the config ({' / '.join(IMAGE_TOKEN_ATTRIBUTES)})"
    return None


def _attention_refusal(attentions: Sequence[nn.Module | None], index: int) -> str | None:
    """Why attention layer `index` cannot be captured, or None: it needs its own or a KV-shared
    source of keys, a query projection, an output projection (`O_PROJ_NAMES`), all linear, and an
    integer head width; multi-head latent attention (`projections.is_latent`) qualifies unless it
    attends a top-k subset an indexer picks (DeepSeek sparse attention)."""
    attention = attentions[index]
    latent = is_latent(attention)
    if latent and (hasattr(attention, "indexer") or hasattr(attention, "skip_topk")):
        return ("sparse latent attention: each query attends a top-k subset of keys an indexer picks, "
                "which neither Eq. 1 rows nor Eq. 3 see (not handled yet)")
    source = _kv_source(attentions, index)
    query = query_projection(attention)
    if source is None or query is None:
        return "latent or otherwise projected attention without q_proj/k_proj (not handled yet)"
    output = next((getattr(attention, n) for n in O_PROJ_NAMES if isinstance(getattr(attention, n, None), nn.Module)), None)
    if output is None:
        return f"an attention output projection named other than {' or '.join(O_PROJ_NAMES)}"
    if latent:
        projections = [query, *(getattr(attention, name) for name in LATENT_PROJECTIONS), output]
    else:
        projections = [query, *([getattr(attention, "k_proj")] if source == index else []), output]
    if not all(isinstance(module, nn.Linear) for module in projections):
        kinds = sorted({type(module).__name__ for module in projections if not isinstance(module, nn.Linear)})
        return f"attention projections that are not linear layers ({', '.join(kinds)}; not handled yet)"
    width = ("qk_head_dim", "v_head_dim") if latent else ("head_dim",)
    if not all(isinstance(getattr(attention, name, None), int) for name in width):
        return f"an attention module without an integer {' / '.join(width)}"
    return None


def derive_adapter(model: nn.Module, allow_untested: bool = False) -> ModelAdapter:
    """The adapter of a model in transformers' common layout, found from the model and its config:
    the decoder at the first of `DECODER_PATHS` that holds ``layers``, attention ``self_attn`` with
    ``q_proj`` / ``k_proj`` and the first of `O_PROJ_NAMES` it has, the image token id under the
    first of `IMAGE_TOKEN_ATTRIBUTES` the config sets, and the processor's own image input with
    every `TILING_SWITCHES` switch turned off (a named deviation, `DERIVED_IMAGES_SOURCE`).

    Only a model type some tiny model of `harness.tiny_models` runs the conformance tests on
    (``TESTED_MODEL_TYPES``) is derived unless `allow_untested`; the adapter of any other is marked
    ``conformance_tested=False``.

    Raises:
        UserInputError: the architecture cannot be measured (`refusal_reason`), or its model type is
            not conformance-tested and not `allow_untested`, naming it and the way on.
    """
    from harness.tiny_models import TESTED_MODEL_TYPES

    reason = refusal_reason(model)
    config = model.config
    tested = config.model_type in TESTED_MODEL_TYPES
    if reason is None and not tested and not allow_untested:
        reason = UNTESTED_REASON
    if reason is not None:
        raise UserInputError(f"head capture cannot measure {type(model).__name__} "
                             f"({_describe_config(config)}): {reason}")
    path = next(p for p in DECODER_PATHS if isinstance(getattr(_child(model, p), "layers", None), nn.ModuleList))
    attention = next(layer.self_attn for layer in _child(model, path).layers if hasattr(layer, "self_attn"))
    o_proj = next(name for name in O_PROJ_NAMES if isinstance(getattr(attention, name, None), nn.Module))
    token = next(name for name in IMAGE_TOKEN_ATTRIBUTES if getattr(config, name, None) is not None)
    return ModelAdapter(config.model_type, model_type=config.model_type, language_model=path, o_proj=o_proj,
                        image_token_id=token, images=ImageInputs(derived=True, source=DERIVED_IMAGES_SOURCE),
                        conformance_tested=tested)


def _describe_config(config) -> str:
    vision_type = getattr(getattr(config, "vision_config", None), "model_type", None)
    return f"model_type={config.model_type!r}" + (f" with a {vision_type!r} vision tower" if vision_type else "")


def resolve_adapter(model: nn.Module, allow_untested: bool = False) -> ModelAdapter:
    """The adapter of `model` (a transformers ``...ForConditionalGeneration``): its row of the
    table (rows added with `register_adapter` first, then `ADAPTERS`), else the one derived from
    its layout (`derive_adapter`, with `allow_untested`).

    Raises:
        UserInputError: no config, or an architecture head capture cannot measure, with the reason.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise UserInputError(f"head capture needs a transformers model; got a {type(model).__name__} without a config")
    for adapter in (*_REGISTERED, *ADAPTERS):
        if adapter.matches(config):
            return adapter
    return derive_adapter(model, allow_untested)


def _path(root: nn.Module, dotted: str) -> nn.Module:
    module = root
    for name in dotted.split("."):
        module = getattr(module, name)
    return module


def language_model(model: nn.Module, adapter: ModelAdapter) -> nn.Module:
    """The language-model decoder of `model` (whose attention implementation the capture switches)."""
    return _path(model, adapter.language_model)


def decoder_layers(model: nn.Module, adapter: ModelAdapter) -> list[nn.Module]:
    """The language-model decoder layers, in layer order (all of them, attention or not)."""
    return list(_path(language_model(model, adapter), adapter.layers))


def attention_layers(model: nn.Module, adapter: ModelAdapter) -> list[int]:
    """The model's layer numbers (0-based positions in `decoder_layers`) of the layers holding an
    attention module, in order (length L): every layer, except in a hybrid decoder (Qwen3.5, whose
    linear-attention layers hold no heads). Head ``LxxHyy``'s ``xx`` indexes this list."""
    return [index for index, layer in enumerate(decoder_layers(model, adapter))
            if _child(layer, adapter.attention) is not None]


def attention_modules(model: nn.Module, adapter: ModelAdapter) -> list[nn.Module]:
    """The attention module of each attention layer (`attention_layers`), in layer order (length L).

    Each carries ``layer_idx`` (the model's layer number, `attention_layers`' entry), ``head_dim``
    and ``num_key_value_groups``.
    """
    layers = decoder_layers(model, adapter)
    return [_path(layers[index], adapter.attention) for index in attention_layers(model, adapter)]


def key_sources(model: nn.Module, adapter: ModelAdapter) -> list[int]:
    """For each language-model layer, the layer whose k_proj output its keys are (length L): the
    layer itself, or for a KV-shared layer the earlier layer whose keys it reuses (`_kv_source`)."""
    modules = attention_modules(model, adapter)
    return [_kv_source(modules, index, adapter.k_proj) for index in range(len(modules))]


def projection(attention: nn.Module, adapter: ModelAdapter, which: str) -> nn.Module:
    """The ``"o_proj"``, ``"q_proj"`` or ``"k_proj"`` linear layer of one attention module."""
    return _path(attention, getattr(adapter, which))


def image_token_id(model: nn.Module, adapter: ModelAdapter) -> int:
    """Id of the model's own image-placeholder token (``model.config.<adapter.image_token_id>``)."""
    return int(getattr(model.config, adapter.image_token_id))
