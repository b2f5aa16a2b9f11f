"""The lm-eval model ``hf-multimodal-heads``: answers and head captures from one prefill per document.

A subclass of lm-eval's ``HFMultimodalLM`` (``hf-multimodal``). For every document lm-eval sends,
it encodes the stored prompt once with the model's own chat template
(`harness.capture.inputs.encode_requests`, the only path from a document to model inputs) and
runs one prefill through the capture engine, which records every head's pointer scores, head
outputs and the image embeddings at the readout positions (paper §3-5, App. A, App. G):

- ``loglikelihood`` (multiple-choice tasks, ICIR-MCQ): the log-probability of each option letter
  as the first answer token, read from the prefill's last-position logits (App. C.4: the
  restricted argmax over the four letters is lm-eval's ``acc``). This is the multimodal
  loglikelihood ``hf-multimodal`` lacks; one forward serves all options.
- ``generate_until`` (VHs): greedy decoding that continues from the same prefill's KV cache
  (`generation.continue_greedy`): the first answer token comes from the captured last position,
  so a document costs one prefill plus decoding steps.

Captures go to an `ActivationStore` keyed by (task, doc_id), together with the record fields the
analysis stage needs (`documents.HEAD_FIELDS`); a document already in the store is not
recomputed (a killed run resumes). Responses are what lm-eval expects (``(logprob, is_greedy)``
and the generated text); the head metrics are computed after lm-eval by `harness.analysis`.
"""

from __future__ import annotations

import importlib.util

import atexit
import json
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from lm_eval.api.registry import register_model
from lm_eval.models.hf_vlms import HFMultimodalLM
from tqdm import tqdm

from harness.activation_store import ActivationStore, check_store_folder
from harness.capture import MODES, CaptureRequest, answer_token_ids
from harness.capture.adapters import ADAPTERS, attention_layers, image_token_id, register_adapter, resolve_adapter
from harness.capture.attention import SUPPORTED_KERNELS
from harness.capture.engine import capture_encoded
from harness.capture.image_inputs import resolve_image_inputs
from harness.capture.inputs import encode_requests
from harness.capture.readout import validate_positions
from harness.constants import DECLARED_SIDE_KEY, MODEL_NAME, NEEDLE_TENSORS, STORE_FLUSH
from harness.demo_model import default_model_path
from harness.lm_eval_plugin.documents import DocInput, doc_input, group_by_doc
from harness.lm_eval_plugin.generation import (
    continue_greedy,
    greedy_settings,
    response_text,
)
from harness.lm_eval_plugin.rankings_io import load_head_ranking, load_writer_probes
from harness.metrics.writer import WriterProbeConfig
from harness.protocol import PROTOCOL_POINTER_MODE, architecture_shape, model_identity, text_sha256
from icir_common import UserInputError

CAPTURED_FIELDS = ("pointer", "pointer_eq3", "head_output", "image_embeds")


def parse_readout(readout: Any) -> tuple[str, ...]:
    """Readout positions from a model argument: ``"cattok"``, ``"cattok/+1/last"`` or a sequence.

    lm-eval's argument parser turns ``+1`` into the integer 1; integers k mean ``+k``. The first
    position is the one the results table reports (App. G positions: cattok, +1..+4, mid, last).
    """
    if isinstance(readout, (int, float)):
        items = [readout]
    elif isinstance(readout, str):
        items = [part for part in readout.replace(",", "/").split("/") if part]
    else:
        items = list(readout)
    return validate_positions([f"+{int(i)}" if isinstance(i, (int, float)) else str(i).strip() for i in items])


def check_architecture(pretrained: str, revision: str | None, trust_remote_code: bool,
                       allow_untested: bool = False) -> tuple[Any, tuple[int, int]]:
    """The model's config and the L x H grid of heads the capture records, read without its
    weights; a clear `UserInputError` when head capture cannot measure `pretrained`'s architecture:
    the model is built from the config on the meta device (no memory, no weights) and given to
    `adapters.resolve_adapter` (with `allow_untested`), whose refusal names the architecture and
    the reason. L counts the attention layers (`adapters.attention_layers`: a hybrid decoder's
    linear-attention layers hold no heads)."""
    try:
        config = transformers.AutoConfig.from_pretrained(
            pretrained, revision=revision, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as err:
        raise UserInputError(f"cannot read a model config from {pretrained!r}: {err}") from None
    text = config.get_text_config()
    if any(adapter.matches(config) for adapter in ADAPTERS):
        return config, (int(text.num_hidden_layers), int(text.num_attention_heads))
    try:
        with torch.device("meta"):
            skeleton = transformers.AutoModelForImageTextToText.from_config(config, trust_remote_code=trust_remote_code)
    except (ValueError, TypeError, KeyError):
        raise UserInputError(f"{pretrained} is a model_type {config.model_type!r}, which transformers' "
                             f"AutoModelForImageTextToText cannot build; {MODEL_NAME} captures the heads of "
                             "LVLMs (docs/models.md lists the model types)") from None
    try:
        adapter = resolve_adapter(skeleton, allow_untested)
    except UserInputError as err:
        raise UserInputError(f"{pretrained}: {err}") from None
    return config, (len(attention_layers(skeleton, adapter)), int(text.num_attention_heads))


def check_load_arguments(model_args: Mapping[str, Any]) -> None:
    """Check the model arguments that would otherwise fail only inside the weights' load or after it:
    ``dtype`` (``auto`` or the name of a torch dtype), ``attn_implementation`` (a kernel the head
    capture wraps, `harness.capture.attention.SUPPORTED_KERNELS`) and ``store`` (a folder, or a path
    where one can be made, whose settings file reads: `check_store_folder`). Absent ones pass.

    ``flash_attention_2`` also needs the flash-attn package (the ``[flash]`` extra).

    Raises:
        UserInputError: the first bad argument, naming it and what to give instead.
    """
    dtype = model_args.get("dtype")
    if dtype not in (None, "auto") and not isinstance(dtype, torch.dtype) \
            and not isinstance(getattr(torch, str(dtype), None), torch.dtype):
        raise UserInputError(f"dtype {dtype!r} is not a torch dtype; give dtype=auto, bfloat16, float16 or float32")
    kernel = model_args.get("attn_implementation")
    if kernel is not None and kernel not in SUPPORTED_KERNELS:
        raise UserInputError(f"attn_implementation {kernel!r} is not an attention kernel the head capture wraps; "
                             f"give one of {', '.join(SUPPORTED_KERNELS)}")
    if kernel == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise UserInputError("attn_implementation=flash_attention_2 needs flash-attn, which is not installed: "
                             "pip install 'image-retrieval-heads[flash]' (CUDA), or give attn_implementation=sdpa")
    if model_args.get("store"):
        check_store_folder(model_args["store"])


class _HeldRecords(logging.Filter):
    """A logger filter that holds back every record (to be handled, or dropped, once an outcome is known)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


def declared_image_side(pretrained: str) -> int | None:
    """The per-image side a local model folder declares for itself (``processor_config.json``).

    A model trained on other inputs than the protocol's (the shipped demo model: 64 px toy images)
    declares its side under ``"icir_image_side"``, so it runs on what it was trained on without a
    flag; the run's protocol record then marks the side as set by the model (off the protocol).
    """
    path = Path(pretrained) / "processor_config.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text()).get(DECLARED_SIDE_KEY)


def image_side(image_budget: int | str | None, pretrained: str) -> tuple[int | None, str | None]:
    """``(side, source)`` from the ``image_budget`` argument: a user side, else the model's
    declared side, else ``(None, None)`` (the family's protocol default, `resolve_image_inputs`).

    Raises:
        UserInputError: an ``image_budget`` that is not a whole number of pixels.
    """
    if image_budget not in (None, "", "protocol"):
        try:
            return int(image_budget), "user"
        except (TypeError, ValueError):
            raise UserInputError(f"image_budget must be a side in pixels, got {image_budget!r}") from None
    declared = declared_image_side(pretrained)
    return (None, None) if declared is None else (int(declared), "model")


@register_model(MODEL_NAME)
class HFMultimodalHeadsLM(HFMultimodalLM):
    """``hf-multimodal`` plus head capture: every head's pointer, head output and image embeddings.

    Model arguments (``--model_args key=value``) beyond ``hf-multimodal``'s:

    Args:
        pretrained: model folder or Hub id; default: the shipped demo model
            (`harness.demo_model.default_model_path`).
        pointer_mode: which pointer score ranks the heads for the votes and the per-document
            picks: ``exact`` (the attention the model computes, Eq. 1) or ``proxy`` /
            ``proxy_causal`` (Eq. 3 from the q_proj/k_proj outputs). Both scores are captured
            from the same prefill and reported either way; ``proxy_causal`` makes the Eq. 3 score
            causal. See `harness.capture`.
        readout: readout positions separated by ``/`` (e.g. ``cattok/+1/last``, App. G); the
            first is reported in the results table, all are stored and written as artifacts.
        heads_ranking: a ranking JSON (``pointer_ranking.json`` of an ICIR-MCQ run's artifacts)
            whose top-K heads vote in ``vote_r1@K`` (§4.3, App. H voting A); used by the analysis
            stage, checked here against the model's shape.
        writer_probes: a writer-probe folder of an ICIR-MCQ run's artifacts (App. H voting B);
            used by the analysis stage, checked here.
        writer_config, writer_<setting>: the writer probes' training settings (App. D): a JSON
            file of `harness.metrics.writer.WriterProbeConfig` fields and/or single settings
            (``writer_epochs``, ``writer_batch_size``, ``writer_lr``, ``writer_temperature``
            (a number or ``learned``), ``writer_in_context_negatives``, ``writer_seed``,
            ``writer_test_fraction``, ``writer_proj_dim``); used by the analysis stage, checked here.
        store: activation store folder (resumable); default a temporary folder removed at exit
            (data-parallel runs need a shared folder: pass one).
        store_flush: documents per store shard (a killed run recomputes at most this many).
        image_budget: per-image side in pixels; default: the family's protocol input (App. A,
            App. J.1: Qwen ``min_pixels = max_pixels = 448*448``, InternVL one 448 x 448 tile,
            LLaVA-OneVision a 384 px single tile, Pixtral 448 px, Gemma 3 its 896 px input;
            `harness.capture.image_inputs`), or the side the model folder declares
            (`declared_image_side`). Only families whose side may change take another.
        attn_implementation: the attention kernel the model runs on (``sdpa``, ``eager``,
            ``flash_attention_2``); the capture wraps it.
        untested_architecture: measure a model type no tiny model conformance-tests
            (docs/models.md) on the adapter derived from its layout; the protocol record names
            it as a deviation. Off by default: such a model type is refused at load.
        max_length: ``hf-multimodal``'s argument; here a limit only: a document whose prompt
            (plus the tokens to generate) is longer is refused, never truncated.

    Raises:
        UserInputError: an unsupported architecture, a dtype, attention kernel or store path
            that cannot be used (`check_load_arguments`; all before loading weights), weights of
            another shape than the config, an unknown pointer mode or readout position, a
            ranking or probe folder that does not fit the model, a store written with other
            settings, or data parallelism without a store folder; (when requests arrive) a
            prompt over ``max_length``.
    """

    def __init__(
        self,
        pretrained: str | None = None,
        pointer_mode: str = PROTOCOL_POINTER_MODE,
        readout: Any = "cattok",
        heads_ranking: str | None = None,
        writer_probes: str | None = None,
        store: str | None = None,
        store_flush: int = STORE_FLUSH,
        image_budget: int | str | None = None,
        attn_implementation: str = "sdpa",
        untested_architecture: bool = False,
        **kwargs,
    ) -> None:
        if pointer_mode not in MODES:
            raise UserInputError(f"pointer_mode {pointer_mode!r} is not one of {', '.join(MODES)}")
        writer_arguments = {key: kwargs.pop(key) for key in list(kwargs) if key.startswith("writer_")}
        self.writer_config = WriterProbeConfig.from_arguments(writer_arguments)  # fit by the analysis stage
        self.positions = parse_readout(readout)
        self.pointer_mode = pointer_mode
        if pretrained is None or isinstance(pretrained, str):
            pretrained = str(pretrained or default_model_path())
            check_architecture(pretrained, kwargs.get("revision"), bool(kwargs.get("trust_remote_code", False)),
                               bool(untested_architecture))
        check_load_arguments({"dtype": kwargs.get("dtype"), "attn_implementation": attn_implementation,
                              "store": store})
        super().__init__(pretrained, attn_implementation=attn_implementation, **kwargs)
        self._use_accelerate_ranks()
        adapter = resolve_adapter(self.model, bool(untested_architecture))
        if not adapter.conformance_tested:
            register_adapter(adapter)  # every later capture of this process takes the opted-in adapter
        side, side_source = image_side(image_budget, str(self.pretrained))
        self.image_call = resolve_image_inputs(self.processor, adapter, side)
        if side_source == "model":
            self.image_call.record["side_source"] = "model"
        self.n_layers = len(attention_layers(self.model, adapter))
        self.n_heads = int(self.model.config.get_text_config().num_attention_heads)
        self.heads_ranking = None if heads_ranking is None else str(Path(heads_ranking).resolve())
        self.writer_probes = None if writer_probes is None else str(Path(writer_probes).resolve())
        if self.heads_ranking:
            load_head_ranking(self.heads_ranking, self.n_layers, self.n_heads)
        if self.writer_probes:
            load_writer_probes(self.writer_probes, self.n_layers, self.n_heads)
        self.store = ActivationStore(self._store_dir(store), self.capture_settings(), self.rank, int(store_flush))

    def _create_model(self, pretrained, *args, **kwargs) -> None:
        """HFLM's load of the weights, refusing in one line weights of another shape than the config.

        transformers logs a per-tensor load report and then raises a ``RuntimeError`` when a
        checkpoint tensor's shape differs from the one the config gives; the report is held back
        until the load's outcome is known: logged after a load that succeeds or fails otherwise,
        dropped for the one-line refusal.

        Raises:
            UserInputError: weights whose shapes do not fit ``config.json`` (the model folder
                holds files of two models), naming the folder.
        """
        logger = logging.getLogger("transformers.modeling_utils")
        held = _HeldRecords()
        logger.addFilter(held)
        try:
            super()._create_model(pretrained, *args, **kwargs)
        except RuntimeError as err:
            if "ignore_mismatched_sizes" not in str(err):
                raise
            held.records.clear()
            raise UserInputError(
                f"the weights in {pretrained} have other tensor shapes than its config.json gives (e.g. another "
                "hidden size): the folder holds files of two models; put the config.json and weights of one "
                "model there"
            ) from None
        finally:
            logger.removeFilter(held)
            for record in held.records:
                logger.handle(record)

    def _use_accelerate_ranks(self) -> None:
        # HFLM takes ranks from accelerate only when more than one GPU is visible; on CPU (gloo) or
        # one GPU per process it would run every document on every process.
        accelerator = getattr(self, "accelerator", None)
        if accelerator is not None and accelerator.num_processes > 1 and self._world_size == 1:
            self._rank = accelerator.process_index
            self._world_size = accelerator.num_processes

    def _store_dir(self, store: str | None) -> Path:
        if store is not None:
            return Path(store).resolve()
        if self.world_size > 1:
            raise UserInputError(
                f"data-parallel runs of {MODEL_NAME} need a store folder every process sees: "
                f"pass --model_args store=DIR (or --output_path with `icir eval`)"
            )
        path = Path(tempfile.mkdtemp(prefix="icir-store-"))
        atexit.register(shutil.rmtree, path, True)
        return path

    def get_model_info(self) -> dict[str, Any]:
        """lm-eval's model info (``HFLM.get_model_info``, which lm-eval writes into the results'
        ``config``) with ``model_sha`` the weights' identity the store recorded: the Hub commit, or
        ``sha256:<weights sha256>`` of a local folder (HFLM asks the Hub, which knows no local
        folder, and leaves it empty), and ``chat_template``: the processor's template every prompt
        is rendered with (`harness.eval_cli.save_and_print` moves it to lm-eval's tracker)."""
        info = super().get_model_info()
        identity = self.store.settings["identity"]
        info["model_sha"] = identity["commit"] or f"sha256:{identity['weights_sha256']}"
        info["chat_template"] = getattr(self.processor, "chat_template", None)
        return info

    def capture_settings(self) -> dict[str, Any]:
        """What every stored capture depends on (a store refuses records made otherwise): the
        model's identity (weights sha256 or Hub commit), dtype, kernel, chat template, Eq. 3 variant,
        readout positions, image inputs, parameter count, and architecture, L x H and hidden size
        (`harness.protocol.architecture_shape`; `harness.protocol` records them)."""
        pretrained = str(self.pretrained) if isinstance(self.pretrained, str) else self.model.name_or_path
        return {
            "model": pretrained,
            "identity": model_identity(pretrained, self.revision, getattr(self.model.config, "_commit_hash", None)),
            "chat_template_sha256": text_sha256(getattr(self.processor, "chat_template", None)),
            "revision": self.revision,
            "dtype": str(self.model.dtype),
            "attn_implementation": self.model.config._attn_implementation,
            "eq3": "proxy_causal" if self.pointer_mode == "proxy_causal" else "proxy",
            "readout": list(self.positions),
            "image_inputs": self.image_call.record,
            **architecture_shape(self.model),  # architecture, layers, heads, hidden_size
            "model_type": self.model.config.model_type,
            "n_parameters": sum(p.numel() for p in self.model.parameters()),
        }

    # ------------------------------------------------------------------ capture

    def _stored(self, doc: DocInput) -> dict[str, Any] | None:
        record = self.store.record(doc.task, doc.doc_id)
        if record is not None and record["fingerprint"] != doc.fingerprint:
            raise UserInputError(
                f"activation store {self.store.root} holds task {doc.task} doc {doc.doc_id} of another dataset "
                f"(fingerprint differs); pass another store=DIR or delete it"
            )
        return record

    def _encode(self, docs: Sequence[DocInput], new_tokens: int = 0):
        requests = [CaptureRequest(doc.prompt, doc.images, doc.query_char_span, doc.needle_char_span) for doc in docs]
        image_token = image_token_id(self.model, resolve_adapter(self.model))
        try:
            inputs, layouts = encode_requests(self.processor, requests, image_token, self.image_call)
        except UserInputError as err:
            raise self._name_failing_document(docs, requests, image_token, err) from None
        if self._max_length:  # lm-eval's max_length, when given, is a limit: nothing is ever truncated
            for doc, layout in zip(docs, layouts):
                if layout.last + 1 + new_tokens > self._max_length:
                    raise UserInputError(
                        f"task {doc.task} doc {doc.doc_id}: the prompt is {layout.last + 1} tokens"
                        + (f" (+ {new_tokens} to generate)" if new_tokens else "")
                        + f", over max_length={self._max_length}; raise max_length or drop it (prompts are never cut)"
                    )
        return inputs, layouts

    def _name_failing_document(self, docs, requests, image_token: int, err: UserInputError) -> UserInputError:
        """`err` prefixed with the task and document that raise it (each encoded alone to find it)."""
        for doc, request in zip(docs, requests):
            try:
                encode_requests(self.processor, [request], image_token, self.image_call)
            except UserInputError as alone:
                return UserInputError(f"task {doc.task} doc {doc.doc_id} ({self.pretrained}): {alone}")
        names = ", ".join(f"{doc.task} doc {doc.doc_id}" for doc in docs)
        return UserInputError(f"{names} ({self.pretrained}): {err}")

    def _tensors(self, capture) -> dict[str, torch.Tensor]:
        names = CAPTURED_FIELDS + (NEEDLE_TENSORS if capture.needle_mass is not None else ())
        return {name: getattr(capture, name) for name in names}

    def _base_record(self, doc: DocInput, capture) -> dict[str, Any]:
        return {
            "fingerprint": doc.fingerprint,
            "fields": doc.fields,
            "n_images": len(doc.images),
            "readout_indices": list(capture.readout_indices),
            "image_spans": [list(span) for span in capture.image_spans],
        }

    def _batches(self, items: list, desc: str, disable_tqdm: bool, size: int | None = None):
        size = max(1, int(self.batch_size if size is None else size))
        bar = tqdm(total=len(items), desc=desc, disable=disable_tqdm or self.rank != 0)
        for start in range(0, len(items), size):
            batch = items[start : start + size]
            yield batch
            bar.update(len(batch))
        bar.close()

    # ------------------------------------------------------------------ lm-eval requests

    def _check_answers(self, key: tuple[str, int], record: dict, answers: list[str]) -> None:
        if not set(answers) <= set(record["answers"]):
            raise UserInputError(
                f"activation store {self.store.root} scored task {key[0]} doc {key[1]} for answers "
                f"{sorted(record['answers'])}, not {answers}; pass another store=DIR"
            )

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Per request ``(log p(continuation's first token | prompt), is_greedy)``.

        Each continuation must be one token (an option letter, App. C.4); its log-probability is
        taken over the full vocabulary at the first answer position, from the capture prefill.
        Documents are captured ``batch_size`` at a time in one right-padded forward.

        Raises:
            UserInputError: see `documents.doc_input`; a continuation that is not one token
                (`harness.capture.answer_token_ids`); a stored record scored for other answers.
        """
        groups = group_by_doc(requests)
        answers = {key: list(dict.fromkeys(requests[i].args[1] for i in idx)) for key, idx in groups.items()}
        docs = {key: doc_input(requests[indices[0]]) for key, indices in groups.items()}
        todo = []
        for key in groups:
            record = self._stored(docs[key])
            if record is None:
                todo.append(key)
            else:
                self._check_answers(key, record, answers[key])
        vocab = range(self.model.get_output_embeddings().out_features)
        for batch in self._batches(todo, "capturing heads (loglikelihood)", disable_tqdm):
            inputs, layouts = self._encode([docs[k] for k in batch])
            captures = capture_encoded(self.model, inputs, layouts, self.positions, self.pointer_mode, vocab)
            for key, capture in zip(batch, captures):
                self._put_scored(key, docs[key], capture, answers[key])
        self.store.flush()
        results: list = [None] * len(requests)
        for key, indices in groups.items():
            scored = self.store.record(*key)["answers"]
            for index in indices:
                logprob, is_greedy = scored[requests[index].args[1]]
                results[index] = (logprob, bool(is_greedy))
        return results

    def _put_scored(self, key: tuple[str, int], doc: DocInput, capture, answers: list[str]) -> None:
        logprobs = torch.log_softmax(capture.answer_logits.double(), dim=-1)
        greedy = int(torch.argmax(logprobs))
        token_ids = answer_token_ids(self.processor, answers)
        scored = {text: [float(logprobs[t]), t == greedy] for text, t in zip(answers, token_ids)}
        record = {**self._base_record(doc, capture), "answers": scored}
        tensors = {**self._tensors(capture), "answer_logits": capture.answer_logits[token_ids].float()}
        self.store.put(key[0], key[1], record, tensors)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Per request the generated text: greedy decoding continued from the capture prefill.

        Generation kwargs are lm-eval's (``until``, ``max_gen_toks``) plus ``stop_at_words``: stop
        once a complete word of that list is generated (App. A: VHs stops at the first
        "yes"/"no"). Each request's kwargs are copied (`generation.greedy_settings`), and the
        store records them exactly as the task asked. Documents are captured one at a time:
        each keeps its own KV cache for decoding.

        Raises:
            UserInputError: see `documents.doc_input` and `generation.greedy_settings`; a stored
                response made with other generation kwargs.
        """
        groups = group_by_doc(requests)
        docs = {key: doc_input(requests[indices[0]]) for key, indices in groups.items()}
        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        settings = {key: greedy_settings(requests[i[0]].args[1], eos, self.max_gen_toks) for key, i in groups.items()}
        todo = []
        for key in groups:
            record = self._stored(docs[key])
            if record is None:
                todo.append(key)
            elif record["generation_kwargs"] != settings[key].requested:
                raise UserInputError(
                    f"activation store {self.store.root} holds task {key[0]} doc {key[1]} generated with "
                    f"{record['generation_kwargs']}, not {settings[key].requested}; pass another store=DIR"
                )
        for (key,) in self._batches(todo, "capturing heads + generating", disable_tqdm, size=1):
            self._capture_and_generate(key, docs[key], settings[key])
        self.store.flush()
        results: list = [None] * len(requests)
        for key, indices in groups.items():
            for index in indices:
                results[index] = self.store.record(*key)["response"]
        return results

    def _capture_and_generate(self, key: tuple[str, int], doc: DocInput, settings) -> None:
        inputs, layouts = self._encode([doc], settings.max_new_tokens)
        cache = transformers.DynamicCache(config=self.model.config)
        vocab = range(self.model.get_output_embeddings().out_features)
        (capture,) = capture_encoded(self.model, inputs, layouts, self.positions, self.pointer_mode, vocab, cache)
        input_ids = inputs["input_ids"].to(next(self.model.parameters()).device)
        generated = continue_greedy(self.model, self.tokenizer, input_ids, cache, capture.answer_logits, settings)
        record = {
            **self._base_record(doc, capture),
            "response": response_text(self.tokenizer, generated, settings),
            "generated_ids": generated,
            "generation_kwargs": settings.requested,
        }
        self.store.put(key[0], key[1], record, self._tensors(capture))
