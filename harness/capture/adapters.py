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
from collections.abc import Mapping
from typing import Any

from torch import nn

from icir_common import UserInputError


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
        source: where the setting comes from (paper section, processor behaviour), for the record.
    """

    side: int | None = None
    user_side: bool = False
    square: bool = False
    call_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    lone_images: bool = False
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
    """One row of the adapter table (see the module docstring for what each path means)."""

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


def _describe_config(config) -> str:
    vision_type = getattr(getattr(config, "vision_config", None), "model_type", None)
    return f"model_type={config.model_type!r}" + (f" with a {vision_type!r} vision tower" if vision_type else "")


def resolve_adapter(model: nn.Module) -> ModelAdapter:
    """The adapter row for `model` (a transformers ``...ForConditionalGeneration``).

    Raises:
        UserInputError: the model is not one of `SUPPORTED_ARCHITECTURES`; the message lists them.
    """
    config = getattr(model, "config", None)
    if config is not None:
        for adapter in ADAPTERS:
            if adapter.matches(config):
                return adapter
    found = _describe_config(config) if config is not None else f"a {type(model).__name__} without a config"
    supported = ", ".join(
        f"{a.name} (model_type {a.model_type!r}" + (f" + {a.vision_model_type} vision)" if a.vision_model_type else ")")
        for a in ADAPTERS
    )
    raise UserInputError(
        f"head capture does not support {type(model).__name__} ({found}); supported architectures: {supported}"
    )


def _path(root: nn.Module, dotted: str) -> nn.Module:
    module = root
    for name in dotted.split("."):
        module = getattr(module, name)
    return module


def language_model(model: nn.Module, adapter: ModelAdapter) -> nn.Module:
    """The language-model decoder of `model` (whose attention implementation the capture switches)."""
    return _path(model, adapter.language_model)


def decoder_layers(model: nn.Module, adapter: ModelAdapter) -> list[nn.Module]:
    """The language-model decoder layers, in layer order (length L)."""
    return list(_path(language_model(model, adapter), adapter.layers))


def attention_modules(model: nn.Module, adapter: ModelAdapter) -> list[nn.Module]:
    """The attention module of each language-model layer, in layer order (length L).

    Each carries ``layer_idx`` (its position in the list), ``head_dim`` and ``num_key_value_groups``.
    """
    return [_path(layer, adapter.attention) for layer in decoder_layers(model, adapter)]


def projection(attention: nn.Module, adapter: ModelAdapter, which: str) -> nn.Module:
    """The ``"o_proj"``, ``"q_proj"`` or ``"k_proj"`` linear layer of one attention module."""
    return _path(attention, getattr(adapter, which))


def image_token_id(model: nn.Module, adapter: ModelAdapter) -> int:
    """Id of the model's own image-placeholder token (``model.config.<adapter.image_token_id>``)."""
    return int(getattr(model.config, adapter.image_token_id))
