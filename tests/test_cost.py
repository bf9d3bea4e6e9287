"""Parameter and FLOP counts after pruning are exactly what the plan predicts; random plans keep shapes."""

import copy

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeprune.pruning import PruningPlan, apply_plan, measure_flops, predicted_flops, predicted_parameter_count
from tests.conftest import tiny_bert

INPUTS = {"input_ids": torch.randint(1000, 30522, (2, 16), generator=torch.Generator().manual_seed(0)),
          "attention_mask": torch.ones(2, 16, dtype=torch.long)}
DENSE = tiny_bert()


@st.composite
def plans(draw):
    kept = [sorted(draw(st.sets(st.integers(0, 3), min_size=1, max_size=4))) for _ in range(3)]
    return PruningPlan([4, 4, 4], kept)


@settings(max_examples=25, deadline=None)
@given(plans())
def test_random_plans_keep_shapes_and_counts_exact(plan):
    model = copy.deepcopy(DENSE)
    flops = predicted_flops(model, plan, INPUTS)
    params = predicted_parameter_count(model, plan)
    apply_plan(model, plan)
    with torch.no_grad():
        hidden = model(**INPUTS).last_hidden_state
    assert hidden.shape == (2, 16, 32) and torch.isfinite(hidden).all()
    assert sum(p.numel() for p in model.parameters()) == params
    assert measure_flops(model, INPUTS) == flops


def test_removing_half_the_heads_removes_the_attention_flops_of_half_the_heads():
    plan = PruningPlan([4, 4, 4], [[0, 1]] * 3)
    dense = measure_flops(DENSE, INPUTS)
    per_head = 2 * 2 * 16 * (4 * 32 * 8) + 4 * 2 * 16 * 16 * 8  # projections + scores and context
    assert predicted_flops(DENSE, plan, INPUTS) == dense - 6 * per_head
