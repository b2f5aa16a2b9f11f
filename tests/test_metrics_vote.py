"""Top-K majority vote (App. H): hand-worked ties, K = 1 equals the single head, missing votes."""

import numpy as np
import pytest

from harness.metrics import DEFAULT_KS, NO_VOTE, majority_vote, top_k_predictions, vote_r1_curve
from icir_common import UserInputError


def test_majority_vote_breaks_ties_by_smallest_image_index():
    votes = [[2, 1, 1, 2], [3, 3, 0, 5], [4, 0, 4, 0], [7, 7, 7, 1]]
    # row 0: 1 and 2 tie (2 votes each) -> 1; row 2: 0 and 4 tie -> 0
    np.testing.assert_array_equal(majority_vote(votes), [1, 3, 0, 7])
    np.testing.assert_array_equal(majority_vote([[4], [0]]), [4, 0])


def test_top_k_predictions_follow_the_ranking():
    # 3 samples, one layer of 3 heads; ranking L00H02, L00H00, L00H01
    head_votes = np.array([[[0, 1, 2]], [[1, 1, 0]], [[2, 0, 0]]])
    ranking = ["L00H02", "L00H00", "L00H01"]
    np.testing.assert_array_equal(top_k_predictions(head_votes, ranking, 1), [2, 0, 0])
    # K=2 uses heads 2 and 0: votes (2,0) tie -> 0; (0,1) tie -> 0; (0,2) tie -> 0
    np.testing.assert_array_equal(top_k_predictions(head_votes, ranking, 2), [0, 0, 0])
    # K=3: (2,0,1) three-way tie -> 0; (0,1,1) -> 1; (0,2,0) -> 0
    np.testing.assert_array_equal(top_k_predictions(head_votes, [2, 0, 1], 3), [0, 1, 0])
    curve = vote_r1_curve(head_votes, [2, 1, 0], ranking, ks=(1, 2, 3))
    assert curve == {1: pytest.approx(2 / 3), 2: pytest.approx(1 / 3), 3: pytest.approx(2 / 3)}


def test_k1_equals_the_single_best_head_and_default_ks():
    rng = np.random.default_rng(1)
    head_votes = rng.integers(0, 10, size=(200, 6, 8))
    targets = rng.integers(0, 10, size=200)
    ranking = rng.permutation(48)
    curve = vote_r1_curve(head_votes, targets, ranking)
    assert list(curve) == list(DEFAULT_KS)
    top = ranking[0]
    assert curve[1] == pytest.approx(np.mean(head_votes[:, top // 8, top % 8] == targets))


def test_missing_votes_and_bad_k_are_errors():
    head_votes = np.array([[[0, NO_VOTE]], [[1, NO_VOTE]]])
    assert vote_r1_curve(head_votes, [0, 1], [0, 1], ks=(1,)) == {1: 1.0}
    with pytest.raises(UserInputError, match="L00H01 is among the top 2 but cast no vote"):
        vote_r1_curve(head_votes, [0, 1], [0, 1], ks=(2,))
    with pytest.raises(UserInputError, match="K = 3"):
        top_k_predictions(head_votes, [0, 1], 3)
