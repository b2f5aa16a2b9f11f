"""Tiny Kimi K2.5 (`Kimi_K25ForConditionalGeneration` + `Kimi_K25Processor`), built offline.

Mirrors moonshotai/Kimi-K2.5 in everything but size: a MoonViT-style vision tower (16-px patches
here, 14 in the checkpoint, merged 2x2 into one visual token) with its projector, and a DeepSeek-V3
language model whose attention is multi-head latent attention: the query comes through a low-rank
``q_a_proj`` -> ``q_b_proj`` pair, keys and values are expanded per head by ``kv_b_proj`` from a
shared normalised latent of ``kv_a_proj_with_mqa``, whose last ``qk_rope_head_dim`` columns are a
rotary key part all heads share; layers after the first route their MLP through a mixture of
experts. Images are written ``<|media_begin|>image<|media_content|><|media_pad|><|media_end|>``
inside the real template's ``<|im_user|>user<|im_middle|> ... <|im_end|>`` turns.

Each image over a budget of `MAX_PATCHES` 16-px patches is scaled down to it (aspect ratio kept;
the checkpoint's budget is 16,384 patches), then padded to whole 32-px merged patches: a 64x64
image (16 patches) gives 2x2 = 4 visual tokens; a 160x48 one (30 patches) shrinks by sqrt(16/30)
to 116x35 px and pads to 128x64: 4x2 = 8.
"""

from __future__ import annotations

from transformers import (
    Kimi_K25Config,
    Kimi_K25ForConditionalGeneration,
    Kimi_K25ImageProcessor,
    Kimi_K25Processor,
    Kimi_K25VideoProcessor,
)

from .parts import TextSizes, instantiate
from .tokenizer import train_bpe_tokenizer

IMAGE_TOKEN = "<|media_pad|>"
SPECIAL_TOKENS = ("[BOS]", "[EOS]", "[PAD]", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                  "<|im_end|>", "<|media_begin|>", "<|media_content|>", "<|media_end|>", IMAGE_TOKEN,
                  "<|kimi_k25_video_placeholder|>")
IMAGE_MARKUP = "<|media_begin|>image<|media_content|>" + IMAGE_TOKEN + "<|media_end|>"
PATCH_SIZE = 16
MERGE_SIZE = 2
MAX_PATCHES = 16

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_' + message['role'] + '|>' + message['role'] + '<|im_middle|>' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '" + IMAGE_MARKUP + "' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_assistant|>assistant<|im_middle|>' }}{%- endif %}"
)

DESCRIPTION = {
    "model_class": "Kimi_K25ForConditionalGeneration",
    "processor_class": "Kimi_K25Processor",
    "image_token": IMAGE_TOKEN,
    "decoder_layers": "model.language_model.layers",
    "o_proj": "self_attn.o_proj",
    "image_features": (
        "model.get_image_features(pixel_values, image_grid_thw) -> BaseModelOutputWithPooling; .pooler_output "
        "holds the projector output, one [n_tokens_i, hidden_size] block per image (n_tokens_i = prod(grid) / 4)"
    ),
    "extra_tokens_per_image": "<|media_begin|>image<|media_content|> before and <|media_end|> after each run",
    "image_span": "one contiguous run of the image token per image",
}


def build_processor() -> Kimi_K25Processor:
    """Kimi K2.5 processor: a fresh tokenizer with Kimi's special tokens, images within `MAX_PATCHES` patches."""
    tokenizer = train_bpe_tokenizer(SPECIAL_TOKENS, chat_template=CHAT_TEMPLATE, bos_token="[BOS]",
                                    eos_token="[EOS]", pad_token="[PAD]")
    return Kimi_K25Processor(
        image_processor=Kimi_K25ImageProcessor(max_patches=MAX_PATCHES, patch_size=PATCH_SIZE, merge_size=MERGE_SIZE),
        tokenizer=tokenizer,
        video_processor=Kimi_K25VideoProcessor(patch_size=PATCH_SIZE, merge_size=MERGE_SIZE),
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: Kimi_K25Processor, sizes: TextSizes, seed: int, attn_implementation: str):
    """Random `Kimi_K25ForConditionalGeneration` with `sizes`: latent attention with query rank 32,
    KV latent rank 32, per-head query/key width ``head_dim`` + ``head_dim / 2`` (no-RoPE + RoPE
    parts) and value width ``head_dim``, no KV-head sharing (MLA forms every head's keys); MoE from
    layer 1 (4 experts, top-2, one shared)."""
    tokenizer = processor.tokenizer
    text = sizes.text_config(
        tokenizer,
        model_type="deepseek_v3",
        num_key_value_heads=sizes.num_attention_heads,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_nope_head_dim=sizes.head_dim,
        qk_rope_head_dim=sizes.head_dim // 2,
        v_head_dim=sizes.head_dim,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=sizes.hidden_size,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        rope_parameters={"rope_type": "default", "rope_theta": 50_000.0},
    )
    text.pop("head_dim")  # DeepSeek-V3 sets head_dim to qk_rope_head_dim itself
    config = Kimi_K25Config(
        text_config=text,
        vision_config={"patch_size": PATCH_SIZE, "pos_emb_height": 8, "pos_emb_width": 8, "num_attention_heads": 2,
                       "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64,
                       "merge_kernel_size": [MERGE_SIZE, MERGE_SIZE]},
        projection_hidden_size=32,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        video_token_id=tokenizer.convert_tokens_to_ids("<|kimi_k25_video_placeholder|>"),
        vision_start_token_id=tokenizer.convert_tokens_to_ids("<|media_begin|>"),
        vision_end_token_id=tokenizer.convert_tokens_to_ids("<|media_end|>"),
        tie_word_embeddings=False,
    )
    return instantiate(Kimi_K25ForConditionalGeneration, config, seed, attn_implementation)
