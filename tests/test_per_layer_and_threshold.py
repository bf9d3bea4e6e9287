"""Per-layer and threshold selection, and the constraints they share."""

import numpy as np
import pytest

from edgeprune import HeadScores
from edgeprune.errors import UserInputError
from edgeprune.pruning import Constraints, plan_global_topk, plan_per_layer, plan_threshold

SCORES = HeadScores(np.array([[0.9, 0.1, 0.5, 0.4], [0.2, 0.3, 0.05, 0.6]]), "test", 10)


def test_per_layer_removes_the_lowest_in_each_layer():
    assert plan_per_layer(SCORES, 2).kept_heads == [[0, 2], [1, 3]]
    assert plan_per_layer(SCORES, [1, 3]).kept_heads == [[0, 2, 3], [3]]
    with pytest.raises(UserInputError, match="layer 1: can remove 0..3"):
        plan_per_layer(SCORES, [0, 4])
    with pytest.raises(UserInputError, match="2 layers"):
        plan_per_layer(SCORES, [1, 1, 1])


def test_threshold_absolute_and_quantile():
    assert plan_threshold(SCORES, threshold=0.35).kept_heads == [[0, 2, 3], [3]]
    by_quantile = plan_threshold(SCORES, quantile=0.5)  # median 0.35: the same line
    assert by_quantile.kept_heads == [[0, 2, 3], [3]] and "quantile=0.5" in by_quantile.strategy
    # everything below the line: the layer still keeps its best head
    assert plan_threshold(SCORES, threshold=10).kept_heads == [[0], [3]]
    with pytest.raises(UserInputError, match="exactly one"):
        plan_threshold(SCORES)
    with pytest.raises(UserInputError, match="within 0..1"):
        plan_threshold(SCORES, quantile=2)


def test_heads_multiple_rounds_kept_counts_up():
    plan = plan_per_layer(SCORES, 3, Constraints(heads_multiple=2))
    assert [len(k) for k in plan.kept_heads] == [2, 2] and plan.kept_heads == [[0, 2], [1, 3]]
    global_plan = plan_global_topk(SCORES, 3, constraints=Constraints(heads_multiple=2))
    assert all(len(k) % 2 == 0 for k in global_plan.kept_heads)


def test_minimum_heads_per_layer():
    plan = plan_global_topk(SCORES, 4, constraints=Constraints(min_heads_per_layer=2))
    assert [len(k) for k in plan.kept_heads] == [2, 2]
    with pytest.raises(UserInputError, match="at least 1"):
        Constraints(min_heads_per_layer=0)


def test_already_removed_heads_stay_removed():
    partial = HeadScores(np.array([[0.9, np.nan, 0.5, 0.4], [0.2, 0.3, np.nan, 0.6]]), "test", 10)
    plan = plan_global_topk(partial, 2)
    assert plan.kept_heads == [[0, 2, 3], [3]] and plan.num_heads == [4, 4]
