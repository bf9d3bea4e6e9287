"""DistilBERT adapter: structural removal equals gating, parameter counts are exact, config and modules stay true."""

import copy

import pytest
import torch

import edgeprune
from edgeprune import PruningPlan, apply_plan, prune_heads
from edgeprune.models import adapter_for
from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
from edgeprune.models.bert import BertAdapter
from edgeprune.models.distilbert import DistilBertAdapter
from edgeprune.pruning import predicted_parameter_count
from tests.conftest import tiny_bert

REMOVE = {0: [1, 3], 1: [0], 2: [0, 1, 2]}
HIDDEN, HEAD_SIZE, VOCAB = 32, 8, 500


def tiny_distilbert(seed: int = 0, **overrides):
    from transformers import DistilBertConfig, DistilBertModel

    options = dict(vocab_size=VOCAB, dim=HIDDEN, n_layers=3, n_heads=4, hidden_dim=64, max_position_embeddings=64,
                   attn_implementation="eager")
    options.update(overrides)
    torch.manual_seed(seed)
    return DistilBertModel(DistilBertConfig(**options)).eval()


def _inputs(batch=3, length=12):
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(0, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 8:] = 0
    return ids, mask


def _run(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def _gated_output(model, remove, ids, mask):
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    gates = torch.ones(len(blocks), max(b.num_heads for b in blocks))
    for layer, heads in remove.items():
        gates[layer, heads] = 0.0
    with adapter.gate_heads(model, gates):
        return _run(model, ids, mask)


def test_the_adapter_claims_distilbert_and_only_distilbert():
    assert isinstance(adapter_for(tiny_distilbert()), DistilBertAdapter)
    assert not DistilBertAdapter.matches(tiny_bert())
    assert not BertAdapter.matches(tiny_distilbert())


def test_structural_removal_equals_dense_model_with_heads_gated_to_zero():
    dense = tiny_distilbert()
    ids, mask = _inputs()
    expected = _gated_output(dense, REMOVE, ids, mask)
    pruned = prune_heads(copy.deepcopy(dense), REMOVE)
    actual = _run(pruned, ids, mask)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(_run(dense, ids, mask), actual, atol=1e-3)


def test_parameter_count_is_exactly_the_predicted_one():
    dense = tiny_distilbert()
    per_head = 3 * (HIDDEN * HEAD_SIZE + HEAD_SIZE) + HIDDEN * HEAD_SIZE
    plan = PruningPlan(num_heads=[4, 4, 4], kept_heads=[[0, 2], [1, 2, 3], [3]])
    before = sum(p.numel() for p in dense.parameters())
    assert predicted_parameter_count(dense, plan) == before - 6 * per_head
    pruned = apply_plan(copy.deepcopy(dense), plan)
    assert sum(p.numel() for p in pruned.parameters()) == before - 6 * per_head


def test_module_attributes_and_config_follow_the_surgery():
    model = prune_heads(tiny_distilbert(), REMOVE)
    attention = model.transformer.layer[2].attention
    assert attention.n_heads == 1 and attention.attention_head_size == HEAD_SIZE
    assert attention.q_lin.weight.shape == attention.k_lin.weight.shape == attention.v_lin.weight.shape == (8, 32)
    assert attention.out_lin.weight.shape == (32, 8)
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 2], [1, 2, 3], [3]]
    assert model.config.n_heads == 4  # the dense architecture, which `load` rebuilds before cutting
    blocks = adapter_for(model).attention_blocks(model)
    assert [b.num_heads for b in blocks] == [2, 3, 1]
    assert [b.original_heads for b in blocks] == [(0, 2), (1, 2, 3), (3,)]
    assert {b.dense_heads for b in blocks} == {4}


def test_pruning_twice_uses_the_dense_head_indices():
    ids, mask = _inputs()
    twice = prune_heads(prune_heads(tiny_distilbert(), {0: [1, 3]}), {0: [2]})  # dense head 2, now at position 1
    assert getattr(twice.config, KEPT_HEADS_CONFIG_KEY)[0] == [0]
    direct = prune_heads(tiny_distilbert(), {0: [1, 2, 3]})
    torch.testing.assert_close(_run(twice, ids, mask), _run(direct, ids, mask))


def test_removing_a_layer_equals_a_model_built_without_it():
    model = prune_heads(tiny_distilbert(), {2: [0]})
    ids, mask = _inputs()
    state = {k.replace("transformer.layer.2.", "transformer.layer.1."): v for k, v in model.state_dict().items()
             if not k.startswith("transformer.layer.1.")}
    reference = prune_heads(tiny_distilbert(n_layers=2), {1: [0]})
    reference.load_state_dict(state)
    adapter = adapter_for(model)
    adapter.remove_layers(model, [1])
    assert model.config.n_layers == 2 and model.transformer.n_layers == 2 and len(model.transformer.layer) == 2
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 1, 2, 3], [1, 2, 3]]
    torch.testing.assert_close(_run(model, ids, mask), _run(reference, ids, mask))
    with pytest.raises(ValueError, match="not all"):
        adapter.remove_layers(model, [0, 1])


def test_head_weights_are_the_slices_the_surgery_removes():
    model = prune_heads(tiny_distilbert(), {0: [0]})
    adapter = adapter_for(model)
    views = adapter.head_weights(model, 0, 1)
    assert [tuple(v.shape) for v in views] == [(8, 32)] * 3 + [(32, 8)] + [(8,)] * 3
    assert sum(v.numel() for v in views) == adapter.head_parameter_count(model, 0)
    # position 1 of the pruned layer is dense head 2
    torch.testing.assert_close(views[0], tiny_distilbert().transformer.layer[0].attention.q_lin.weight[16:24])


def test_attention_probabilities_have_one_row_per_head_and_sum_to_one():
    model = prune_heads(tiny_distilbert(), REMOVE)
    adapter = adapter_for(model)
    ids, mask = _inputs()
    seen = {}
    with adapter.attention_probs_hook(model, lambda layer, probs: seen.__setitem__(layer, probs)):
        _run(model, ids, mask)
    assert [tuple(seen[layer].shape) for layer in range(3)] == [(3, 2, 12, 12), (3, 3, 12, 12), (3, 1, 12, 12)]
    for probs in seen.values():
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))
        assert probs[1, :, :, 8:].abs().max() < 1e-6  # padded keys get no attention
    seen.clear()
    _run(model, ids, mask)
    assert not seen  # the hooks are gone after the context


def test_attention_probabilities_need_the_eager_implementation():
    model = tiny_distilbert(attn_implementation="sdpa")
    ids, mask = _inputs()
    with pytest.raises(RuntimeError, match="eager"), adapter_for(model).attention_probs_hook(model, lambda *_: None):
        _run(model, ids, mask)


def test_save_and_load_keep_uneven_heads_and_outputs(tmp_path):
    model = prune_heads(tiny_distilbert(), {0: [0], 1: [1, 2], 2: [0, 1, 3]})
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    blocks = adapter_for(again).attention_blocks(again)
    assert [b.num_heads for b in blocks] == [3, 2, 1]
    assert [b.original_heads for b in blocks] == [(1, 2, 3), (0, 3), (2,)]
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in model.parameters())
    ids, mask = _inputs()
    torch.testing.assert_close(_run(again, ids, mask), _run(model, ids, mask))
