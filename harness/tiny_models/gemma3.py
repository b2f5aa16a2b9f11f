"""Tiny Gemma 3 (`Gemma3ForConditionalGeneration` + `Gemma3Processor`), built offline.

Mirrors google/gemma-3-*-it in everything but size: SigLIP vision tower, average-pooled soft
tokens, RMS-normed projection, Gemma 3 language model with sliding-window layers interleaved with
full-attention ones (here every 4th layer is global and the window is 32 tokens, so it binds in
short test prompts), bidirectional attention among one image's tokens, BOS added by the tokenizer,
and the real chat template (turns ``<start_of_turn>user\\n ... <end_of_turn>\\n``, text items
TRIMMED of surrounding whitespace, images written as ``<start_of_image>``). The processor expands
each ``<start_of_image>`` to ``\\n\\n<start_of_image>`` + ``<image_soft_token>`` x 4 +
``<end_of_image>\\n\\n`` (64x64 px image, 16 patches pooled 2x2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3ImageProcessor,
    Gemma3Processor,
    PreTrainedTokenizerFast,
)

from .parts import TextSizes, instantiate, siglip_vision_config
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<image_soft_token>"
MARKERS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": IMAGE_TOKEN}
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", *MARKERS.values())
IMAGE_SIZE = 64
PATCH_SIZE = 16
MM_TOKENS_PER_IMAGE = 4
SLIDING_WINDOW = 32
GLOBAL_LAYER_EVERY = 4

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}"
    "{%- else -%}{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}{%- endif -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

DESCRIPTION = {
    "model_class": "Gemma3ForConditionalGeneration",
    "processor_class": "Gemma3Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values) -> BaseModelOutputWithPooling; .pooler_output is ONE "
        "tensor [num_images, mm_tokens_per_image, hidden_size] (pooled, normed, projected soft tokens, "
        "in input-embedding space; the language model scales token embeddings by sqrt(hidden_size) but "
        "not these)"
    ),
    "extra_tokens_per_image": (
        "'\\n\\n<start_of_image>' before and '<end_of_image>\\n\\n' after each run of <image_soft_token>; "
        "the processor's image_token/image_token_id are <start_of_image> (the text placeholder), the "
        "model's config.image_token_id is <image_soft_token>"
    ),
    "image_span": "one contiguous run of the image token per image",
}


def interleaved_layer_types(num_layers: int, global_every: int) -> list[str]:
    """Gemma's local/global interleave: every `global_every`-th layer ``full_attention``, the
    others ``sliding_attention`` (the real checkpoints: 5 local layers per global one)."""
    return ["full_attention" if (layer + 1) % global_every == 0 else "sliding_attention" for layer in range(num_layers)]


def gemma_tokenizer(special_tokens: Sequence[str], chat_template: str, markers: Mapping[str, str],
                    eos_token: str = "<eos>") -> PreTrainedTokenizerFast:
    """`train_bpe_tokenizer` with the named tokens of Gemma tokenizers (Gemma 3, Gemma 4): ``<bos>``
    added in front of every text, `eos_token`, ``<unk>``, ``<pad>``, and `markers` (the image
    tokens by name, which the processor reads from the tokenizer); `special_tokens` hold them all."""
    return train_bpe_tokenizer(
        special_tokens,
        chat_template=chat_template,
        bos_token="<bos>",
        add_bos=True,
        eos_token=eos_token,
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens=dict(markers),
    )


def build_processor() -> Gemma3Processor:
    """Gemma 3 processor with a freshly trained tokenizer; 64x64 px images, 4 soft tokens each."""
    return Gemma3Processor(
        image_processor=Gemma3ImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=gemma_tokenizer(SPECIAL_TOKENS, CHAT_TEMPLATE, MARKERS),
        image_seq_length=MM_TOKENS_PER_IMAGE,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: Gemma3Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Gemma3ForConditionalGeneration` with `sizes`; every 4th layer full attention."""
    tokenizer = processor.tokenizer
    config = Gemma3Config(
        text_config=sizes.text_config(
            tokenizer,
            query_pre_attn_scalar=sizes.head_dim,
            sliding_window=SLIDING_WINDOW,
            layer_types=interleaved_layer_types(sizes.num_hidden_layers, GLOBAL_LAYER_EVERY),
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            },
        ),
        vision_config=siglip_vision_config(IMAGE_SIZE, PATCH_SIZE),
        mm_tokens_per_image=MM_TOKENS_PER_IMAGE,
        boi_token_index=tokenizer.convert_tokens_to_ids(MARKERS["boi_token"]),
        eoi_token_index=tokenizer.convert_tokens_to_ids(MARKERS["eoi_token"]),
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    return instantiate(Gemma3ForConditionalGeneration, config, seed, attn_implementation)
