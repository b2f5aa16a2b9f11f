"""Writer criterion: fit every head's image retriever at once and report writer R@1 (paper §5.1, App. D).

For each head (l, h), probes f (d_h -> k) and g (d_model -> k) are trained jointly with InfoNCE
(in-batch negatives, optionally the sample's in-context distractor images as extra negatives),
Adam at learning rate 1e-3, batch 256 (128 for Qwen3-VL-8B, App. D), on the ``train`` samples of
``probe_split``. The loss runs one way, head -> image: each head output's softmax over the batch's
images, as writer R@1 ranks images for a head output (there is no image -> head term). After every
epoch each head's writer R@1 is measured on the ``eval`` samples and the head keeps its best
epoch (checkpoint selection). Writer R@1 is the fraction of samples whose target image ranks
first among the pool of all their distinct target images (chance 1/pool).

All heads train as one batched module (a head axis in every weight; one batched matmul per
projection per step), in chunks of heads sized to a memory budget. A head's initial weights
come from ``(seed, head index)`` and all heads share one batch order per epoch, so every chunking
gives the same per-head R@1; weights agree to float rounding (a multi-threaded BLAS or a CUDA
kernel may be picked per batch of heads, so bit equality holds only on some machines).

Selection split: as in the paper (App. D; docs/protocol.md) checkpoints are selected on the same
``eval`` samples that writer R@1 is reported on. ``test_fraction > 0`` instead holds out a seeded
part of the ``eval`` samples as a ``test`` part for reporting.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from harness.metrics.candidates import InContextCandidates, as_cpu_tensor
from harness.metrics.probes import ROW_BLOCK, WriterProbes, head_slice, image_pool, pool_picks
from harness.metrics.rankings import grid_by_name
from icir_common import UserInputError

SPLIT_LABELS = ("train", "eval")
FLOAT_BYTES = 4
CPU_MEMORY_BUDGET = 2 * 1024**3


@dataclass(frozen=True)
class WriterProbeConfig:
    """Probe and training settings (App. D where the paper states them).

    Attributes:
        proj_dim: shared retrieval-space width k (256, App. D).
        lr: Adam learning rate (1e-3, App. D).
        batch_size: training batch (256, App. D; App. D's 128 for Qwen3-VL-8B is the protocol's
            setting for that model, `harness.protocol.protocol_writer_config`).
        epochs: training epochs, each followed by checkpoint selection (not stated in the paper).
        temperature: InfoNCE temperature on the cosine scores (CLIP's initial 0.07; not stated in
            the paper); fixed, or the starting value when `learn_temperature`.
        learn_temperature: train one temperature per head with the probe (CLIP's learned logit
            scale, kept at most 100); R@1 ranks by the cosine, so it only shapes training.
        seed: seeds each head's initial weights and the shared batch order.
        in_context_negatives: add each training sample's own distractor images as negatives
            (needs ``candidates``).
        test_fraction: fraction of the ``eval`` samples held out as a ``test`` part for reporting
            (0 = report on the selection split, as the paper does).
    """

    proj_dim: int = 256
    lr: float = 1e-3
    batch_size: int = 256
    epochs: int = 30
    temperature: float = 0.07
    seed: int = 0
    in_context_negatives: bool = False
    test_fraction: float = 0.0
    learn_temperature: bool = False

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any], defaults: WriterProbeConfig | None = None) -> WriterProbeConfig:
        """The settings of model arguments: ``writer_config=FILE`` (a JSON object of these fields)
        and ``writer_<field>=value`` (which override the file); ``writer_temperature=learned``
        learns it from 0.07. Other arguments are ignored. A field neither sets keeps its value in
        `defaults` (the protocol's settings for the run's model, `harness.protocol.protocol_writer_config`;
        the class defaults when None).

        Raises:
            UserInputError: an unreadable file, an unknown field, or a value of the wrong type.
        """
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        if arguments.get("writer_config"):
            values.update(_read_config_file(str(arguments["writer_config"]), fields))
        for key, value in arguments.items():
            name = key.removeprefix("writer_")
            if not key.startswith("writer_") or key in ("writer_config", "writer_probes"):
                continue
            if name == "temperature" and str(value).lower() == "learned":
                values.update(learn_temperature=True, temperature=cls.temperature)
                continue
            if name not in fields:
                raise UserInputError(f"unknown writer-probe setting {key!r}; known: writer_{', writer_'.join(fields)}")
            values[name] = _typed(key, value, fields[name])
        return dataclasses.replace(defaults or cls(), **values)

    def __post_init__(self) -> None:
        """Raise ``UserInputError`` for settings no fit can run with."""
        problems = [
            f"{name} must be at least 1, got {getattr(self, name)}"
            for name in ("proj_dim", "batch_size", "epochs")
            if getattr(self, name) < 1
        ]
        problems += [f"{name} must be positive, got {getattr(self, name)}"
                     for name in ("lr", "temperature") if not getattr(self, name) > 0]
        if not 0 <= self.test_fraction < 1:
            problems.append(f"test_fraction must be in [0, 1), got {self.test_fraction}")
        if problems:
            raise UserInputError("bad writer-probe settings: " + "; ".join(problems))


def _typed(key: str, value: Any, kind: str) -> Any:
    """`value` (a model argument, maybe a string) as the field type ``int``/``float``/``bool``."""
    try:
        if kind == "bool":
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                return value.lower() in ("true", "1")
            return bool(value)
        if kind == "int" and (isinstance(value, float) or (isinstance(value, str) and not value.strip().isdigit())):
            raise ValueError(value)
        return {"int": int, "float": float}[kind](value)
    except (TypeError, ValueError):
        raise UserInputError(f"writer-probe setting {key}={value!r} is not of type {kind}") from None


def _read_config_file(path: str, fields: Mapping[str, str]) -> dict[str, Any]:
    try:
        loaded = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise UserInputError(f"writer_config {path}: not a readable JSON file ({err})") from None
    if not isinstance(loaded, dict):
        raise UserInputError(f"writer_config {path}: expected a JSON object of writer-probe settings")
    unknown = sorted(set(loaded) - set(fields))
    if unknown:
        raise UserInputError(f"writer_config {path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    return {name: _typed(f"{path}:{name}", value, fields[name]) for name, value in loaded.items()}


@dataclass
class WriterFit:
    """Result of :func:`fit_writer_probes`; grids are ``[L, H]``.

    Attributes:
        r1: writer R@1 of each head on the report split (pool scoring, §5.1).
        chance: 1 / pool_size.
        pool_size: distinct target images of the report split.
        selection_r1: R@1 on the selection split at the selected epoch (equals ``r1`` when the
            two splits are the same).
        best_epoch: the selected epoch of each head (1-based).
        r1_in_context: R@1 when each report sample's own N_s images are ranked (App. E.2), or
            None without candidates; ``chance_in_context`` is mean(1/N_s).
        probes: the selected probes of every head.
        selection_split, report_split: "eval" and "eval" (paper) or "eval" and "test".
        n_train, n_selection, n_report: sample counts.
        report_rows: int64 sample indices of the report split (for rescoring with the probes).
        report_picks: int32 ``[n_report, L, H]`` pool index each head's probe ranks first for
            each report row; ``report_target`` int64 ``[n_report]`` the target's pool index.
            ``r1 == mean(report_picks == report_target)`` over rows: the per-document writer record.
        heads_per_chunk: how many heads were trained at once.
    """

    r1: np.ndarray
    chance: float
    pool_size: int
    selection_r1: np.ndarray
    best_epoch: np.ndarray
    r1_in_context: np.ndarray | None
    chance_in_context: float | None
    probes: WriterProbes
    config: WriterProbeConfig
    selection_split: str
    report_split: str
    n_train: int
    n_selection: int
    n_report: int
    report_rows: np.ndarray
    report_picks: np.ndarray
    report_target: np.ndarray
    heads_per_chunk: int

    @property
    def note(self) -> str:
        """How checkpoint selection relates to the reported split, for reports."""
        if self.selection_split == self.report_split:
            return (
                f"checkpoints selected on the same '{self.report_split}' samples that writer R@1 is "
                "reported on, as in the paper (App. D); WriterProbeConfig(test_fraction=...) holds out a test part"
            )
        return (
            f"checkpoints selected on '{self.selection_split}', "
            f"writer R@1 reported on held-out '{self.report_split}'"
        )

    def to_json(self) -> dict:
        """A JSON-ready summary with ``LxxHyy``-keyed grids (probe weights are saved separately)."""
        return {
            "writer_r1": grid_by_name(self.r1),
            "chance": self.chance,
            "pool_size": self.pool_size,
            "selection_r1": grid_by_name(self.selection_r1),
            "best_epoch": {k: int(v) for k, v in grid_by_name(self.best_epoch).items()},
            "writer_r1_in_context": None if self.r1_in_context is None else grid_by_name(self.r1_in_context),
            "chance_in_context": self.chance_in_context,
            "selection_split": self.selection_split,
            "report_split": self.report_split,
            "n_train": self.n_train,
            "n_selection": self.n_selection,
            "n_report": self.n_report,
            "heads_per_chunk": self.heads_per_chunk,
            "config": dataclasses.asdict(self.config),
            "note": self.note,
        }


@dataclass(frozen=True)
class _Split:
    """Sample rows of each role: training, checkpoint selection, and the reported R@1."""

    train: np.ndarray
    selection: np.ndarray
    report: np.ndarray
    report_name: str


def _split_rows(probe_split: Sequence[str], n_samples: int, config: WriterProbeConfig) -> _Split:
    labels = np.asarray(probe_split, dtype=object)
    if labels.shape != (n_samples,):
        raise UserInputError(f"probe_split has {labels.size} labels for {n_samples} samples; give one per sample")
    unknown = sorted(set(labels.tolist()) - set(SPLIT_LABELS))
    if unknown:
        raise UserInputError(f"probe_split labels must be {SPLIT_LABELS}, found {unknown}")
    train, evaluation = np.flatnonzero(labels == "train"), np.flatnonzero(labels == "eval")
    if train.size == 0 or evaluation.size == 0:
        raise UserInputError(f"writer probes need 'train' and 'eval' samples; got {train.size} and {evaluation.size}")
    if config.test_fraction == 0:
        return _Split(train, evaluation, evaluation, "eval")
    n_test = round(config.test_fraction * evaluation.size)
    if not 1 <= n_test < evaluation.size:
        raise UserInputError(
            f"test_fraction {config.test_fraction} of {evaluation.size} eval samples leaves no test "
            "or no selection part"
        )
    held_out = np.random.default_rng([config.seed, 2]).permutation(evaluation)[:n_test]
    test = np.sort(held_out)
    return _Split(train, np.setdiff1d(evaluation, test), test, "test")


def _id_codes(image_ids: Sequence[Any] | None, rows: np.ndarray) -> torch.Tensor | None:
    """Small integer codes of the image ids of ``rows`` (equal ids, equal codes), or None."""
    if image_ids is None:
        return None
    codes: dict[Any, int] = {}
    return torch.tensor([codes.setdefault(image_ids[int(r)], len(codes)) for r in rows], dtype=torch.int64)


def _heads_per_chunk(
    budget: int, n_total: int, head_dim: int, d_model: int, split: _Split, config: WriterProbeConfig,
    pool_size: int, n_candidates: int,
) -> int:
    """How many heads fit in ``budget`` bytes at once (float32 estimate, see comments)."""
    k, batch = config.proj_dim, config.batch_size
    n_params = k * (head_dim + d_model + 2)
    negatives = batch + (n_candidates if config.in_context_negatives else 0)
    scored = split.selection.size + (split.report.size if split.report_name != "eval" else 0)
    per_head = (
        5 * n_params  # weights, gradients, two Adam moments, best checkpoint
        + (split.train.size + scored) * head_dim  # head outputs
        + 6 * batch * k + 3 * batch * negatives  # projections, logits, their gradients
        + (4 * batch * n_candidates * k if config.in_context_negatives else 0)
        + 2 * (split.selection.size + pool_size) * k + 2 * ROW_BLOCK * pool_size  # scoring
    ) * FLOAT_BYTES
    fixed = (split.train.size + pool_size) * d_model * FLOAT_BYTES
    if config.in_context_negatives:
        fixed += split.train.size * n_candidates * d_model * FLOAT_BYTES
    if budget < fixed + per_head:
        raise UserInputError(
            f"memory budget {budget} bytes is below the {fixed + per_head} bytes needed to fit one head; raise it"
        )
    return int(min(n_total, (budget - fixed) // per_head))


def _memory_budget(budget: int | None, device: str) -> int:
    """``budget``, or the default: half of a CUDA device's free memory, else 2 GiB."""
    if budget is not None:
        return budget
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return free // 2
    return CPU_MEMORY_BUDGET


def _check_inputs(head_output: Any, target_embeds: torch.Tensor, image_ids, candidates) -> None:
    if len(head_output.shape) != 4:
        raise UserInputError(f"head_output must be [S, L, H, d_h], got shape {tuple(head_output.shape)}")
    n_samples = head_output.shape[0]
    if target_embeds.ndim != 2 or target_embeds.shape[0] != n_samples:
        raise UserInputError(
            f"target_embeds must be [S, d_model] with S = {n_samples}, got {tuple(target_embeds.shape)}"
        )
    if image_ids is not None and len(image_ids) != n_samples:
        raise UserInputError(f"got {len(image_ids)} image ids for {n_samples} samples")
    if candidates is not None and tuple(candidates.embeds.shape[::2]) != (n_samples, target_embeds.shape[1]):
        raise UserInputError(
            f"candidates must be [S, N_max, d_model] = [{n_samples}, N_max, {target_embeds.shape[1]}], "
            f"got {tuple(candidates.embeds.shape)}"
        )


class _ChunkTrainer:
    """Trains the probes of one chunk of heads and keeps each head's best epoch."""

    def __init__(self, probes: WriterProbes, config: WriterProbeConfig, device: str) -> None:
        self.config, self.device = config, device
        self.probes = probes.to(device)
        for tensor in self.probes.parameters():
            tensor.requires_grad_(True)
        # The fused kernel is one elementwise pass per tensor: per head, as chunk-independent as the unfused one.
        fused = torch.device(device).type in ("cpu", "cuda")
        n = len(probes.heads)
        # Per-head log inverse temperature (CLIP's logit scale); fixed unless it is learned.
        self.log_scale = torch.full((n,), -math.log(config.temperature), device=device,
                                    requires_grad=config.learn_temperature)
        trained = self.probes.parameters() + ([self.log_scale] if config.learn_temperature else [])
        self.optimizer = torch.optim.Adam(trained, lr=config.lr, fused=fused)
        self.best = [p.detach().clone() for p in self.probes.parameters()]
        self.best_r1 = torch.full((n,), -1.0, dtype=torch.float64, device=device)
        self.best_epoch = torch.zeros(n, dtype=torch.int64, device=device)
        self.best_picks: torch.Tensor | None = None  # [n, S_selection] at each head's best epoch

    def step(self, x: torch.Tensor, targets: torch.Tensor, duplicate: torch.Tensor | None,
             candidates: torch.Tensor | None, negative_mask: torch.Tensor | None) -> None:
        """One Adam step on InfoNCE, summed over heads (each head's gradient is its own loss's).

        ``x [n, B, d_h]``, ``targets [B, d_model]``; ``duplicate [B, B]`` marks other samples with
        the same target image (not negatives); ``candidates [B, N, d_model]`` with
        ``negative_mask [B, N]`` (True for a distractor) add in-context negatives.
        """
        queries = self.probes.encode_heads(x)
        logits = queries @ self.probes.encode_images(targets).transpose(1, 2)
        if duplicate is not None:
            logits = logits.masked_fill(duplicate, float("-inf"))
        if candidates is not None:
            extra = torch.einsum("nbk,nbik->nbi", queries, self.probes.encode_images(candidates))
            logits = torch.cat([logits, extra.masked_fill(~negative_mask, float("-inf"))], dim=-1)
        n, batch = logits.shape[:2]
        labels = torch.arange(batch, device=logits.device).repeat(n)
        if self.config.learn_temperature:
            scale = self.log_scale.clamp(max=math.log(100.0)).exp()[:, None, None]
            loss = F.cross_entropy((logits * scale).reshape(n * batch, -1), labels, reduction="none")
        else:
            loss = F.cross_entropy(logits.reshape(n * batch, -1) / self.config.temperature, labels, reduction="none")
        self.optimizer.zero_grad(set_to_none=True)
        loss.view(n, batch).mean(dim=1).sum().backward()
        self.optimizer.step()

    @torch.no_grad()
    def select(self, epoch: int, x: torch.Tensor, pool: torch.Tensor, target_index: torch.Tensor) -> None:
        """Score the selection split; heads that improved keep this epoch's weights and picks."""
        picks = self.picks(self.probes, x, pool)
        r1 = (picks == target_index).sum(dim=1).double() / x.shape[1]
        improved = r1 > self.best_r1
        for best, current in zip(self.best, self.probes.parameters()):
            best[improved] = current.detach()[improved]
        if self.best_picks is None:
            self.best_picks = picks.clone()
        self.best_picks[improved] = picks[improved]
        self.best_r1 = torch.where(improved, r1, self.best_r1)
        self.best_epoch[improved] = epoch

    @staticmethod
    @torch.no_grad()
    def picks(probes: WriterProbes, x: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
        """Pool index ``[n, S]`` (int64) each head's probe ranks first for head outputs ``x [n, S, d_h]``."""
        return pool_picks(probes.encode_heads(x), probes.encode_images(pool))

    def best_probes(self) -> WriterProbes:
        """The selected weights as CPU probes."""
        return self.probes.with_tensors([b.cpu() for b in self.best])


@dataclass(frozen=True)
class _TrainingData:
    """The tensors every chunk of heads trains and is selected on (all on the training device)."""

    split: _Split
    selection_pool: torch.Tensor
    selection_index: torch.Tensor
    report_pool: torch.Tensor
    report_index: torch.Tensor
    train_targets: torch.Tensor
    codes: torch.Tensor | None
    train_candidates: torch.Tensor | None
    negative_mask: torch.Tensor | None


def _prepare(target_embeds: torch.Tensor, split: _Split, image_ids, candidates, config: WriterProbeConfig,
             device: str) -> _TrainingData:
    def pool_of(rows):
        ids = None if image_ids is None else [image_ids[int(r)] for r in rows]
        pool, index = image_pool(target_embeds[torch.as_tensor(rows)], ids)
        return pool.to(device), torch.as_tensor(index, device=device)

    train_candidates = negative_mask = None
    if config.in_context_negatives:
        train_part = candidates.rows(split.train)
        train_candidates = train_part.embeds.to(device)
        is_target = torch.nn.functional.one_hot(train_part.target_index, train_part.mask.shape[1]).bool()
        negative_mask = (train_part.mask & ~is_target).to(device)
    return _TrainingData(
        split, *pool_of(split.selection), *pool_of(split.report),
        target_embeds[torch.as_tensor(split.train)].to(device), _id_codes(image_ids, split.train),
        train_candidates, negative_mask,
    )


@dataclass(frozen=True)
class _ChunkResult:
    probes: WriterProbes
    selection_r1: torch.Tensor
    best_epoch: torch.Tensor
    report_picks: torch.Tensor  # int64 [n, S_report]


def _train_chunk(trainer: _ChunkTrainer, head_output: Any, heads: np.ndarray, data: _TrainingData,
                 bar) -> _ChunkResult:
    """Train one chunk of heads for every epoch, selecting each head's best epoch on the selection split."""
    config, device, split = trainer.config, trainer.device, data.split
    x_train = head_slice(head_output, split.train, heads).to(device)
    x_selection = head_slice(head_output, split.selection, heads).to(device)
    order = torch.Generator().manual_seed(config.seed)  # one batch order shared by all heads
    for epoch in range(1, config.epochs + 1):
        permutation = torch.randperm(split.train.size, generator=order)
        for begin in range(0, split.train.size, config.batch_size):
            batch = permutation[begin : begin + config.batch_size]
            duplicate = None
            if data.codes is not None:
                same = data.codes[batch][:, None] == data.codes[batch][None, :]
                duplicate = (same & ~torch.eye(batch.numel(), dtype=torch.bool)).to(device)
            on_device = batch.to(device)
            trainer.step(
                x_train[:, on_device], data.train_targets[on_device], duplicate,
                None if data.train_candidates is None else data.train_candidates[on_device],
                None if data.negative_mask is None else data.negative_mask[on_device],
            )
        trainer.select(epoch, x_selection, data.selection_pool, data.selection_index)
        bar.update()
    best = trainer.best_probes()
    if split.report_name == "eval":
        report_picks = trainer.best_picks.cpu()
    else:
        x_report = head_slice(head_output, split.report, heads).to(device)
        report_picks = _ChunkTrainer.picks(best.to(device), x_report, data.report_pool).cpu()
    return _ChunkResult(best, trainer.best_r1.cpu(), trainer.best_epoch.cpu(), report_picks)


def _in_context_r1(probes: WriterProbes, head_output: Any, candidates, report_rows: np.ndarray, device: str):
    """``(R@1 [L, H], chance)`` when each report sample's own images are ranked (App. E.2), or (None, None)."""
    if candidates is None:
        return None, None
    report_candidates = candidates.rows(report_rows)
    votes = probes.in_context_votes(head_output, report_candidates, rows=report_rows, device=device)
    r1 = (votes == report_candidates.target_index.numpy()[:, None, None]).mean(axis=0)
    return r1, float((1.0 / report_candidates.n_images.double()).mean())


def _writer_fit(results: Sequence[_ChunkResult], data: _TrainingData, probes: WriterProbes,
                config: WriterProbeConfig, chunk: int, in_context: tuple) -> WriterFit:
    """The `WriterFit` of every chunk's result, grids ``[L, H]`` in flat head order."""

    def grid(field: str) -> np.ndarray:
        return torch.cat([getattr(r, field) for r in results]).numpy().reshape(probes.n_layers, probes.n_heads)

    picks = torch.cat([r.report_picks for r in results]).T.numpy().reshape(-1, probes.n_layers, probes.n_heads)
    target = data.report_index.cpu().numpy()
    return WriterFit(
        r1=(picks == target[:, None, None]).mean(axis=0, dtype=np.float64),
        chance=1.0 / data.report_pool.shape[0],
        pool_size=int(data.report_pool.shape[0]),
        selection_r1=grid("selection_r1").astype(np.float64),
        best_epoch=grid("best_epoch"),
        r1_in_context=in_context[0],
        chance_in_context=in_context[1],
        probes=probes,
        config=config,
        selection_split="eval",
        report_split=data.split.report_name,
        n_train=int(data.split.train.size),
        n_selection=int(data.split.selection.size),
        n_report=int(data.split.report.size),
        report_rows=data.split.report,
        report_picks=picks.astype(np.int32),
        report_target=target.astype(np.int64),
        heads_per_chunk=chunk,
    )


def fit_writer_probes(
    head_output: Any,
    target_embeds: Any,
    probe_split: Sequence[str],
    *,
    image_ids: Sequence[Any] | None = None,
    candidates: InContextCandidates | None = None,
    config: WriterProbeConfig = WriterProbeConfig(),
    device: str = "cpu",
    memory_budget_bytes: int | None = None,
    heads_per_chunk: int | None = None,
    progress: bool = True,
) -> WriterFit:
    """Fit a writer probe for every head and report per-head writer R@1 (§5.1, App. D, App. E.2).

    Args:
        head_output: float ``[S, L, H, d_h]`` head outputs at one readout position (Eq. 4);
            numpy array, memmap or torch tensor (only the slices of one chunk are copied).
        target_embeds: float ``[S, d_model]`` target image embedding of each sample (§5.1).
        probe_split: ``[S]`` labels "train" / "eval" (the dataset's ``probe_split`` column).
        image_ids: optional ``[S]`` target image ids: samples sharing an image share one pool
            item (see :func:`harness.metrics.probes.image_pool`) and are not each other's
            in-batch negatives.
        candidates: optional in-context images of every sample (all S rows): enables the
            in-context R@1 of App. E.2 and ``config.in_context_negatives``.
        config: probe and training settings.
        device: torch device for training ("cpu", "cuda", ...).
        memory_budget_bytes: bound on the training memory (a float32 estimate); heads are
            trained in chunks of as many heads as fit. Default: half the free memory of a
            CUDA ``device`` (``torch.cuda.mem_get_info``), else 2 GiB.
        heads_per_chunk: train this many heads at once instead (overrides the budget).
        progress: show a tqdm bar over chunks x epochs.

    Returns:
        :class:`WriterFit`.

    Raises:
        UserInputError: inconsistent shapes, unknown split labels, no train or eval samples,
            in-context negatives without candidates, or a budget too small for one head.
    """
    target_embeds = as_cpu_tensor(target_embeds)
    _check_inputs(head_output, target_embeds, image_ids, candidates)
    if config.in_context_negatives and candidates is None:
        raise UserInputError("in_context_negatives needs the in-context candidates of every sample")
    n_samples, n_layers, n_heads, head_dim = head_output.shape
    n_total, d_model = n_layers * n_heads, target_embeds.shape[1]
    data = _prepare(target_embeds, _split_rows(probe_split, n_samples, config), image_ids, candidates, config, device)
    n_candidates = 0 if candidates is None else candidates.embeds.shape[1]
    chunk = heads_per_chunk or _heads_per_chunk(
        _memory_budget(memory_budget_bytes, device), n_total, head_dim, d_model, data.split, config,
        max(data.selection_pool.shape[0], data.report_pool.shape[0]), n_candidates,
    )
    chunk = min(chunk, n_total)
    results = []
    bar = tqdm(total=-(-n_total // chunk) * config.epochs, desc="writer probes", disable=not progress)
    for start in range(0, n_total, chunk):
        heads = np.arange(start, min(start + chunk, n_total))
        initial = WriterProbes.initialise(heads, n_layers, n_heads, head_dim, d_model, config.proj_dim, config.seed)
        results.append(_train_chunk(_ChunkTrainer(initial, config, device), head_output, heads, data, bar))
    bar.close()
    weights = (torch.cat([r.probes.parameters()[i] for r in results]) for i in range(4))
    probes = WriterProbes(np.arange(n_total), n_layers, n_heads, *weights)
    in_context = _in_context_r1(probes, head_output, candidates, data.split.report, device)
    fit = _writer_fit(results, data, probes, config, chunk, in_context)
    probes.info = {key: value for key, value in fit.to_json().items() if key not in ("selection_r1", "best_epoch")}
    return fit
