"""Structured FFN-neuron removal on a tiny BERT: equal to zeroing, exact parameter counts, config kept true."""

import copy

import numpy as np
import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.pruning.ffn import (
    INTERMEDIATE_SIZES_CONFIG_KEY,
    intermediate_sizes,
    neuron_parameter_count,
    plan_neurons,
    remove_neurons,
    score_neurons,
    zero_neurons,
)
from tests.conftest import tiny_bert


def _inputs():
    generator = torch.Generator().manual_seed(4)
    ids = torch.randint(1000, 30522, (3, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    return ids, mask


def _parameters(model):
    return sum(p.numel() for p in model.parameters())


def test_removing_neurons_equals_zeroing_them_with_exact_parameter_counts():
    model = tiny_bert()
    reference = zero_neurons(copy.deepcopy(model), remove := {0: [1, 5, 63], 2: list(range(0, 64, 2))})
    before = _parameters(model)
    per_neuron = neuron_parameter_count(model, 0)
    assert per_neuron == 32 + 1 + 32
    remove_neurons(model, remove)
    assert _parameters(model) == before - 35 * per_neuron
    assert intermediate_sizes(model) == [61, 64, 32]
    ids, mask = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   reference(input_ids=ids, attention_mask=mask).last_hidden_state)
    layer = model.encoder.layer[2]
    assert layer.intermediate.dense.weight.shape == (32, 32) and layer.output.dense.weight.shape == (32, 32)
    assert layer.intermediate.dense.out_features == 32 and layer.output.dense.in_features == 32
    # widths differ: recorded per layer, intermediate_size is the widest
    assert getattr(model.config, INTERMEDIATE_SIZES_CONFIG_KEY) == [61, 64, 32]
    assert model.config.intermediate_size == 64


def test_equal_widths_keep_intermediate_size_true_and_drop_the_record():
    model = tiny_bert()
    remove_neurons(model, {0: [0], 1: [1], 2: [2, 3]})
    assert hasattr(model.config, INTERMEDIATE_SIZES_CONFIG_KEY)
    remove_neurons(model, {0: [0], 1: [0]})
    assert intermediate_sizes(model) == [62, 62, 62]
    assert model.config.intermediate_size == 62
    assert not hasattr(model.config, INTERMEDIATE_SIZES_CONFIG_KEY)


def test_weight_norm_scores_find_a_dead_neuron_and_plans_keep_widths_equal():
    model = tiny_bert()
    with torch.no_grad():
        model.encoder.layer[1].output.dense.weight[:, 9] = 0
    scores = score_neurons(model)
    assert [len(s) for s in scores] == [64, 64, 64]
    assert scores[1][9] == 0 and np.argmin(scores[1]) == 9
    plan = plan_neurons(scores, 0.25)
    assert sorted(plan) == [0, 1, 2] and all(len(v) == 16 for v in plan.values()) and 9 in plan[1]
    remove_neurons(model, plan)
    assert model.config.intermediate_size == 48


def test_activation_scores_ignore_padding_and_work_through_a_classifier():
    encoder = tiny_bert()
    model = EncoderClassifier(encoder, torch.nn.Linear(32, 3))
    ids, mask = _inputs()
    scores = score_neurons(model, [{"input_ids": ids, "attention_mask": mask}], "activation")
    # padding tokens changed to anything else give the same scores
    other = ids.clone()
    other[0, 7:] = 1234
    again = score_neurons(model, [{"input_ids": other, "attention_mask": mask}], "activation")
    for a, b in zip(scores, again, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert all((s >= 0).all() and s.shape == (64,) for s in scores)


def test_a_plan_on_group_multiples_keeps_widths_a_4bit_recipe_stores_in_groups():
    rng = np.random.default_rng(0)
    wide, narrow, odd = rng.random(1536), rng.random(64), rng.random(1000)
    plan = plan_neurons([wide, narrow, odd], 0.3, multiple=32)
    # 1536 × 0.7 = 1075.2 keeps 1088 (34 groups of 32: the nearest multiple); a layer under four groups wide, or
    # of a width 32 does not divide, keeps the fraction's own count
    assert [len(plan[layer]) for layer in range(3)] == [1536 - 1088, 19, 300]
    assert plan[0] == sorted(np.argsort(wide, kind="stable")[:1536 - 1088].tolist())  # still the lowest scores
    assert plan_neurons([wide], 0.25, multiple=32) == plan_neurons([wide], 0.25)  # 1152 is already on them
    assert plan_neurons([wide], 0.01, multiple=32) == {}  # 1521 rounds back to the whole layer


def test_global_plan_respects_the_minimum_per_layer():
    scores = [np.array([0.0, 0.1, 0.2]), np.array([5.0, 6.0, 7.0])]
    assert plan_neurons(scores, 0.5, per_layer=False, min_per_layer=1) == {0: [0, 1], 1: [0]}


def test_a_scored_plan_spreads_the_fraction_over_layers_by_score_on_group_multiples():
    rng = np.random.default_rng(1)
    quiet, loud, narrow = rng.random(512) * 0.1, rng.random(512) + 1.0, rng.random(40) * 0.05
    scores = [quiet, loud, narrow]
    plan = plan_neurons(scores, 0.5, per_layer=False, multiple=32)
    total = sum(map(len, plan.values()))
    assert 532 <= total < 532 + 32  # half of 1064 neurons, to the first group that reaches it
    # the quiet layer goes first, down to one group; the narrow one (not on the multiple) neuron by neuron, keeping
    # one; the loud one gives the rest in groups
    assert len(plan[0]) == 512 - 32 and len(plan[2]) == 39
    assert len(plan[1]) % 32 == 0 and 512 - len(plan[1]) >= 32
    assert plan[0] == sorted(np.argsort(quiet, kind="stable")[:480].tolist())  # each layer's lowest scores
    assert len(plan_neurons(scores, 0.5, per_layer=False, multiple=32, min_per_layer=128)[0]) == 512 - 128
    for layer in (0, 1):
        assert (len(scores[layer]) - len(plan.get(layer, []))) % 32 == 0
    # a larger fraction removes a superset of a smaller one's neurons (the search assumes nested structures)
    smaller = plan_neurons(scores, 0.25, per_layer=False, multiple=32)
    assert all(set(ids) <= set(plan[layer]) for layer, ids in smaller.items())
    assert plan_neurons(scores, 0.0, per_layer=False, multiple=32) == {}
    with pytest.raises(UserInputError, match="fraction must be in"):
        plan_neurons(scores, 1.0, per_layer=False)


def test_equal_scores_give_the_uniform_plan_on_group_multiples():
    """With every layer's scores alike, the scored plan takes as much from each layer as the uniform one."""
    base = np.random.default_rng(2).random(256)
    scored = plan_neurons([base, base.copy()], 0.25, per_layer=False, multiple=32)
    uniform = plan_neurons([base, base.copy()], 0.25, multiple=32)
    assert scored == uniform


def test_the_cli_offers_the_fit_options_ffn_allocations():
    from edgeprune.cli.fit import DEFAULT_FFN_ALLOCATION, FFN_ALLOCATIONS
    from edgeprune.search.options import FFN_ALLOCATIONS as ALLOCATIONS
    from edgeprune.search.options import FitOptions

    assert FFN_ALLOCATIONS == ALLOCATIONS and DEFAULT_FFN_ALLOCATION == FitOptions.ffn_allocation
    with pytest.raises(UserInputError, match="ffn_allocation must be uniform or scored"):
        FitOptions(ffn_allocation="even")


def test_errors_are_clear():
    model = tiny_bert()
    with pytest.raises(UserInputError, match="cannot remove"):
        remove_neurons(model, {0: [64]})
    with pytest.raises(UserInputError, match="keep at least one"):
        remove_neurons(model, {0: list(range(64))})
    with pytest.raises(UserInputError, match="unknown neuron criterion"):
        score_neurons(model, criterion="taylor")
    with pytest.raises(UserInputError, match="layer 3 does not exist; the model has layers 0..2"):
        remove_neurons(model, {3: [0]})
    bare = torch.nn.Sequential(torch.nn.MultiheadAttention(32, 4))  # attention without any feed-forward block
    with pytest.raises(UserInputError, match=r"^layer 0 \(MultiheadAttention\) has no feed-forward block"):
        remove_neurons(bare, {0: [0]})


def test_equal_width_removal_saves_and_loads_with_edgeprune(tmp_path):
    from edgeprune.models.io import load, save

    model = tiny_bert()
    remove_neurons(model, plan_neurons(score_neurons(model), 0.5))
    loaded = load(save(model, tmp_path / "ffn"))
    assert intermediate_sizes(loaded) == [32, 32, 32]
    ids, mask = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   model(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_a_constant_neuron_has_no_fluctuation_and_folding_its_mean_removes_it_exactly():
    from edgeprune.pruning.ffn import neuron_statistics

    model = tiny_bert()
    ids, mask = _inputs()
    layer = model.encoder.layer[1]
    with torch.no_grad():  # neuron 7 of layer 1 outputs gelu(0.8) whatever the token
        layer.intermediate.dense.weight[7] = 0
        layer.intermediate.dense.bias[7] = 0.8
    statistics = neuron_statistics(model, [{"input_ids": ids, "attention_mask": mask}])
    assert statistics.fluctuation[1][7] == pytest.approx(0, abs=1e-9)
    assert statistics.fluctuation[1].min() == statistics.fluctuation[1][7] < np.median(statistics.fluctuation[1])
    assert float(statistics.means[1][7]) == pytest.approx(float(torch.nn.functional.gelu(torch.tensor(0.8))))
    np.testing.assert_allclose(score_neurons(model, [{"input_ids": ids, "attention_mask": mask}], "fluctuation")[1],
                               statistics.fluctuation[1])
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask).last_hidden_state
        folded = remove_neurons(copy.deepcopy(model), {1: [7]}, means=statistics.means)
        torch.testing.assert_close(folded(input_ids=ids, attention_mask=mask).last_hidden_state, before)
        dropped = remove_neurons(copy.deepcopy(model), {1: [7]})
        assert not torch.allclose(dropped(input_ids=ids, attention_mask=mask).last_hidden_state, before, atol=1e-4)
