"""The external retrievers of Table 2: text-to-image embedding models loaded with transformers.

Each kind turns the anchor object of a Visual Haystacks question into one query embedding and
every candidate image into one image embedding, both L2-normalised float32 vectors of the model's
embedding size D, so a haystack is scored by cosine similarity (`harness.retrievers.score`).

- ``clip`` (CLIP ViT-L/14 in the paper) and ``siglip`` (SigLIP so400m-patch14-384): the OpenAI
  80-template prompt ensemble (App. A): the anchor noun, without its article, fills each of
  open_clip's ``OPENAI_IMAGENET_TEMPLATES``; the query is the mean of the 80 L2-normalised text
  embeddings, normalised again (open_clip's ``build_zero_shot_classifier`` computes it). SigLIP
  prompts are padded to the 64 tokens of its pretraining (its text tower pools the last position);
  CLIP prompts are padded to the longest and its text tower pools at the first end-of-text token,
  so padding does not change a prompt's embedding.
- ``qwen3vl-embedding`` (Qwen3-VL-Embedding-8B): the query ``"an image with {anchor}"`` and each
  image alone, each as the user turn after the model's default instruction ``"Represent the
  user's input."`` as system turn, rendered with the model's chat template and generation prompt;
  the embedding is the final hidden state (after the last norm) at the last position.

Images go through each model's own processor with its saved settings (CLIP and SigLIP resize to
their pretraining resolution; the embedding model keeps its pixel budget).
"""

from __future__ import annotations

import importlib.util

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icir_common import UserInputError, read_json

SIGLIP_TEXT_LENGTH = 64  # SigLIP's pretraining text length (App. A)
EMBEDDING_QUERY = "an image with {anchor}"  # App. A
EMBEDDING_INSTRUCTION = "Represent the user's input."  # Qwen3-VL-Embedding's default instruction
# Retriever kind -> the transformers model_type values of the checkpoints it loads.
MODEL_TYPES = {"clip": ("clip",), "siglip": ("siglip", "siglip2"), "qwen3vl-embedding": ("qwen3_vl",)}
RETRIEVER_KINDS = tuple(MODEL_TYPES)


@dataclass(frozen=True)
class RetrieverSpec:
    """One ``--retriever KIND=PATH``: its kind (`RETRIEVER_KINDS`) and a local folder or Hub id."""

    kind: str
    path: str

    @classmethod
    def parse(cls, text: str) -> RetrieverSpec:
        """``"clip=/models/clip-vit-large-patch14"`` -> ``RetrieverSpec("clip", "/models/...")``.

        Raises:
            UserInputError: no ``=``, an empty path, or an unknown kind.
        """
        kind, sep, path = text.partition("=")
        kind = kind.strip()
        if not sep or not path.strip():
            raise UserInputError(f"--retriever {text!r}: write KIND=PATH, KIND one of {', '.join(RETRIEVER_KINDS)}")
        if kind not in MODEL_TYPES:
            raise UserInputError(f"--retriever {text!r}: unknown kind {kind!r}; choose one of {', '.join(RETRIEVER_KINDS)}")
        return cls(kind, path.strip())

    def check(self) -> str:
        """The checkpoint's ``model_type``, read from its ``config.json`` before any weights load.

        A Hub id that is not in the local cache is looked up through huggingface_hub (offline
        mode included, which then fails with the error below).

        Raises:
            UserInputError: no ``config.json`` at the path, a model type that is not one of the
                kind's (`MODEL_TYPES`), naming both, or (CLIP / SigLIP) open_clip missing, naming the
                ``[retrievers]`` extra.
        """
        local = Path(self.path).expanduser()
        if local.is_dir():
            config_file = local / "config.json"
            if not config_file.is_file():
                raise UserInputError(f"--retriever {self.kind}={self.path}: no config.json in that folder "
                                     "(pass a transformers model folder)")
        else:
            from huggingface_hub import hf_hub_download
            from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

            try:
                config_file = Path(hf_hub_download(self.path, "config.json"))
            except (EntryNotFoundError, HfHubHTTPError, ValueError, OSError) as err:  # OSError: not cached offline
                raise UserInputError(f"--retriever {self.kind}={self.path}: no such folder, and not a Hub model id "
                                     f"whose config.json is cached or reachable ({type(err).__name__})") from None
        model_type = read_json(config_file).get("model_type")
        if model_type not in MODEL_TYPES[self.kind]:
            raise UserInputError(
                f"--retriever {self.kind}={self.path}: {config_file} is a {model_type!r} model, not a "
                f"{self.kind} retriever (model_type {' or '.join(MODEL_TYPES[self.kind])})")
        if self.kind != "qwen3vl-embedding" and importlib.util.find_spec("open_clip") is None:
            raise UserInputError(f"--retriever {self.kind}: the template ensemble needs open_clip, which is not "
                                 "installed: pip install 'image-retrieval-heads[retrievers]'")
        return model_type


def image_digest(image) -> str:
    """BLAKE2b (128-bit) of a PIL image's mode, size and pixels: the key of the embedding cache."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{image.mode}:{image.size}".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


class Retriever:
    """A loaded retriever with caches of its image and query embeddings.

    Subclasses implement `_embed_images` (``[n, D]``) and `_embed_query` (``[D]``); `images`
    and `query` return L2-normalised float32 CPU tensors and embed each distinct image or anchor
    once (Visual Haystacks reuses filler images across haystacks).

    Args:
        spec: the kind and the checkpoint.
        device: torch device of the model.
        batch_size: images per forward pass.
    """

    def __init__(self, spec: RetrieverSpec, device: str, batch_size: int) -> None:
        self.spec = spec
        self.device = device
        self.batch_size = batch_size
        self._images: dict[str, Any] = {}
        self._queries: dict[str, Any] = {}

    def images(self, images: Sequence) -> Any:
        """``[len(images), D]`` embeddings of PIL images, in order."""
        import torch

        keys = [image_digest(image) for image in images]
        todo = {key: image for key, image in zip(keys, images) if key not in self._images}
        pending = list(todo.items())
        for start in range(0, len(pending), self.batch_size):
            chunk = pending[start:start + self.batch_size]
            with torch.no_grad():
                embedded = self._embed_images([image for _, image in chunk])
            for (key, _), vector in zip(chunk, _normalise(embedded)):
                self._images[key] = vector
        return torch.stack([self._images[key] for key in keys])

    def query(self, anchor: str) -> Any:
        """``[D]`` query embedding of an anchor object phrase (no article)."""
        import torch

        if anchor not in self._queries:
            with torch.no_grad():
                self._queries[anchor] = _normalise(self._embed_query(anchor)[None])[0]
        return self._queries[anchor]

    def settings(self) -> dict[str, Any]:
        """What the embeddings depend on besides the weights (recorded in the results)."""
        raise NotImplementedError

    def _embed_images(self, images: list) -> Any:
        raise NotImplementedError

    def _embed_query(self, anchor: str) -> Any:
        raise NotImplementedError


def _normalise(vectors):
    import torch

    return torch.nn.functional.normalize(vectors.float().cpu(), dim=-1)


def _features(output):
    """The projected embeddings of ``get_text_features``/``get_image_features`` (a tensor, or the
    ``pooler_output`` of the model output transformers 5 returns)."""
    return getattr(output, "pooler_output", output)


class ContrastiveRetriever(Retriever):
    """CLIP or SigLIP through transformers' ``AutoModel``/``AutoProcessor`` (module docstring).

    `encode_text` and `tokenize` are the two calls open_clip's ``build_zero_shot_classifier``
    makes, so the template ensemble is open_clip's own code. `templates` are the prompt templates
    (callables of the anchor; the 80 OpenAI ones).
    """

    def __init__(self, spec: RetrieverSpec, device: str, batch_size: int) -> None:
        super().__init__(spec, device, batch_size)
        from open_clip import OPENAI_IMAGENET_TEMPLATES
        from transformers import AutoModel, AutoProcessor

        self.templates = OPENAI_IMAGENET_TEMPLATES
        self.model = AutoModel.from_pretrained(spec.path).to(device).eval()
        self.processor = AutoProcessor.from_pretrained(spec.path)
        self.padding = {"padding": "max_length", "max_length": SIGLIP_TEXT_LENGTH} if spec.kind == "siglip" else {
            "padding": True}

    def tokenize(self, texts: list[str]):
        """``[len(texts), T]`` input ids of prompts, padded as the kind needs (module docstring)."""
        return self.processor.tokenizer(texts, return_tensors="pt", truncation=True, **self.padding).input_ids

    def encode_text(self, input_ids, normalize: bool = True):
        """``[B, D]`` text embeddings of token ids, L2-normalised when `normalize` (open_clip's signature)."""
        features = _features(self.model.get_text_features(input_ids=input_ids.to(self.device)))
        return _normalise(features) if normalize else features

    def _embed_query(self, anchor: str):
        from open_clip import build_zero_shot_classifier

        weights = build_zero_shot_classifier(self, self.tokenize, [anchor], self.templates, num_classes_per_batch=None)
        return weights[:, 0]

    def _embed_images(self, images: list):
        inputs = self.processor(images=images, return_tensors="pt").to(self.device)
        return _features(self.model.get_image_features(pixel_values=inputs["pixel_values"]))

    def settings(self) -> dict[str, Any]:
        """Templates, padding and the image processor's resolution."""
        return {"templates": "open_clip OPENAI_IMAGENET_TEMPLATES", "n_templates": len(self.templates),
                "text_padding": self.padding, "image_processor": type(self.processor.image_processor).__name__,
                "image_size": _json_safe(getattr(self.processor.image_processor, "size", None))}


class EmbeddingRetriever(Retriever):
    """A Qwen3-VL-Embedding-style VLM embedder through ``AutoModel``/``AutoProcessor`` (module docstring)."""

    def __init__(self, spec: RetrieverSpec, device: str, batch_size: int) -> None:
        super().__init__(spec, device, batch_size)
        from transformers import AutoModel, AutoProcessor

        self.model = AutoModel.from_pretrained(spec.path).to(device).eval()
        self.processor = AutoProcessor.from_pretrained(spec.path)

    def _embed(self, content: dict, images: list | None):
        conversation = [{"role": "system", "content": [{"type": "text", "text": EMBEDDING_INSTRUCTION}]},
                        {"role": "user", "content": [content]}]
        text = self.processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        inputs = self.processor(text=[text], images=images, return_tensors="pt").to(self.device)
        return self.model(**inputs).last_hidden_state[0, -1]

    def _embed_query(self, anchor: str):
        return self._embed({"type": "text", "text": EMBEDDING_QUERY.format(anchor=anchor)}, None)

    def _embed_images(self, images: list):
        import torch

        # One image per forward: the last position of a padded batch would be padding.
        return torch.stack([self._embed({"type": "image"}, [image]) for image in images])

    def settings(self) -> dict[str, Any]:
        """Query wording, instruction and pooling."""
        return {"query": EMBEDDING_QUERY, "instruction": EMBEDDING_INSTRUCTION,
                "pooling": "final hidden state at the last position"}


def _json_safe(value):
    return value if value is None or isinstance(value, (int, float, str)) else dict(value)


def load_retriever(spec: RetrieverSpec, device: str = "cpu", batch_size: int = 32) -> Retriever:
    """Load the retriever `spec` names (call `RetrieverSpec.check` first for the clear error)."""
    cls = EmbeddingRetriever if spec.kind == "qwen3vl-embedding" else ContrastiveRetriever
    return cls(spec, device, batch_size)
