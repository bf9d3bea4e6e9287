"""BERT adapter: structural removal equals gating, parameter counts are exact, metadata stays true."""

import copy

import pytest
import torch

from edgeprune import PruningPlan, apply_plan, prune_heads
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
from edgeprune.pruning import predicted_parameter_count
from tests.conftest import tiny_bert

REMOVE = {0: [1, 3], 1: [0], 2: [0, 1, 2]}


def _inputs(batch=3, length=16, vocab=30522):
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(1000, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 10:] = 0
    return ids, mask


def _gated_output(model, remove, ids, mask):
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    gates = torch.ones(len(blocks), max(b.num_heads for b in blocks))
    for layer, heads in remove.items():
        gates[layer, heads] = 0.0
    with torch.no_grad(), adapter.gate_heads(model, gates):
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def test_structural_removal_equals_dense_model_with_heads_gated_to_zero():
    dense = tiny_bert()
    ids, mask = _inputs()
    expected = _gated_output(dense, REMOVE, ids, mask)
    pruned = prune_heads(copy.deepcopy(dense), REMOVE)
    with torch.no_grad():
        actual = pruned(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    # and the gating is not a no-op: removing those heads changes the output
    with torch.no_grad():
        assert not torch.allclose(dense(input_ids=ids, attention_mask=mask).last_hidden_state, actual, atol=1e-3)


def test_parameter_count_is_exactly_the_predicted_one():
    dense = tiny_bert()
    hidden, head_size = 32, 8
    per_head = 3 * (hidden * head_size + head_size) + hidden * head_size
    removed = sum(len(h) for h in REMOVE.values())
    plan = PruningPlan(num_heads=[4, 4, 4], kept_heads=[[0, 2], [1, 2, 3], [3]])
    before = sum(p.numel() for p in dense.parameters())
    assert predicted_parameter_count(dense, plan) == before - removed * per_head
    pruned = apply_plan(copy.deepcopy(dense), plan)
    assert sum(p.numel() for p in pruned.parameters()) == before - removed * per_head


def test_module_attributes_and_config_follow_the_surgery():
    model = prune_heads(tiny_bert(), REMOVE)
    attention = model.encoder.layer[2].attention.self
    assert attention.num_attention_heads == 1 and attention.all_head_size == 8
    assert attention.query.weight.shape == (8, 32)
    assert model.encoder.layer[2].attention.output.dense.weight.shape == (32, 8)
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 2], [1, 2, 3], [3]]
    blocks = adapter_for(model).attention_blocks(model)
    assert [b.num_heads for b in blocks] == [2, 3, 1]
    assert blocks[0].original_heads == (0, 2)


def test_pruning_twice_uses_the_dense_head_indices():
    ids, mask = _inputs()
    once = prune_heads(tiny_bert(), {0: [1, 3]})
    twice = prune_heads(once, {0: [2]})  # dense head 2, now at position 1
    assert getattr(twice.config, KEPT_HEADS_CONFIG_KEY)[0] == [0]
    direct = prune_heads(tiny_bert(), {0: [1, 2, 3]})
    with torch.no_grad():
        torch.testing.assert_close(twice(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   direct(input_ids=ids, attention_mask=mask).last_hidden_state)


@pytest.mark.parametrize(
    ("remove", "message"),
    [({0: [0, 1, 2, 3]}, "at least one"), ({5: [0]}, "layers 0..2"), ({0: [9]}, "not in the model")],
)
def test_bad_removals_are_rejected_with_what_is_allowed(remove, message):
    with pytest.raises((UserInputError, ValueError), match=message):
        prune_heads(tiny_bert(), remove)


def test_unsupported_model_names_the_supported_families():
    with pytest.raises(UserInputError, match="supported families: bert"):
        adapter_for(torch.nn.Sequential(torch.nn.Linear(4, 4)))


def test_removing_a_layer_equals_a_model_built_without_it():
    model = tiny_bert()
    ids, mask = _inputs()
    state = {k.replace("encoder.layer.2.", "encoder.layer.1."): v for k, v in model.state_dict().items()
             if not k.startswith("encoder.layer.1.")}
    reference = tiny_bert(num_hidden_layers=2)
    reference.load_state_dict(state)
    adapter = adapter_for(model)
    adapter.remove_layers(model, [1])
    assert model.config.num_hidden_layers == 2 and len(model.encoder.layer) == 2
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   reference(input_ids=ids, attention_mask=mask).last_hidden_state)
    with pytest.raises(ValueError, match="not all"):
        adapter.remove_layers(model, [0, 1])


def test_removing_a_layer_keeps_the_kept_heads_record_aligned():
    model = prune_heads(tiny_bert(), {2: [0]})
    adapter_for(model).remove_layers(model, [1])
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 1, 2, 3], [1, 2, 3]]


def test_head_weights_are_the_slices_the_surgery_removes():
    model = tiny_bert()
    adapter = adapter_for(model)
    views = adapter.head_weights(model, 0, 1)
    assert [tuple(v.shape) for v in views] == [(8, 32)] * 3 + [(32, 8)] + [(8,)] * 3
    removed = sum(v.numel() for v in views)
    assert removed == adapter.head_parameter_count(model, 0)
