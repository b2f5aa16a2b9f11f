"""Greedy decoding that continues from the capture prefill's KV cache (one prefill per document).

The capture forward (`harness.capture.engine.capture_encoded` with a ``cache``) has already run
the whole prompt and filled a transformers ``DynamicCache``; its last-position logits give the
first answer token. `continue_greedy` appends that token and hands the rest to
``model.generate`` with the filled cache, which then runs one decoding step per token and no
prefill: the answer that is scored comes from exactly the input whose heads were captured.
For greedy decoding the tokens equal those of a plain ``model.generate`` on the same inputs
(``tests/test_generation.py``, every tiny architecture).

Generation settings are lm-eval's (``until``, ``max_gen_toks``, ``do_sample``, ``temperature``)
plus ``stop_at_words`` (App. A: VHs stops at the first complete "yes"/"no").
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import torch
from lm_eval.models.utils import handle_stop_sequences
from lm_eval.models.utils_hf import stop_sequences_criteria
from transformers import StoppingCriteriaList

from harness.lm_eval_plugin.stopping import StopAtAnswerWord
from icir_common import UserInputError


@dataclasses.dataclass(frozen=True)
class GreedySettings:
    """One document's decoding settings, parsed from (a copy of) lm-eval's generation kwargs.

    Attributes:
        requested: the kwargs exactly as the task asked for them, JSON-normalised (what the
            activation store records and compares on resume).
        until: stop strings (lm-eval's ``until`` plus the end-of-turn token).
        max_new_tokens: lm-eval's ``max_gen_toks``.
        stop_at_words: answer words that end decoding once complete, or ().
    """

    requested: dict[str, Any]
    until: tuple[str, ...]
    max_new_tokens: int
    stop_at_words: tuple[str, ...]


def greedy_settings(gen_kwargs: Mapping[str, Any], eos: str, default_max: int) -> GreedySettings:
    """Parse lm-eval generation kwargs; the caller's dict is never modified or shared.

    Raises:
        UserInputError: sampling asked for (``do_sample=True`` or ``temperature > 0``; the
            capture decodes greedily, App. A), or a kwarg this model does not know.
    """
    requested = json.loads(json.dumps(copy.deepcopy(dict(gen_kwargs))))
    kwargs = copy.deepcopy(requested)
    if kwargs.pop("do_sample", False) or float(kwargs.pop("temperature", 0.0) or 0.0) > 0.0:
        raise UserInputError(
            "hf-multimodal-heads decodes greedily from the capture prefill (App. A); "
            "drop do_sample / temperature from --gen_kwargs"
        )
    until = tuple(handle_stop_sequences(kwargs.pop("until", None), eos=eos))
    max_new_tokens = int(kwargs.pop("max_gen_toks", default_max))
    words = tuple(kwargs.pop("stop_at_words", None) or ())
    if kwargs:
        raise UserInputError(f"unsupported generation kwargs for hf-multimodal-heads: {', '.join(sorted(kwargs))}")
    if max_new_tokens < 1:
        raise UserInputError(f"max_gen_toks must be >= 1, got {max_new_tokens}")
    return GreedySettings(requested, until, max_new_tokens, words)


def _criteria(tokenizer, settings: GreedySettings, prompt_length: int) -> StoppingCriteriaList:
    criteria = stop_sequences_criteria(tokenizer, list(settings.until), prompt_length, 1)
    if settings.stop_at_words:
        criteria.append(StopAtAnswerWord(tokenizer, settings.stop_at_words, prompt_length))
    return criteria


def _eos_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, (list, tuple)) else [] if ids is None else [ids])
    return ids | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())


@torch.no_grad()
def continue_greedy(model, tokenizer, input_ids: torch.Tensor, cache, last_logits: torch.Tensor,
                    settings: GreedySettings) -> list[int]:
    """Generated token ids of one document, decoding from a filled prefill cache.

    Args:
        model: the LVLM whose prefill filled `cache`.
        tokenizer: its tokenizer (stop strings, answer words).
        input_ids: [1, T] long, the prefill's input ids (the capture's own encoding).
        cache: the transformers ``Cache`` holding the T prefill positions.
        last_logits: [V] logits at position T-1 (the capture's last-position logits).
        settings: from `greedy_settings`.

    Returns:
        The generated ids (at most ``settings.max_new_tokens``), first token included.
    """
    first = last_logits.argmax().view(1, 1).to(input_ids.device)
    ids = torch.cat([input_ids, first], dim=1)
    length = input_ids.shape[1]
    criteria = _criteria(tokenizer, settings, length)
    done = int(first) in _eos_ids(model, tokenizer) or bool(criteria(ids, None).any())
    if done or settings.max_new_tokens == 1:
        return ids[0, length:].tolist()
    output = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        cache=cache,
        max_new_tokens=settings.max_new_tokens - 1,
        do_sample=False,
        stopping_criteria=criteria,
        pad_token_id=tokenizer.pad_token_id,
    )
    return output[0, length:].tolist()


def response_text(tokenizer, generated: list[int], settings: GreedySettings) -> str:
    """The decoded response, cut at the first stop string (as lm-eval's ``hf`` model does)."""
    text = tokenizer.decode(generated, skip_special_tokens=True)
    for term in settings.until:
        if term:
            text = text.split(term)[0]
    return text



@torch.no_grad()
def greedy_rows(model, tokenizer, input_ids: torch.Tensor, cache, last_logits: torch.Tensor,
                settings: GreedySettings, next_positions: torch.Tensor | None = None,
                uncached: int = 0) -> list[list[int]]:
    """`continue_greedy` for B rows that share one prompt and differ in their filled cache.

    All unfinished rows step together; each stops as `continue_greedy` stops (an end-of-turn
    token, a stop string or answer word, ``max_new_tokens``), so a row's tokens are those
    `continue_greedy` decodes for it alone (``tests/test_ablation_cells.py``). The ablation grid's
    cells of one document decode this way (`harness.ablation.cells`).

    Args:
        input_ids: [1, T] long, the prompt's input ids.
        cache: a transformers ``Cache`` holding the T prompt positions of each of the B rows.
        last_logits: [B, V] logits at position T-1 of each row.
        next_positions: position ids of the first generated token, for models whose positions
            are not the cache length (multimodal RoPE: ``[3, B, 1]``); each step adds one. None:
            the model derives them from the cache.
        uncached: leading prompt positions `cache` does not hold (a prefix the attention kernel
            reads elsewhere, `harness.ablation.shared_prefix`); the attention mask covers the rest.

    Returns:
        Per row the generated ids, first token included.
    """
    rows, length = last_logits.shape[0], input_ids.shape[1]
    eos = _eos_ids(model, tokenizer)
    criteria = [_criteria(tokenizer, settings, length) for _ in range(rows)]
    ids = torch.cat([input_ids.expand(rows, -1), last_logits.argmax(dim=-1, keepdim=True).to(input_ids.device)], 1)
    done = [int(ids[r, -1]) in eos or bool(criteria[r](ids[r:r + 1], None).any()) for r in range(rows)]
    ends = [length + 1] * rows
    for step in range(settings.max_new_tokens - 1):
        if all(done):
            break
        attention = torch.ones(rows, ids.shape[1] - uncached, dtype=torch.long, device=ids.device)
        positions = None if next_positions is None else next_positions + step
        out = model(input_ids=ids[:, -1:], attention_mask=attention, position_ids=positions, cache=cache,
                    use_cache=True)
        ids = torch.cat([ids, out.logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        for r in range(rows):
            if not done[r]:
                ends[r] = ids.shape[1]
                done[r] = int(ids[r, -1]) in eos or bool(criteria[r](ids[r:r + 1], None).any())
    return [ids[r, length:ends[r]].tolist() for r in range(rows)]
