"""Readout positions (paper App. G): the token positions at which heads are read.

``cattok`` is the token holding the last character of the query span (§3.2); ``+k`` (k = 1..4) the
k-th token after it; ``mid`` the token midway between the cattok and the last prefill token
(rounded down); ``last`` the last prefill token (where the first answer token is decoded).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.constants import READOUT_POSITIONS
from icir_common import UserInputError

_NEEDS_CATTOK = frozenset(READOUT_POSITIONS) - {"last"}


def validate_positions(positions: Sequence[str]) -> tuple[str, ...]:
    """`positions` as a tuple, checked: non-empty, no repeats, each one of `READOUT_POSITIONS`.

    Raises:
        UserInputError: an empty list, a repeated name or an unknown name (the message lists the allowed ones).
    """
    positions = tuple(positions)
    if not positions:
        raise UserInputError(f"no readout positions given; choose from {', '.join(READOUT_POSITIONS)}")
    unknown = [name for name in positions if name not in READOUT_POSITIONS]
    if unknown:
        raise UserInputError(f"unknown readout position(s) {unknown}; choose from {', '.join(READOUT_POSITIONS)}")
    if len(set(positions)) != len(positions):
        raise UserInputError(f"readout positions repeat a name: {list(positions)}")
    return positions


def needs_cattok(positions: Sequence[str]) -> bool:
    """Whether any of `positions` is defined relative to the cattok (all but ``last``)."""
    return any(name in _NEEDS_CATTOK for name in positions)


def readout_indices(positions: Sequence[str], cattok: int | None, last: int) -> list[int]:
    """Token indices (0-based, into the sample's ``input_ids``) of the named readout positions.

    Args:
        positions: names from `READOUT_POSITIONS`, already validated.
        cattok: index of the cattok, or None when no query span was given.
        last: index of the last prefill token of the sample (ignoring right padding).

    Returns:
        One index per name, in the order of `positions`.

    Raises:
        UserInputError: a cattok-relative position without a cattok, or ``+k`` past the last prefill token.
    """
    if cattok is None and needs_cattok(positions):
        raise UserInputError(f"readout positions {list(positions)} need a query_char_span (only 'last' does not)")
    indices = []
    for name in positions:
        if name == "last":
            indices.append(last)
        elif name == "mid":
            indices.append((cattok + last) // 2)
        elif name == "cattok":
            indices.append(cattok)
        else:
            index = cattok + int(name[1:])
            if index > last:
                raise UserInputError(
                    f"readout position {name!r} is token {index}, past the last prefill token {last} "
                    f"(cattok at {cattok}); drop {name!r} or move the query span earlier"
                )
            indices.append(index)
    return indices
