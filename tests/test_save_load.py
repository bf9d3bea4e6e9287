"""A pruned model with a different head count in every layer saves and loads again, exactly."""

import pytest
import torch

import edgeprune
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from tests.conftest import tiny_bert


def test_round_trip_keeps_per_layer_heads_and_outputs(tmp_path):
    model = edgeprune.prune_heads(tiny_bert(), {0: [0], 1: [1, 2], 2: [0, 1, 3]})
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert [b.num_heads for b in adapter_for(again).attention_blocks(again)] == [3, 2, 1]
    assert [b.original_heads for b in adapter_for(again).attention_blocks(again)] == [(1, 2, 3), (0, 3), (2,)]
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in model.parameters())
    ids = torch.randint(1000, 30522, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).last_hidden_state, model(input_ids=ids).last_hidden_state)


def test_dense_model_round_trips_too(tmp_path):
    edgeprune.save(tiny_bert(), tmp_path / "dense")
    assert sum(p.numel() for p in edgeprune.load(tmp_path / "dense").parameters()) == sum(
        p.numel() for p in tiny_bert().parameters())


def test_errors(tmp_path):
    with pytest.raises(UserInputError, match="transformers model"):
        edgeprune.save(torch.nn.Linear(2, 2), tmp_path / "x")
    with pytest.raises(UserInputError, match="no config.json"):
        edgeprune.load(tmp_path)


def _tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def _parameters(model):
    return sum(p.numel() for p in model.parameters())


def _structure(model):
    from edgeprune.pruning.ffn import intermediate_sizes

    blocks = adapter_for(model).attention_blocks(model)
    return [(b.num_heads, b.num_kv_heads, b.original_heads) for b in blocks], intermediate_sizes(model)


def test_bert_with_uneven_heads_and_uneven_ffn_widths_round_trips(tmp_path):
    from edgeprune.pruning.ffn import INTERMEDIATE_SIZES_CONFIG_KEY, remove_neurons

    model = edgeprune.prune_heads(tiny_bert(), {0: [3], 2: [0, 2]})
    remove_neurons(model, {0: list(range(10)), 1: [5, 7, 63]})  # widths 54, 61, 64
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert _structure(again) == _structure(model)
    assert _structure(again)[1] == [54, 61, 64] and [h for h, _, _ in _structure(again)[0]] == [3, 4, 2]
    assert getattr(again.config, INTERMEDIATE_SIZES_CONFIG_KEY) == [54, 61, 64]
    assert _parameters(again) == _parameters(model)
    ids = torch.randint(1000, 30522, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   model(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_llama_with_uneven_gqa_heads_and_uneven_ffn_widths_round_trips(tmp_path):
    from edgeprune.pruning.ffn import remove_neurons

    # layer 0 loses a whole KV group, layer 2 one query head from each group
    model = edgeprune.prune_heads(_tiny_llama(), {0: [2, 3], 2: [1, 3]})
    remove_neurons(model, {1: list(range(0, 96, 3)), 2: [0, 95]})  # widths 96, 64, 94
    assert model.model.layers[1].mlp.intermediate_size == 64
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert _structure(again) == _structure(model)
    assert _structure(again)[1] == [96, 64, 94]
    assert [(h, kv) for h, kv, _ in _structure(again)[0]] == [(2, 1), (4, 2), (2, 2)]
    assert _parameters(again) == _parameters(model)
    ids = torch.randint(0, 128, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, model(input_ids=ids).logits)
        generated = again.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=4,
                                   min_new_tokens=4, do_sample=False)
        expected = model.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=4,
                                  min_new_tokens=4, do_sample=False)
    assert torch.equal(generated, expected)


def test_layer_removal_after_uneven_ffn_removal_saves_the_true_widths(tmp_path):
    from edgeprune.pruning.ffn import remove_neurons

    model = remove_neurons(_tiny_llama(), {0: [1, 2], 2: list(range(30))})  # widths 94, 96, 66
    adapter_for(model).remove_layers(model, [1])
    edgeprune.save(model, tmp_path / "short")
    again = edgeprune.load(tmp_path / "short")
    assert _structure(again)[1] == [94, 66] and len(again.model.layers) == 2
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_record_of_ffn_widths_that_does_not_fit_is_a_clear_error(tmp_path):
    import json

    from edgeprune.pruning.ffn import INTERMEDIATE_SIZES_CONFIG_KEY, remove_neurons

    edgeprune.save(remove_neurons(tiny_bert(), {0: [1]}), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config[INTERMEDIATE_SIZES_CONFIG_KEY] = [63, 64]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserInputError, match="does not fit a model of 3 layers"):
        edgeprune.load(tmp_path / "m")
