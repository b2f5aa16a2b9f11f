"""Yes/No scoring of model responses, mirroring the Visual Haystacks toolkit.

The toolkit (vhs_benchmark ``utils.run_eval``) lower-cases a response, splits it with
``nltk.word_tokenize`` and counts it *correct* when the ground-truth word is among the tokens and
*compliant* when "yes" or "no" is. ``nltk.word_tokenize`` first splits sentences with NLTK's
pretrained English Punkt model (a data download); here the same two stages run with an untrained
``PunktSentenceTokenizer`` and ``NLTKWordTokenizer``, which need no data and differ from the
pretrained model only in abbreviation handling, never in whether "yes"/"no" stand alone.
"""

from __future__ import annotations

import functools

ANSWERS = ("yes", "no")


@functools.cache
def _tokenizers():
    # Imported on first use: ``import nltk`` pulls in its whole package (seconds), which the
    # dataset builder and the CLI do not need.
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def word_tokens(response: str) -> list[str]:
    """Lower-cased word tokens of ``response``, as ``nltk.word_tokenize(response.lower())``.

    Punctuation becomes its own token ("No." -> ["no", "."]); hyphenated or slashed words stay
    whole ("no-one", "yes/no").
    """
    sentences, words = _tokenizers()
    return [token for sentence in sentences.tokenize(response.lower()) for token in words.tokenize(sentence)]


def parse_yes_no(response: str) -> str | None:
    """The first "yes" or "no" word token of ``response``, or ``None`` when there is neither.

    The paper stops VHs generation at the first "yes" or "no" word (App. A), so the first one is
    the model's answer.
    """
    return next((token for token in word_tokens(response) if token in ANSWERS), None)


def is_correct(response: str, answer: str) -> bool:
    """Toolkit correctness: the ground-truth ``answer`` ("yes"/"no") is among the word tokens.

    A response holding both words counts as correct for either answer, as in the toolkit.
    """
    return answer.lower() in word_tokens(response)


def is_compliant(response: str) -> bool:
    """Toolkit compliance: "yes" or "no" appears among the word tokens."""
    tokens = word_tokens(response)
    return any(answer in tokens for answer in ANSWERS)
