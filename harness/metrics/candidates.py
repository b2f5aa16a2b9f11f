"""In-context candidate images of each sample, padded to one tensor (paper App. E.2, App. H).

Samples have different haystack sizes N_s (5 or 6 on ICIR-MCQ, 2-100 on VHs), so the
candidate image embeddings are stored padded: ``embeds [S, N_max, d_model]`` with a boolean
``mask [S, N_max]`` that is True for real images. Image ``i`` of sample ``s`` is
``embeds[s, i]``; padding always comes after a sample's real images, so image indices (votes,
targets) are the same as in the unpadded lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from icir_common import UserInputError


def as_cpu_tensor(array: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A CPU torch tensor of ``dtype`` from a torch tensor (any device) or an array-like."""
    if isinstance(array, torch.Tensor):
        return array.detach().to("cpu", dtype)
    return torch.as_tensor(np.asarray(array), dtype=dtype)


@dataclass(frozen=True)
class InContextCandidates:
    """The N_s candidate image embeddings of each sample and the target's index among them.

    Attributes:
        embeds: float32 ``[S, N_max, d_model]``, each image's mean-pooled projected visual
            tokens (§5.1); rows past N_s are padding (any value).
        mask: bool ``[S, N_max]``, True for the first N_s entries of row s.
        target_index: int64 ``[S]``, the target image i* of each sample, in ``[0, N_s)``.
    """

    embeds: torch.Tensor
    mask: torch.Tensor
    target_index: torch.Tensor

    def __post_init__(self) -> None:
        embeds = as_cpu_tensor(self.embeds)
        mask = as_cpu_tensor(self.mask, torch.bool)
        target = as_cpu_tensor(self.target_index, torch.int64)
        object.__setattr__(self, "embeds", embeds)
        object.__setattr__(self, "mask", mask)
        object.__setattr__(self, "target_index", target)
        if embeds.ndim != 3 or mask.shape != embeds.shape[:2] or target.shape != embeds.shape[:1]:
            raise UserInputError(
                "in-context candidates need embeds [S, N_max, d_model], mask [S, N_max] and "
                f"target_index [S]; got {tuple(embeds.shape)}, {tuple(mask.shape)}, {tuple(target.shape)}"
            )
        counts = mask.sum(dim=1)
        prefix = torch.arange(mask.shape[1])[None, :] < counts[:, None]
        bad = torch.nonzero(~torch.all(mask == prefix, dim=1) | (counts == 0)).flatten()
        if bad.numel():
            raise UserInputError(
                f"sample {int(bad[0])}: the candidate mask must mark at least one image and put "
                "padding after the real images"
            )
        bad = torch.nonzero((target < 0) | (target >= counts)).flatten()
        if bad.numel():
            s = int(bad[0])
            raise UserInputError(
                f"sample {s}: target index {int(target[s])} is outside its {int(counts[s])} candidate images"
            )

    @classmethod
    def from_list(cls, embeds: Sequence[Any], target_index: Sequence[int]) -> InContextCandidates:
        """Pad a list of per-sample ``[N_s, d_model]`` arrays/tensors; ``target_index`` is ``[S]``.

        Raises ``UserInputError`` for an empty list, a count mismatch, differing ``d_model``, or a
        target outside its sample's images.
        """
        if len(embeds) == 0 or len(embeds) != len(target_index):
            raise UserInputError(
                f"got {len(embeds)} candidate lists and {len(target_index)} target indices; "
                "give one of each per sample (at least one sample)"
            )
        tensors = [as_cpu_tensor(e) for e in embeds]
        if any(t.ndim != 2 or t.shape[1] != tensors[0].shape[1] for t in tensors):
            raise UserInputError("every sample's candidates must be [N_s, d_model] with the same d_model")
        padded = torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True)
        counts = torch.tensor([t.shape[0] for t in tensors])
        mask = torch.arange(padded.shape[1])[None, :] < counts[:, None]
        return cls(padded, mask, as_cpu_tensor(target_index, torch.int64))

    @property
    def n_images(self) -> torch.Tensor:
        """int64 ``[S]``: the haystack size N_s of each sample."""
        return self.mask.sum(dim=1)

    def rows(self, index: Any) -> InContextCandidates:
        """The candidates of the samples ``index`` (int array), in that order."""
        index = as_cpu_tensor(index, torch.int64)
        return InContextCandidates(self.embeds[index], self.mask[index], self.target_index[index])
