"""Writer probes of many heads as one batched module: scoring, in-context votes, save and load.

Each head (l, h) has a head-level image retriever (paper Eq. 5, App. D): f, one Linear
d_h -> k, maps the head output o; g, one Linear d_model -> k, maps an image embedding e; both
are L2-normalised and scored by dot product, s_i = f~(o) . g~(e_i). The weights of all heads
sit in tensors with a leading head axis, laid out like stacked ``torch.nn.Linear`` weights:
``f_weight [n, k, d_h]``, ``f_bias [n, k]``, ``g_weight [n, k, d_model]``, ``g_bias [n, k]``,
where ``heads`` lists the n flat head indices ``l*H + h``. Each head's computation is the same
whatever other heads share the tensors, so results do not depend on how heads are grouped.

Saved probes are a folder with ``writer_probes.safetensors`` (the four tensors) and
``writer_probes.json`` (dimensions, head names, training settings), never pickle.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import safetensors.torch
import torch
import torch.nn.functional as F

from harness.constants import WRITER_PROBES_SETTINGS as SETTINGS_FILE
from harness.metrics.candidates import InContextCandidates, as_cpu_tensor
from harness.metrics.rankings import as_flat_indices, ranking_names
from harness.metrics.vote import NO_VOTE
from icir_common import UserInputError

FORMAT = "writer-probes/1"
WEIGHTS_FILE = "writer_probes.safetensors"
PARAMETER_NAMES = ("f_weight", "f_bias", "g_weight", "g_bias")
_SETTINGS_KEYS = ("n_layers", "n_heads", "head_dim", "d_model", "proj_dim", "heads")
# Fixed block sizes for scoring: they bound memory, and being fixed keep results identical.
ROW_BLOCK = 256
HEAD_BLOCK = 16


def head_slice(head_output: Any, rows: np.ndarray | None, heads: np.ndarray) -> torch.Tensor:
    """Head outputs of samples ``rows`` (all when None) and flat heads ``heads``: float32 ``[n, S', d_h]``.

    ``head_output`` is ``[S, L, H, d_h]`` (numpy array, memmap or torch tensor); only the
    requested slice is copied.
    """
    n_samples, n_layers, n_heads, head_dim = head_output.shape
    flat = head_output.reshape(n_samples, n_layers * n_heads, head_dim)
    rows = np.arange(n_samples) if rows is None else np.asarray(rows, dtype=np.int64)
    heads = np.asarray(heads, dtype=np.int64)
    if heads.size and np.array_equal(heads, np.arange(heads[0], heads[0] + heads.size)):
        # Chunks are runs of heads: a basic slice then a row gather copies ~5x faster than a 2-D fancy index.
        columns = flat[:, int(heads[0]) : int(heads[0]) + heads.size]
        if isinstance(columns, torch.Tensor):
            part = columns.index_select(0, torch.as_tensor(rows, device=columns.device))
        else:
            part = np.take(columns, rows, axis=0)
    elif isinstance(flat, torch.Tensor):
        part = flat[torch.as_tensor(rows)[:, None], torch.as_tensor(heads)[None, :]]
    else:
        part = flat[rows[:, None], heads[None, :]]
    return as_cpu_tensor(part).permute(1, 0, 2).contiguous()


def image_pool(target_embeds: torch.Tensor, image_ids: Sequence[Any] | None = None) -> tuple[torch.Tensor, np.ndarray]:
    """The candidate pool of writer R@1 (§5.1): the distinct target images of the given samples.

    Args:
        target_embeds: float ``[S, d_model]`` target image embedding of each sample.
        image_ids: optional ``[S]`` image identifiers (e.g. COCO ids). Samples that share an id
            share one pool item (the first sample's embedding), so a repeated image is neither
            counted twice nor scored as its own distractor. Without ids every sample is a
            separate pool item.

    Returns:
        ``(pool_embeds [P, d_model], target_pool_index int64 [S])``, pool in first-occurrence order.
    """
    if image_ids is None:
        return target_embeds, np.arange(target_embeds.shape[0], dtype=np.int64)
    first: dict[Any, int] = {}
    index = np.array([first.setdefault(i, len(first)) for i in image_ids], dtype=np.int64)
    keep = np.unique(index, return_index=True)[1]
    return target_embeds[torch.as_tensor(keep)], index


def pool_picks(queries: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """Per head and query, the pool item ranked first: int64 ``[n, S]`` (pool indices).

    ``queries`` ``[n, S, k]`` and ``pool`` ``[n, P, k]`` are normalised embeddings. Ties go to the
    smallest pool index (``torch.argmax``). A query's hit is ``picks == target_pool_index``.
    """
    picks = torch.empty(queries.shape[:2], dtype=torch.int64, device=queries.device)
    for start in range(0, queries.shape[1], ROW_BLOCK):
        scores = queries[:, start : start + ROW_BLOCK] @ pool.transpose(1, 2)
        picks[:, start : start + ROW_BLOCK] = scores.argmax(dim=-1)
    return picks


def _uniform(generator: torch.Generator, shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(shape, generator=generator) * 2.0 - 1.0) * bound


class WriterProbes:
    """Trained (or freshly initialised) writer probes for ``n`` heads of an L x H model.

    Attributes:
        heads: int64 ``[n]`` flat head indices ``l*H + h`` (names via :attr:`head_names`).
        n_layers, n_heads: the model's L and H.
        f_weight, f_bias, g_weight, g_bias: float32 tensors, see the module docstring.
        info: JSON-ready dict of training settings and results (saved with the probes).
    """

    def __init__(
        self,
        heads: Iterable[int],
        n_layers: int,
        n_heads: int,
        f_weight: torch.Tensor,
        f_bias: torch.Tensor,
        g_weight: torch.Tensor,
        g_bias: torch.Tensor,
        info: dict | None = None,
    ) -> None:
        self.heads = np.asarray(list(heads), dtype=np.int64)
        self.n_layers, self.n_heads = int(n_layers), int(n_heads)
        self.f_weight, self.f_bias, self.g_weight, self.g_bias = f_weight, f_bias, g_weight, g_bias
        self.info = dict(info or {})
        n, k = len(self.heads), f_weight.shape[1]
        expected = {
            "f_weight": (n, k, f_weight.shape[2]),
            "f_bias": (n, k),
            "g_weight": (n, k, g_weight.shape[2]),
            "g_bias": (n, k),
        }
        for name, shape in expected.items():
            if tuple(getattr(self, name).shape) != shape:
                raise UserInputError(
                    f"writer probe tensor {name} has shape {tuple(getattr(self, name).shape)}, expected {shape}"
                )
        if ((self.heads < 0) | (self.heads >= n_layers * n_heads)).any() or len(set(self.heads)) != n:
            raise UserInputError("writer probe heads must be distinct flat indices of the model's L x H heads")

    @classmethod
    def initialise(
        cls,
        heads: Iterable[int],
        n_layers: int,
        n_heads: int,
        head_dim: int,
        d_model: int,
        proj_dim: int = 256,
        seed: int = 0,
    ) -> WriterProbes:
        """Fresh probes with ``torch.nn.Linear``'s default init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)).

        Each head draws from its own CPU generator seeded by ``(seed, flat head index)``, so a
        head starts from the same weights on any device and in any group of heads.
        """
        heads = list(heads)
        tensors: dict[str, list[torch.Tensor]] = {name: [] for name in PARAMETER_NAMES}
        for head in heads:
            state = np.random.SeedSequence([seed, int(head)]).generate_state(2, dtype=np.uint32)
            generator = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
            tensors["f_weight"].append(_uniform(generator, (proj_dim, head_dim), head_dim))
            tensors["f_bias"].append(_uniform(generator, (proj_dim,), head_dim))
            tensors["g_weight"].append(_uniform(generator, (proj_dim, d_model), d_model))
            tensors["g_bias"].append(_uniform(generator, (proj_dim,), d_model))
        stacked = {name: torch.stack(values) for name, values in tensors.items()}
        return cls(heads, n_layers, n_heads, **stacked)

    @property
    def head_dim(self) -> int:
        """d_h, the head-output width."""
        return self.f_weight.shape[2]

    @property
    def d_model(self) -> int:
        """The image-embedding width (the language model's hidden size)."""
        return self.g_weight.shape[2]

    @property
    def proj_dim(self) -> int:
        """k, the width of the shared retrieval space (256 in App. D)."""
        return self.f_weight.shape[1]

    @property
    def head_names(self) -> list[str]:
        """``LxxHyy`` names of :attr:`heads`."""
        return ranking_names(self.heads, self.n_heads)

    def parameters(self) -> list[torch.Tensor]:
        """``[f_weight, f_bias, g_weight, g_bias]``, the tensors an optimiser updates."""
        return [self.f_weight, self.f_bias, self.g_weight, self.g_bias]

    def with_tensors(self, tensors: Sequence[torch.Tensor], heads: np.ndarray | None = None) -> WriterProbes:
        """Probes with the same model shape and info but the given four tensors (and heads)."""
        heads = self.heads if heads is None else heads
        return WriterProbes(heads, self.n_layers, self.n_heads, *tensors, info=self.info)

    def to(self, device: str | torch.device) -> WriterProbes:
        """A copy with every tensor on ``device``."""
        return self.with_tensors([p.detach().to(device) for p in self.parameters()])

    def subset(self, heads: Iterable[int | str]) -> WriterProbes:
        """The probes of ``heads`` (flat indices or ``LxxHyy`` names), in the order given.

        Raises ``UserInputError`` for a head without a probe here.
        """
        wanted = as_flat_indices(heads, self.n_layers, self.n_heads)
        position = {int(h): i for i, h in enumerate(self.heads)}
        missing = [int(h) for h in wanted if int(h) not in position]
        if missing:
            name = ranking_names(missing[:1], self.n_heads)[0]
            raise UserInputError(f"no writer probe for head {name}; these probes cover {len(self.heads)} heads")
        index = torch.tensor([position[int(h)] for h in wanted], dtype=torch.int64)
        return self.with_tensors([p.detach()[index.to(p.device)] for p in self.parameters()], wanted)

    def encode_heads(self, x: torch.Tensor) -> torch.Tensor:
        """f~(o): head outputs ``[n, S, d_h]`` -> L2-normalised ``[n, S, k]``."""
        return F.normalize(torch.baddbmm(self.f_bias[:, None, :], x, self.f_weight.transpose(1, 2)), dim=-1)

    def encode_images(self, e: torch.Tensor) -> torch.Tensor:
        """g~(e) for every head: image embeddings ``[..., d_model]`` -> L2-normalised ``[n, ..., k]``."""
        n, k, d_model = self.g_weight.shape
        flat = e.reshape(-1, d_model)
        projected = (self.g_weight.reshape(n * k, d_model) @ flat.T).view(n, k, flat.shape[0]).transpose(1, 2)
        projected = projected + self.g_bias[:, None, :]
        return F.normalize(projected, dim=-1).reshape(n, *e.shape[:-1], k)

    def _check_head_output(self, head_output: Any) -> None:
        shape = tuple(head_output.shape)
        if len(shape) != 4 or shape[1:] != (self.n_layers, self.n_heads, self.head_dim):
            raise UserInputError(
                f"head outputs must be [S, {self.n_layers}, {self.n_heads}, {self.head_dim}] for these "
                f"probes, got {shape}"
            )

    def _blocks(self, device: str | torch.device) -> Iterator[tuple[slice, WriterProbes]]:
        for start in range(0, len(self.heads), HEAD_BLOCK):
            block = slice(start, start + HEAD_BLOCK)
            yield block, self.with_tensors([p.detach()[block].to(device) for p in self.parameters()], self.heads[block])

    @torch.no_grad()
    def in_context_scores(
        self, head_output: Any, candidates: InContextCandidates, rows: Sequence[int] | None = None, device: str = "cpu"
    ) -> torch.Tensor:
        """Each probe's score of each sample's own candidate images (App. E.2, App. H voting B).

        Args:
            head_output: ``[S, L, H, d_h]`` head outputs at the readout position.
            candidates: the N_s images of each of the S samples (or of ``rows``).
            rows: optional sample indices into ``head_output`` to score; ``candidates`` then has
                one row per entry of ``rows``.
            device: where to compute.

        Returns:
            float32 CPU ``[S', n, N_max]``; padding entries are ``-inf``.

        Raises:
            UserInputError: head outputs not ``[S, L, H, d_h]`` of these probes, or candidates not
                ``[S', N_max, d_model]``.
        """
        self._check_head_output(head_output)
        rows = np.arange(head_output.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
        if candidates.embeds.shape[0] != rows.size or candidates.embeds.shape[2] != self.d_model:
            raise UserInputError(
                f"candidates are {tuple(candidates.embeds.shape)} for {rows.size} samples; expected "
                f"[{rows.size}, N_max, {self.d_model}]"
            )
        out = torch.empty(rows.size, len(self.heads), candidates.embeds.shape[1])
        for start in range(0, rows.size, ROW_BLOCK):
            part = slice(start, start + ROW_BLOCK)
            embeds = candidates.embeds[part].to(device)
            for block, probes in self._blocks(device):
                queries = probes.encode_heads(head_slice(head_output, rows[part], probes.heads).to(device))
                scores = torch.einsum("nsk,nsik->sni", queries, probes.encode_images(embeds))
                out[part, block] = scores.cpu()
        return out.masked_fill(~candidates.mask[:, None, :], float("-inf"))

    def in_context_votes(
        self, head_output: Any, candidates: InContextCandidates, rows: Sequence[int] | None = None, device: str = "cpu"
    ) -> np.ndarray:
        """Each head's vote ``argmax_i <f~(o), g~(e_i)>`` over the sample's own images (App. H, B).

        Returns int64 ``[S', L, H]``; heads without a probe here get ``NO_VOTE`` (-1). Ties go to
        the smallest image index. Arguments as in :meth:`in_context_scores`.
        """
        scores = self.in_context_scores(head_output, candidates, rows, device)
        votes = np.full((scores.shape[0], self.n_layers * self.n_heads), NO_VOTE, dtype=np.int64)
        votes[:, self.heads] = scores.argmax(dim=-1).numpy()
        return votes.reshape(scores.shape[0], self.n_layers, self.n_heads)

    @torch.no_grad()
    def pool_picks(
        self,
        head_output: Any,
        target_embeds: Any,
        image_ids: Sequence[Any] | None = None,
        rows: Sequence[int] | None = None,
        device: str = "cpu",
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Each head's pick in the pool of the scored samples' distinct target images (§5.1).

        Args:
            head_output: ``[S, L, H, d_h]``.
            target_embeds: ``[S, d_model]`` target image embedding of each sample.
            image_ids: optional ``[S]`` image ids; see :func:`image_pool`.
            rows: optional sample indices to score (default all).
            device: where to compute.

        Returns:
            ``(picks, target_index, pool_size)``: int64 ``[R, L, H]`` pool index each head ranks
            first for each scored row (-1 for heads without a probe here), int64 ``[R]`` the
            target's pool index, and P. Writer R@1 is ``mean(picks == target_index)`` over rows;
            chance is ``1 / P``.
        """
        self._check_head_output(head_output)
        rows = np.arange(head_output.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
        embeds = as_cpu_tensor(target_embeds)[torch.as_tensor(rows)]
        ids = None if image_ids is None else [image_ids[int(r)] for r in rows]
        pool, target_index = image_pool(embeds, ids)
        pool = pool.to(device)
        picks = np.full((rows.size, self.n_layers * self.n_heads), -1, dtype=np.int64)
        for _, probes in self._blocks(device):
            queries = probes.encode_heads(head_slice(head_output, rows, probes.heads).to(device))
            picks[:, probes.heads] = pool_picks(queries, probes.encode_images(pool)).cpu().numpy().T
        return picks.reshape(rows.size, self.n_layers, self.n_heads), target_index, int(pool.shape[0])

    def pool_r1(
        self,
        head_output: Any,
        target_embeds: Any,
        image_ids: Sequence[Any] | None = None,
        rows: Sequence[int] | None = None,
        device: str = "cpu",
    ) -> tuple[np.ndarray, int]:
        """Writer R@1 over the pool of the scored samples' distinct target images (§5.1).

        Arguments as :meth:`pool_picks`. Returns ``(r1, pool_size)``: float64 ``[L, H]`` (NaN for
        heads without a probe here) and P; chance is ``1 / P``.
        """
        picks, target_index, pool_size = self.pool_picks(head_output, target_embeds, image_ids, rows, device)
        r1 = (picks == target_index[:, None, None]).mean(axis=0, dtype=np.float64)
        r1[(picks < 0).all(axis=0)] = np.nan
        return r1, pool_size

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the probes to folder ``path`` (safetensors + JSON), atomically; return the path.

        Raises ``UserInputError`` if ``path`` exists and ``overwrite`` is False.
        """
        from icir_common import atomic_output_dir

        settings = {
            "format": FORMAT,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "head_dim": self.head_dim,
            "d_model": self.d_model,
            "proj_dim": self.proj_dim,
            "heads": self.head_names,
            "info": self.info,
        }
        tensors = {name: p.detach().cpu().contiguous() for name, p in zip(PARAMETER_NAMES, self.parameters())}
        with atomic_output_dir(path, overwrite=overwrite) as tmp:
            safetensors.torch.save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": FORMAT})
            (tmp / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> WriterProbes:
        """Read probes written by :meth:`save`.

        Raises ``UserInputError`` naming the folder when a file is missing or unreadable, the
        format is not ``writer-probes/1``, a setting is missing, or a tensor does not match the
        settings.
        """
        path = Path(path)
        weights, settings_path = path / WEIGHTS_FILE, path / SETTINGS_FILE
        for file in (weights, settings_path):
            if not file.is_file():
                raise UserInputError(f"{file} not found; point at a folder written by WriterProbes.save")
        try:
            settings = json.loads(settings_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserInputError(f"{settings_path} is not valid JSON ({err}); save the probes again") from err
        if not isinstance(settings, dict) or settings.get("format") != FORMAT:
            found = settings.get("format") if isinstance(settings, dict) else settings
            raise UserInputError(f"{settings_path}: format {found!r} is not {FORMAT!r}")
        missing = [key for key in _SETTINGS_KEYS if key not in settings]
        if missing:
            raise UserInputError(f"{settings_path} lacks {', '.join(missing)}; save the probes again")
        try:
            tensors = safetensors.torch.load_file(str(weights))
        except (safetensors.SafetensorError, OSError) as err:
            raise UserInputError(
                f"{weights} is not a readable safetensors file ({err}); save the probes again"
            ) from err
        missing = [name for name in PARAMETER_NAMES if name not in tensors]
        if missing:
            raise UserInputError(f"{weights} lacks tensors {missing}")
        for name in PARAMETER_NAMES:
            tensor = tensors[name]
            if not tensor.is_floating_point():
                raise UserInputError(f"{weights}: tensor {name} is {tensor.dtype}, not floating point; "
                                     "save the probes again")
            if not torch.isfinite(tensor).all():
                raise UserInputError(f"{weights}: tensor {name} holds NaN or infinite values; fit the probes again")
        heads = as_flat_indices(settings["heads"], settings["n_layers"], settings["n_heads"])
        try:
            probes = cls(heads, settings["n_layers"], settings["n_heads"],
                         *(tensors[name] for name in PARAMETER_NAMES), info=settings.get("info"))
        except UserInputError as err:
            raise UserInputError(f"{path}: {err}") from None
        dims = (probes.head_dim, probes.d_model, probes.proj_dim)
        if dims != (settings["head_dim"], settings["d_model"], settings["proj_dim"]):
            raise UserInputError(f"{path}: tensor dimensions {dims} do not match the settings file")
        return probes
