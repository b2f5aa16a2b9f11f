"""Parts every tiny-model builder shares: text-model sizes, seeded instantiation, ChatML template."""

from __future__ import annotations

import dataclasses

import torch
from transformers import PreTrainedModel

from icir_common import UserInputError


@dataclasses.dataclass(frozen=True)
class TextSizes:
    """Sizes of the language model of a tiny LVLM (the part whose heads are captured).

    Defaults: 4 layers x 4 query heads sharing 2 KV heads (GQA) of dimension 16, residual width
    ``hidden_size`` = heads x head_dim (64) unless given, MLP width 2x the residual width. Most
    architectures allow any `hidden_size` (o_proj maps ``num_attention_heads * head_dim ->
    hidden_size``); Qwen2.5-VL's text attention requires heads x head_dim (see
    `require_hidden_size_from_heads`).
    """

    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    hidden_size: int | None = None

    @classmethod
    def from_overrides(cls, **overrides: int) -> TextSizes:
        """Default sizes with `overrides` applied.

        Raises:
            UserInputError: an unknown size name, a non-positive size, an odd head_dim (RoPE rotates
                pairs of dimensions) or query heads not a multiple of KV heads.
        """
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise UserInputError(f"unknown tiny-model size(s) {unknown}; allowed: {sorted(names)}")
        sizes = cls(**overrides)
        if sizes.hidden_size is None:
            sizes = dataclasses.replace(sizes, hidden_size=sizes.num_attention_heads * sizes.head_dim)
        if min(dataclasses.astuple(sizes)) < 1:
            raise UserInputError(f"tiny-model sizes must be positive, got {sizes}")
        if sizes.head_dim % 2:
            raise UserInputError(f"head_dim must be even for RoPE, got {sizes.head_dim}")
        if sizes.num_attention_heads % sizes.num_key_value_heads:
            raise UserInputError(
                f"num_attention_heads={sizes.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={sizes.num_key_value_heads}"
            )
        return sizes

    def require_hidden_size_from_heads(self, arch: str) -> None:
        """Raise `UserInputError` unless ``hidden_size == num_attention_heads * head_dim``."""
        if self.hidden_size != self.num_attention_heads * self.head_dim:
            raise UserInputError(
                f"{arch} needs hidden_size == num_attention_heads * head_dim, got hidden_size="
                f"{self.hidden_size}, {self.num_attention_heads} heads x head_dim {self.head_dim}"
            )

    def text_config(self, tokenizer, **extra) -> dict:
        """Keyword arguments of a text config: these sizes, `tokenizer`'s vocabulary and bos/eos/pad
        ids, plus `extra` (which wins)."""
        return {
            **dataclasses.asdict(self),
            "vocab_size": len(tokenizer),
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "intermediate_size": 2 * self.hidden_size,
            "max_position_embeddings": 32768,
            **extra,
        }

    def typed_text_config(self, model_type: str, tokenizer, rope_theta: float) -> dict:
        """`text_config` of the text model `model_type` (e.g. "llama", "qwen2"), as a sub-config
        dict naming its type, with plain RoPE of base `rope_theta`."""
        rope = {"rope_type": "default", "rope_theta": rope_theta}
        return {"model_type": model_type, **self.text_config(tokenizer, rope_parameters=rope)}


def instantiate(model_class: type[PreTrainedModel], config, seed: int, attn_implementation: str):
    """Randomly initialise `model_class(config)` after ``torch.manual_seed(seed)``.

    Returns the model in eval mode and float32 with `attn_implementation` ("sdpa", "eager", or any
    name registered with transformers' AttentionInterface) set on every sub-model. Same seed and
    config -> bit-identical state dict. Initialisation draws from torch's CPU generator seeded
    inside `torch.random.fork_rng`, so the caller's random state is left as it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    model.set_attn_implementation(attn_implementation)
    return model.to(torch.float32).eval()


# The size every tiny vision tower takes (2 layers of width 32, 2 heads, MLP width 64), in the key
# names most transformers vision configs use.
TINY_VISION_TOWER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}


def siglip_vision_config(image_size: int, patch_size: int) -> dict:
    """Tiny SigLIP vision tower (LLaVA-OneVision, Gemma 3): 2 layers of width 32, 2 heads, no head."""
    return {
        "model_type": "siglip_vision_model",
        **TINY_VISION_TOWER,
        "patch_size": patch_size,
        "image_size": image_size,
        "vision_use_head": False,
    }


def chatml_template(image_markup: str, default_system: str | None = None) -> str:
    """ChatML chat template (Qwen2/Qwen3 family) that writes `image_markup` for each image item.

    Messages render as ``<|im_start|>{role}\\n{content}<|im_end|>\\n``; content is a string or a
    list of ``{"type": "text", "text": ...}`` / ``{"type": "image", ...}`` items, in order, as in
    the real Qwen2.5-VL / Qwen3-VL / InternVL3 / LLaVA-OneVision templates. `default_system` is
    prepended when the first message is not a system message (Qwen2.5-VL's "You are a helpful
    assistant."). ``add_generation_prompt`` appends ``<|im_start|>assistant\\n``.
    """
    system = (
        "{%- if messages[0]['role'] != 'system' %}"
        "{{- '<|im_start|>system\\n" + default_system + "<|im_end|>\\n' }}"
        "{%- endif %}"
        if default_system
        else ""
    )
    return (
        system + "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['content'] is string %}{{- message['content'] }}"
        "{%- else %}{%- for item in message['content'] %}"
        "{%- if item['type'] == 'image' %}{{- '" + image_markup + "' }}"
        "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
        "{%- endfor %}{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
