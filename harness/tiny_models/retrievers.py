"""Tiny random CLIP and SigLIP dual encoders, built offline, for the external-retriever tests.

The real checkpoints (``openai/clip-vit-large-patch14``, ``google/siglip-so400m-patch14-384``)
are ``CLIPModel``/``SiglipModel`` folders with a ``CLIPProcessor``/``SiglipProcessor``; these
are the same classes at a few thousand parameters: 2-layer text and vision towers of width 32,
32 px images in 8 px patches, a 16-dimensional joint embedding, and a byte-level BPE tokenizer
(`train_bpe_tokenizer`) that appends the end-of-text token as both real tokenizers do. The
Qwen3-VL-Embedding-style retriever needs no builder of its own: it is a Qwen3-VL folder
(`harness.tiny_models.save_tiny` with ``qwen3_vl``, or the demo model).
"""

from __future__ import annotations

from pathlib import Path

from icir_common import UserInputError, atomic_output_dir

from .parts import instantiate
from .tokenizer import train_bpe_tokenizer

TINY_RETRIEVERS = ("clip", "siglip")
IMAGE_SIZE = 32
_TOWER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}


def build_tiny_retriever(kind: str, seed: int = 0):
    """``(model, processor)`` of a tiny random `kind` ("clip" or "siglip") dual encoder.

    Same `seed` -> identical state dict (`parts.instantiate`).

    Raises:
        UserInputError: an unknown `kind`.
    """
    from transformers import (CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, SiglipConfig,
                              SiglipImageProcessor, SiglipModel, SiglipProcessor)

    if kind not in TINY_RETRIEVERS:
        raise UserInputError(f"unknown tiny retriever {kind!r}; choose one of {', '.join(TINY_RETRIEVERS)}")
    if kind == "clip":
        tokenizer = train_bpe_tokenizer(["<|startoftext|>", "<|endoftext|>"], chat_template="",
                                        bos_token="<|startoftext|>", add_bos=True, add_eos=True,
                                        eos_token="<|endoftext|>", pad_token="<|endoftext|>")
        text = {**_TOWER, "vocab_size": len(tokenizer), "max_position_embeddings": 77,
                "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                "pad_token_id": tokenizer.pad_token_id}
        config = CLIPConfig(text_config=text, vision_config={**_TOWER, "image_size": IMAGE_SIZE, "patch_size": 8},
                            projection_dim=16)
        processor = CLIPProcessor(image_processor=CLIPImageProcessor(
            size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
            tokenizer=tokenizer)
        return instantiate(CLIPModel, config, seed, "sdpa"), processor
    tokenizer = train_bpe_tokenizer(["</s>", "<pad>"], chat_template="", add_eos=True, eos_token="</s>",
                                    pad_token="<pad>")
    text = {**_TOWER, "vocab_size": len(tokenizer), "max_position_embeddings": 64, "projection_size": 32,
            "bos_token_id": None, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    config = SiglipConfig(text_config=text, vision_config={**_TOWER, "image_size": IMAGE_SIZE, "patch_size": 8})
    processor = SiglipProcessor(image_processor=SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
                                tokenizer=tokenizer)
    return instantiate(SiglipModel, config, seed, "sdpa"), processor


def save_tiny_retriever(kind: str, out_dir: str | Path, seed: int = 0, overwrite: bool = False) -> Path:
    """`save_pretrained` a tiny `kind` retriever and its processor into `out_dir` (atomically).

    The folder loads offline with ``AutoModel``/``AutoProcessor.from_pretrained(out_dir)``.

    Raises:
        UserInputError: an unknown `kind`, or `out_dir` exists, is not empty, and `overwrite` is False.
    """
    out_dir = Path(out_dir)
    overwrite = overwrite or (out_dir.is_dir() and not any(out_dir.iterdir()))
    model, processor = build_tiny_retriever(kind, seed)
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
    return out_dir
