"""Answer strings (option letters, "Yes"/"No") as single next-token ids."""

from __future__ import annotations

from collections.abc import Sequence

from icir_common import UserInputError


def answer_token_ids(processor_or_tokenizer, answers: Sequence[str]) -> list[int]:
    """One token id per answer string, as the model would emit it right after the generation prompt.

    Each answer is encoded without special tokens; it must be one token. When it is not (a
    SentencePiece tokenizer may add a word-start piece), the answer's exact vocabulary entry is
    used if the tokenizer has one. Ids must be distinct.

    Args:
        processor_or_tokenizer: a processor (its ``.tokenizer`` is used) or a tokenizer.
        answers: e.g. ``["A", "B", "C", "D"]`` or ``["Yes", "No"]``.

    Returns:
        Token ids, in the order of `answers` (the ``answer_tokens`` argument of `capture_heads`).

    Raises:
        UserInputError: an answer that is no single token, or two answers with the same id.
    """
    tokenizer = getattr(processor_or_tokenizer, "tokenizer", processor_or_tokenizer)
    ids = []
    for answer in answers:
        encoded = tokenizer.encode(answer, add_special_tokens=False)
        if len(encoded) != 1:
            vocab_id = tokenizer.get_vocab().get(answer)
            if vocab_id is None:
                pieces = tokenizer.convert_ids_to_tokens(encoded)
                raise UserInputError(f"answer {answer!r} is not a single token for this tokenizer: {pieces}")
            encoded = [vocab_id]
        ids.append(encoded[0])
    if len(set(ids)) != len(ids):
        raise UserInputError(f"answers {list(answers)} share token ids {ids}")
    return ids
