"""Writer probes (§5.1, App. D, E.2): planted head, chunking invariance, save/load, brute-force scoring."""

import math
import re

import numpy as np
import pytest
import torch

from harness.metrics import (
    NO_VOTE,
    InContextCandidates,
    WriterProbeConfig,
    WriterProbes,
    fit_writer_probes,
    head_ranking,
)
from harness.metrics.probes import head_slice
from icir_common import UserInputError

N_LAYERS, N_HEADS, HEAD_DIM, D_MODEL = 2, 4, 16, 32
PLANTED = (1, 2)  # L01H02
SMALL = WriterProbeConfig(proj_dim=32, batch_size=64, epochs=10)


def planted_data(n_train=600, n_eval=200, seed=0):
    """Head L01H02 linearly encodes the target image embedding plus noise; other heads are noise.

    Every fifth sample reuses an earlier sample's target image (same id, same embedding), so
    the eval pool has fewer items than eval samples. Each sample has 5 or 6 in-context images.
    """
    rng = np.random.default_rng(seed)
    n = n_train + n_eval
    image_ids = []
    for s in range(n):
        image_ids.append(image_ids[int(rng.integers(max(0, s - 40), s))] if s % 5 == 4 else 1000 + s)
    embedding_of = {}
    targets = np.stack([embedding_of.setdefault(i, rng.standard_normal(D_MODEL)) for i in image_ids]).astype(np.float32)
    head_output = rng.standard_normal((n, N_LAYERS, N_HEADS, HEAD_DIM)).astype(np.float32)
    encoder = rng.standard_normal((D_MODEL, HEAD_DIM)) / np.sqrt(D_MODEL)
    head_output[:, PLANTED[0], PLANTED[1]] = targets @ encoder + 0.1 * rng.standard_normal((n, HEAD_DIM))
    lists, target_index = [], []
    for s in range(n):
        images = rng.standard_normal((5 + s % 2, D_MODEL)).astype(np.float32)
        index = int(rng.integers(0, len(images)))
        images[index] = targets[s]
        lists.append(images)
        target_index.append(index)
    split = ["train"] * n_train + ["eval"] * n_eval
    return head_output, targets, split, image_ids, InContextCandidates.from_list(lists, target_index)


@pytest.fixture(scope="module")
def data():
    return planted_data()


@pytest.fixture(scope="module")
def fit(data):
    head_output, targets, split, ids, candidates = data
    return fit_writer_probes(head_output, targets, split, image_ids=ids, candidates=candidates,
                             config=SMALL, progress=False)


def normalise(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def numpy_head(probes, head):
    """Head ``head``'s f~ and g~ as numpy functions (an independent re-implementation)."""
    i = list(probes.heads).index(head)
    fw, fb, gw, gb = (t[i].numpy().astype(np.float64) for t in probes.parameters())
    return (lambda o: normalise(o @ fw.T + fb)), (lambda e: normalise(e @ gw.T + gb))


def test_planted_head_is_the_top_writer_head(fit):
    flat = PLANTED[0] * N_HEADS + PLANTED[1]
    assert head_ranking(fit.r1)[0] == flat
    assert fit.pool_size < 200  # repeated eval images are one pool item
    assert fit.chance == pytest.approx(1 / fit.pool_size)
    assert fit.r1[PLANTED] > 0.5 > 50 * fit.chance
    others = np.delete(fit.r1.ravel(), flat)
    assert others.max() < 10 * fit.chance and others.mean() < 4 * fit.chance
    # in-context scoring (App. E.2): chance is mean(1/N) = (1/5 + 1/6) / 2
    assert fit.chance_in_context == pytest.approx((1 / 5 + 1 / 6) / 2)
    assert fit.r1_in_context[PLANTED] > 0.9
    assert np.delete(fit.r1_in_context.ravel(), flat).mean() < 2 * fit.chance_in_context
    assert fit.report_split == fit.selection_split == "eval" and "same 'eval' samples" in fit.note


def test_scores_match_a_numpy_reimplementation(data, fit):
    head_output, targets, split, ids, candidates = data
    rows = fit.report_rows
    # the pool is the distinct eval target images, in first-occurrence order
    pool_ids = list(dict.fromkeys(ids[r] for r in rows))
    assert fit.pool_size == len(pool_ids) < len(rows)
    pool = np.stack([targets[ids.index(i)] for i in pool_ids]).astype(np.float64)
    target_pool = np.array([pool_ids.index(ids[r]) for r in rows])
    np.testing.assert_array_equal(fit.report_target, target_pool)
    for layer, head in [PLANTED, (0, 0)]:
        f, g = numpy_head(fit.probes, layer * N_HEADS + head)
        queries = f(head_output[rows, layer, head].astype(np.float64))
        picks = (queries @ g(pool).T).argmax(axis=1)
        np.testing.assert_array_equal(fit.report_picks[:, layer, head], picks)
        assert fit.r1[layer, head] == pytest.approx((picks == target_pool).mean())
        votes = [np.argmax(g(candidates.embeds[r, : candidates.n_images[r]].numpy().astype(np.float64)) @ queries[j])
                 for j, r in enumerate(rows)]
        in_context = fit.probes.in_context_votes(head_output, candidates.rows(rows), rows=rows)
        np.testing.assert_array_equal(in_context[:, layer, head], votes)
        targets_in_context = candidates.target_index[rows].numpy()
        assert fit.r1_in_context[layer, head] == pytest.approx(np.mean(np.array(votes) == targets_in_context))


def test_chunking_does_not_change_the_fit():
    head_output, targets, split, ids, candidates = planted_data(n_train=200, n_eval=80, seed=1)
    config = WriterProbeConfig(proj_dim=32, batch_size=64, epochs=3, in_context_negatives=True)

    def run(**chunking):
        return fit_writer_probes(head_output, targets, split, image_ids=ids, candidates=candidates,
                                 config=config, progress=False, **chunking)

    with pytest.raises(UserInputError, match="below the") as error:
        run(memory_budget_bytes=1000)
    one_head_budget = int(re.search(r"the (\d+) bytes", str(error.value)).group(1))
    reference = run()
    assert reference.heads_per_chunk == N_LAYERS * N_HEADS
    for chunked in (run(memory_budget_bytes=one_head_budget), run(heads_per_chunk=3)):
        assert chunked.heads_per_chunk in (1, 3)
        np.testing.assert_array_equal(chunked.r1, reference.r1)
        np.testing.assert_array_equal(chunked.best_epoch, reference.best_epoch)
        np.testing.assert_array_equal(chunked.r1_in_context, reference.r1_in_context)
        # A multi-threaded BLAS may block a batched product differently by batch count (seen with 16
        # threads): weights then agree to float rounding, not bit for bit.
        for a, b in zip(chunked.probes.parameters(), reference.probes.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    reseeded = fit_writer_probes(head_output, targets, split, config=WriterProbeConfig(proj_dim=32, epochs=1, seed=1),
                                 progress=False)
    assert not torch.equal(reseeded.probes.g_weight, reference.probes.g_weight)


def reference_single_head_fit(x, targets, split, init, config):
    """One head fit the textbook way (Eq. 5, App. D): two ``nn.Linear`` probes, InfoNCE over the
    in-batch targets, ``torch.optim.Adam``, the best epoch by pool R@1 on the eval samples."""
    f, g = torch.nn.Linear(x.shape[1], config.proj_dim), torch.nn.Linear(targets.shape[1], config.proj_dim)
    with torch.no_grad():
        for module, weight, bias in ((f, init.f_weight[0], init.f_bias[0]), (g, init.g_weight[0], init.g_bias[0])):
            module.weight.copy_(weight)
            module.bias.copy_(bias)
    optimizer = torch.optim.Adam([*f.parameters(), *g.parameters()], lr=config.lr)
    train = torch.tensor([i for i, label in enumerate(split) if label == "train"])
    evaluation = torch.tensor([i for i, label in enumerate(split) if label == "eval"])
    order = torch.Generator().manual_seed(config.seed)
    best_r1, best = -1.0, None
    for _ in range(config.epochs):
        permutation = torch.randperm(train.numel(), generator=order)
        for begin in range(0, train.numel(), config.batch_size):
            batch = train[permutation[begin : begin + config.batch_size]]
            queries = torch.nn.functional.normalize(f(x[batch]), dim=-1)
            keys = torch.nn.functional.normalize(g(targets[batch]), dim=-1)
            loss = torch.nn.functional.cross_entropy(queries @ keys.T / config.temperature, torch.arange(batch.numel()))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            scores = torch.nn.functional.normalize(f(x[evaluation]), dim=-1) @ torch.nn.functional.normalize(
                g(targets[evaluation]), dim=-1).T
            r1 = (scores.argmax(dim=1) == torch.arange(evaluation.numel())).double().mean().item()
        if r1 > best_r1:
            best_r1, best = r1, [p.detach().clone() for p in (f.weight, f.bias, g.weight, g.bias)]
    return best_r1, best


def test_batched_fit_equals_a_textbook_single_head_fit():
    head_output, targets, split, _, _ = planted_data(n_train=160, n_eval=60, seed=4)
    config = WriterProbeConfig(proj_dim=16, batch_size=48, epochs=3, seed=2)
    fit = fit_writer_probes(head_output, targets, split, config=config, progress=False)
    for layer, head in [PLANTED, (0, 3)]:
        flat = layer * N_HEADS + head
        init = WriterProbes.initialise([flat], N_LAYERS, N_HEADS, HEAD_DIM, D_MODEL, config.proj_dim, config.seed)
        r1, weights = reference_single_head_fit(torch.from_numpy(head_output[:, layer, head]),
                                                torch.from_numpy(targets), split, init, config)
        assert fit.r1[layer, head] == pytest.approx(r1)
        for batched, reference in zip(fit.probes.subset([flat]).parameters(), weights):
            torch.testing.assert_close(batched[0], reference, atol=2e-5, rtol=1e-4)


def test_save_load_round_trip_scores_identically(tmp_path, data, fit):
    head_output, targets, split, ids, candidates = data
    folder = fit.probes.save(tmp_path / "probes")
    loaded = WriterProbes.load(folder)
    assert loaded.head_names == fit.probes.head_names and loaded.info == fit.probes.info
    assert loaded.info["writer_r1"]["L01H02"] == fit.r1[PLANTED]
    for a, b in zip(loaded.parameters(), fit.probes.parameters()):
        assert torch.equal(a, b)
    r1, pool_size = loaded.pool_r1(head_output, targets, ids, rows=fit.report_rows)
    np.testing.assert_array_equal(r1, fit.r1)
    assert pool_size == fit.pool_size
    # new samples (as VHs would bring): each head votes among the sample's own images
    new_output, _, _, _, new_candidates = planted_data(n_train=30, n_eval=10, seed=5)
    votes = fit.probes.in_context_votes(new_output, new_candidates)
    np.testing.assert_array_equal(loaded.in_context_votes(new_output, new_candidates), votes)
    # a subset keeps only the chosen heads; the others cast no vote
    WriterProbes.save(fit.probes.subset(["L01H02", "L00H00"]), tmp_path / "top2")
    top2 = WriterProbes.load(tmp_path / "top2")
    top2_votes = top2.in_context_votes(new_output, new_candidates)
    np.testing.assert_array_equal(top2_votes[:, 1, 2], votes[:, 1, 2])
    np.testing.assert_array_equal(top2_votes[:, 0, 0], votes[:, 0, 0])
    assert (top2_votes[:, 0, 1] == NO_VOTE).all()
    with pytest.raises(UserInputError, match="already exists"):
        fit.probes.save(folder)
    with pytest.raises(UserInputError, match="not found"):
        WriterProbes.load(tmp_path / "missing")
    (folder / "writer_probes.json").write_text("{broken")
    with pytest.raises(UserInputError, match=r"writer_probes\.json is not valid JSON"):
        WriterProbes.load(folder)
    (folder / "writer_probes.json").write_text('{"format": "writer-probes/1", "n_layers": 2}')
    with pytest.raises(UserInputError, match=r"writer_probes\.json lacks n_heads, head_dim"):
        WriterProbes.load(folder)
    damaged = tmp_path / "damaged"
    fit.probes.save(damaged)
    (damaged / "writer_probes.safetensors").write_bytes(b"\x10not safetensors")
    with pytest.raises(UserInputError, match=r"writer_probes\.safetensors is not a readable safetensors file"):
        WriterProbes.load(damaged)


def test_held_out_test_part():
    head_output, targets, split, ids, _ = planted_data(n_train=200, n_eval=80, seed=2)
    config = WriterProbeConfig(proj_dim=32, batch_size=64, epochs=2, test_fraction=0.25)
    fit = fit_writer_probes(head_output, targets, split, image_ids=ids, config=config, progress=False)
    assert (fit.selection_split, fit.report_split, fit.n_selection, fit.n_report) == ("eval", "test", 60, 20)
    assert set(fit.report_rows) <= set(range(200, 280)) and "held-out 'test'" in fit.note
    r1, pool_size = fit.probes.pool_r1(head_output, targets, ids, rows=fit.report_rows)
    np.testing.assert_array_equal(r1, fit.r1)
    assert fit.chance == 1 / pool_size


def test_bad_input_is_rejected(data):
    head_output, targets, split, ids, candidates = data
    with pytest.raises(UserInputError, match="labels must be"):
        fit_writer_probes(head_output, targets, ["train", "test"] * 400, progress=False)
    with pytest.raises(UserInputError, match="in_context_negatives"):
        fit_writer_probes(head_output, targets, split, config=WriterProbeConfig(in_context_negatives=True))
    with pytest.raises(UserInputError, match="target_embeds must be"):
        fit_writer_probes(head_output, targets[:10], split)
    with pytest.raises(UserInputError, match=r"epochs must be at least 1, got 0; temperature must be positive"):
        WriterProbeConfig(epochs=0, temperature=0.0)
    with pytest.raises(UserInputError, match=r"test_fraction must be in \[0, 1\), got 1.0"):
        WriterProbeConfig(test_fraction=1.0)
    with pytest.raises(UserInputError, match="target index 3 is outside its 2"):
        InContextCandidates.from_list([np.zeros((2, 4))], [3])
    with pytest.raises(UserInputError, match="padding after"):
        InContextCandidates(torch.zeros(1, 3, 4), torch.tensor([[True, False, True]]), torch.tensor([0]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu():
    head_output, targets, split, ids, _ = planted_data(n_train=200, n_eval=80, seed=3)
    config = WriterProbeConfig(proj_dim=32, batch_size=64, epochs=3)
    cpu = fit_writer_probes(head_output, targets, split, image_ids=ids, config=config, progress=False)
    cuda = fit_writer_probes(head_output, targets, split, image_ids=ids, config=config, device="cuda", progress=False)
    for a, b in zip(cpu.probes.parameters(), cuda.probes.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(cpu.r1, cuda.r1, atol=2 / 80)


@pytest.mark.parametrize("heads", [np.arange(2, 6), np.array([5, 1, 6]), np.arange(0)])
@pytest.mark.parametrize("as_torch", [False, True])
def test_head_slice_matches_a_loop(heads, as_torch):
    head_output = np.random.default_rng(3).standard_normal((7, 2, 4, 5), dtype=np.float32)
    rows = np.array([6, 0, 3])
    expected = np.array([[head_output[r, h // 4, h % 4] for r in rows] for h in heads], np.float32).reshape(-1, 3, 5)
    source = torch.from_numpy(head_output) if as_torch else head_output
    np.testing.assert_array_equal(head_slice(source, rows, heads).numpy(), expected)


def test_settings_from_model_arguments(tmp_path):
    """``writer_config=FILE`` and ``writer_<field>`` model arguments (the file first, then single settings)."""
    import json

    (tmp_path / "w.json").write_text(json.dumps({"epochs": 7, "batch_size": 128, "seed": 3}))
    config = WriterProbeConfig.from_arguments(
        {"writer_config": str(tmp_path / "w.json"), "writer_seed": "5", "writer_in_context_negatives": "true",
         "writer_probes": "ignored", "pretrained": "ignored"})
    assert (config.epochs, config.batch_size, config.seed, config.in_context_negatives) == (7, 128, 5, True)
    learned = WriterProbeConfig.from_arguments({"writer_temperature": "learned"})
    assert learned.learn_temperature and learned.temperature == 0.07
    for bad, message in (({"writer_epochs": "2.5"}, "not of type int"), ({"writer_depth": 2}, "unknown writer-probe"),
                         ({"writer_config": str(tmp_path / "none.json")}, "not a readable JSON file"),
                         ({"writer_lr": "-1"}, "lr must be positive")):
        with pytest.raises(UserInputError, match=message):
            WriterProbeConfig.from_arguments(bad)


def test_learned_temperature_trains_a_scale_per_head():
    """With ``learn_temperature`` each head's logit scale moves from 1/0.07; the fixed path is unchanged."""
    from harness.metrics.writer import _ChunkTrainer

    torch.manual_seed(0)
    probes = WriterProbes.initialise(np.arange(3), 1, 3, 4, 6, proj_dim=5, seed=0)
    x, targets = torch.randn(3, 8, 4), torch.randn(8, 6)
    fixed = _ChunkTrainer(probes, WriterProbeConfig(temperature=0.07), "cpu")
    learned = _ChunkTrainer(probes, WriterProbeConfig(temperature=0.07, learn_temperature=True, lr=0.05), "cpu")
    for trainer in (fixed, learned):
        for _ in range(5):
            trainer.step(x, targets, None, None, None)
    assert torch.equal(fixed.log_scale, torch.full((3,), -math.log(0.07)))
    assert not torch.allclose(learned.log_scale, fixed.log_scale) and learned.log_scale.shape == (3,)
