"""Stop greedy generation at the first answer word (paper App. A: VHs stops at the first yes/no).

A word counts once it is complete: the generated text is cut at its last separator (whitespace
or sentence punctuation) so that a word still being generated ("No" of "Nothing") is not taken,
and the rest is scored with the VHs toolkit's own tokenisation (`vhs_adapter.scoring`), so the
stop fires exactly when the toolkit parser would already read an answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from transformers import StoppingCriteria

from vhs_adapter.scoring import word_tokens

_SEPARATOR = re.compile(r"[\s.,!?;:()\"]")


def completed_words_text(text: str) -> str:
    """`text` up to (and including) its last separator: only words known to be complete."""
    last = max((m.end() for m in _SEPARATOR.finditer(text)), default=0)
    return text[:last]


def has_answer_word(text: str, words: Sequence[str]) -> bool:
    """Whether a complete word of `text` is one of `words` (lower-cased toolkit word tokens)."""
    wanted = {w.lower() for w in words}
    return any(token in wanted for token in word_tokens(completed_words_text(text)))


class StopAtAnswerWord(StoppingCriteria):
    """A transformers ``StoppingCriteria``: a row is done once its new text holds a complete answer word.

    Args:
        tokenizer: decodes the generated ids (special tokens skipped).
        words: answer words, e.g. ``("yes", "no")`` (case-insensitive).
        prompt_length: number of prompt tokens per row (generated ids follow them).
    """

    def __init__(self, tokenizer, words: Sequence[str], prompt_length: int):
        self.tokenizer = tokenizer
        self.words = tuple(words)
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        """[B] bool: True for rows whose generated text holds a complete answer word."""
        done = [
            has_answer_word(self.tokenizer.decode(row[self.prompt_length:], skip_special_tokens=True), self.words)
            for row in input_ids
        ]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
