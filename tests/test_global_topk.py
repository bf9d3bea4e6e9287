"""Global top-k selection and the plan value."""

import json

import numpy as np
import pytest

from edgeprune import HeadScores, PruningPlan, plan_global_topk
from edgeprune.errors import UserInputError


def _scores():
    return HeadScores(np.array([[0.9, 0.1, 0.5], [0.2, 0.3, 0.05]]), "test", 10)


def test_removes_the_globally_least_important_heads():
    plan = plan_global_topk(_scores(), remove=3)
    assert plan.kept_heads == [[0, 2], [1]]
    assert plan.removed_heads == {0: [1], 1: [0, 2]} and plan.heads_removed == 3


def test_keeps_the_minimum_per_layer_even_when_its_heads_score_lowest():
    plan = plan_global_topk(_scores(), remove=4, min_heads_per_layer=1)
    assert [len(k) for k in plan.kept_heads] == [1, 1]
    assert plan.kept_heads == [[0], [1]]


def test_impossible_requests_name_the_allowed_range():
    with pytest.raises(UserInputError, match="between 0 and 4"):
        plan_global_topk(_scores(), remove=5)
    with pytest.raises(UserInputError, match="at least one"):
        PruningPlan(num_heads=[2], kept_heads=[[]])


def test_plan_round_trips_through_json():
    plan = plan_global_topk(_scores(), remove=2)
    assert PruningPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
