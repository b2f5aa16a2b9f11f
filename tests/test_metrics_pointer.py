"""pointer_r1 / pointer_votes (Eq. 2) against a brute-force loop, with ties and mixed N."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from harness.metrics import pointer_r1, pointer_votes
from icir_common import UserInputError


def brute_force_r1(scores, targets):
    """R@1 with explicit loops: the first image whose score equals the row maximum wins."""
    n_layers, n_heads = scores[0].shape[:2]
    hits = np.zeros((n_layers, n_heads))
    for sample, target in zip(scores, targets):
        for layer in range(n_layers):
            for head in range(n_heads):
                row = list(sample[layer, head])
                first_max = row.index(max(row))
                hits[layer, head] += first_max == target
    return hits / len(scores)


def test_matches_brute_force_with_ties_and_mixed_haystacks():
    rng = np.random.default_rng(0)
    n_layers, n_heads, n_positions = 3, 4, 2
    captures, per_position, targets = [], [], []
    for s in range(40):
        n_images = 5 if s % 2 else 6
        # few distinct values, so many rows have tied maxima
        pointer = rng.integers(0, 3, size=(n_positions, n_layers, n_heads, n_images)).astype(np.float32)
        captures.append(SimpleNamespace(pointer=torch.from_numpy(pointer)))
        per_position.append(pointer[1])
        targets.append(int(rng.integers(0, n_images)))
    r1, chance = pointer_r1(captures, targets, position=1)
    assert r1.dtype == np.float64 and r1.shape == (n_layers, n_heads)
    np.testing.assert_array_equal(r1, brute_force_r1(per_position, targets))
    assert chance == pytest.approx((1 / 5 + 1 / 6) / 2)  # .1833, the paper's ICIR-MCQ chance
    # bare [L, H, N] arrays give the same result
    bare_r1, _ = pointer_r1(per_position, targets)
    np.testing.assert_array_equal(bare_r1, r1)


def test_tie_goes_to_smallest_image_index():
    # one head; sample 0 ties images 0 and 1, sample 1 ties images 1 and 2
    scores = [np.array([[[0.4, 0.4, 0.2]]]), np.array([[[0.1, 0.45, 0.45]]])]
    np.testing.assert_array_equal(pointer_votes(scores), [[[0]], [[1]]])
    assert pointer_r1(scores, [0, 1])[0][0, 0] == 1.0
    assert pointer_r1(scores, [1, 2])[0][0, 0] == 0.0


def test_bad_input_is_named():
    good = np.zeros((2, 2, 5))
    with pytest.raises(UserInputError, match="sample 1: target image index 5"):
        pointer_r1([good, good], [0, 5])
    with pytest.raises(UserInputError, match="sample 1 has pointer scores for"):
        pointer_r1([good, np.zeros((3, 2, 5))], [0, 0])
    with pytest.raises(UserInputError, match="2 targets for 1 samples"):
        pointer_r1([good], [0, 1])
    with pytest.raises(UserInputError, match="shape"):
        pointer_votes([np.zeros((2, 5))])
    with pytest.raises(UserInputError, match="position index 3"):
        pointer_votes([SimpleNamespace(pointer=np.zeros((2, 2, 2, 5)))], position=3)
