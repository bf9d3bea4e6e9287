"""Selection strategies honour grouped-query attention: every plan they make applies to a Llama."""

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeprune import HeadScores
from edgeprune.models import adapter_for
from edgeprune.models.llama import gqa_removal_is_valid
from edgeprune.pruning import (
    Constraints,
    apply_plan,
    nearest_reachable,
    plan_global_topk,
    plan_per_layer,
    reachable_head_plans,
)


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=96, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=6, num_key_value_heads=2, attn_implementation="eager")
    return LlamaForCausalLM(config).eval()


LLAMA = _llama()


def test_constraints_read_the_kv_layout():
    constraints = Constraints.for_model(LLAMA)
    assert constraints.kv_heads == (2, 2, 2) and "kv_heads=[2, 2, 2]" in constraints.describe()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 15))
def test_global_topk_plans_are_valid_gqa_removals(seed, remove):
    scores = HeadScores(np.random.default_rng(seed).random((3, 6)), "random", 0)
    plan = plan_global_topk(scores, remove, constraints=Constraints.for_model(LLAMA))
    model = apply_plan(copy.deepcopy(LLAMA), plan)
    blocks = adapter_for(model).attention_blocks(model)
    for block in blocks:
        assert block.num_heads % block.num_kv_heads == 0
    with torch.no_grad():
        assert torch.isfinite(model(torch.arange(10)[None]).logits).all()


def test_per_layer_snaps_to_whole_groups_or_equal_shares():
    scores = HeadScores(np.array([[0.1, 0.2, 0.3, 0.9, 0.8, 0.7]] * 3), "hand", 0)
    plan = plan_per_layer(scores, 3, Constraints.for_model(LLAMA))
    assert plan.kept_heads == [[3, 4, 5]] * 3  # the weaker KV group goes whole
    plan = plan_per_layer(scores, 2, Constraints.for_model(LLAMA))
    assert all(len(k) == 4 for k in plan.kept_heads)  # one head from each group


@pytest.mark.parametrize("seed", range(4))
def test_reachable_plans_remove_exactly_their_key(seed):
    scores = HeadScores(np.random.default_rng(seed).random((3, 6)), "random", 0)
    grouped = Constraints(kv_heads=(3, 3, 3))  # 6 query heads in 3 groups of 2
    plans = reachable_head_plans(scores, grouped)
    assert 0 in plans and 0 < len(plans) < 16  # 15 removable heads, not every count reachable in groups of 2
    for count, plan in plans.items():
        assert plan.heads_removed == count
        assert all(gqa_removal_is_valid(6, 3, heads) is None for heads in plan.removed_heads.values())
    assert nearest_reachable(plans, 7) in plans
    dense = reachable_head_plans(scores, Constraints())  # without groups: every count, global top-k's own plan
    assert sorted(dense) == list(range(16))
    assert all(dense[n].kept_heads == plan_global_topk(scores, n).kept_heads for n in range(16))
