"""The adapter table: where each supported LVLM keeps its language-model heads and image tokens.

Adding a model family is one row in `ADAPTERS`. Every row is read the same way:

- ``language_model``: dotted attribute path from the ``...ForConditionalGeneration`` model to the
  language-model decoder (a ``PreTrainedModel`` with its own text config); its attention
  implementation is what the capture switches, so the vision tower keeps its own.
- ``layers`` / ``attention`` / ``o_proj`` / ``q_proj`` / ``k_proj``: paths to the decoder layers,
  the attention module inside one layer, and the projections inside that module.
- ``image_token_id``: the config attribute holding the id of the model's own image-placeholder
  token (the token whose runs in ``input_ids`` are replaced by projected visual tokens).
- Image embeddings (paper §5.1, ``docs/protocol.md``) are read the same way for every row: the input
  of decoder layer 0 at the image-token positions, i.e. the projected visual tokens that replaced
  the placeholders, after any embedding scaling and before features some models inject into later
  layers (Qwen3-VL DeepStack).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from icir_common import UserInputError


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

    def matches(self, config) -> bool:
        """Whether a top-level model config (``model.config``) belongs to this row."""
        if config.model_type != self.model_type:
            return False
        if self.vision_model_type is None:
            return True
        vision_config = getattr(config, "vision_config", None)
        return getattr(vision_config, "model_type", None) == self.vision_model_type


ADAPTERS: tuple[ModelAdapter, ...] = (
    ModelAdapter("qwen3_vl", model_type="qwen3_vl"),
    ModelAdapter("qwen2_5_vl", model_type="qwen2_5_vl"),
    ModelAdapter("internvl", model_type="internvl"),
    ModelAdapter("llava_onevision", model_type="llava_onevision"),
    ModelAdapter("llava_pixtral", model_type="llava", vision_model_type="pixtral"),
    ModelAdapter("gemma3", model_type="gemma3"),
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
