"""ViT adapter: structural removal equals gating, parameter counts are exact, config and modules stay true."""

import copy

import pytest
import torch

import edgeprune
from edgeprune import PruningPlan, apply_plan, prune_heads
from edgeprune.models import adapter_for
from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
from edgeprune.models.vit import ViTAdapter
from edgeprune.pruning import predicted_parameter_count
from tests.conftest import tiny_bert
from tests.test_distilbert_adapter import tiny_distilbert

REMOVE = {0: [1, 3], 1: [0], 2: [0, 1, 2]}
HIDDEN, HEAD_SIZE, TOKENS = 32, 8, 17  # 16 patches of a 16x16 image + [CLS]


def tiny_vit_config(**overrides):
    from transformers import ViTConfig

    options = dict(hidden_size=HIDDEN, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
                   image_size=16, patch_size=4, num_labels=5, attn_implementation="eager")
    options.update(overrides)
    return ViTConfig(**options)


def tiny_vit(seed: int = 0, **overrides):
    from transformers import ViTModel

    torch.manual_seed(seed)
    return ViTModel(tiny_vit_config(**overrides)).eval()


def _pixels(batch=2):
    return torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(7))


def _run(model, pixels):
    with torch.no_grad():
        return model(pixel_values=pixels).last_hidden_state


def test_the_adapter_claims_vit_and_only_vit():
    assert isinstance(adapter_for(tiny_vit()), ViTAdapter)
    assert not ViTAdapter.matches(tiny_bert())
    assert not ViTAdapter.matches(tiny_distilbert())
    assert all(type(adapter_for(m)) is not ViTAdapter for m in (tiny_bert(), tiny_distilbert()))


def test_structural_removal_equals_dense_model_with_heads_gated_to_zero():
    dense = tiny_vit()
    pixels = _pixels()
    adapter = adapter_for(dense)
    gates = torch.ones(3, 4)
    for layer, heads in REMOVE.items():
        gates[layer, heads] = 0.0
    with adapter.gate_heads(dense, gates):
        expected = _run(dense, pixels)
    actual = _run(prune_heads(copy.deepcopy(dense), REMOVE), pixels)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(_run(dense, pixels), actual, atol=1e-3)


def test_parameter_count_is_exactly_the_predicted_one():
    dense = tiny_vit()
    per_head = 3 * (HIDDEN * HEAD_SIZE + HEAD_SIZE) + HIDDEN * HEAD_SIZE
    plan = PruningPlan(num_heads=[4, 4, 4], kept_heads=[[0, 2], [1, 2, 3], [3]])
    before = sum(p.numel() for p in dense.parameters())
    assert predicted_parameter_count(dense, plan) == before - 6 * per_head
    pruned = apply_plan(copy.deepcopy(dense), plan)
    assert sum(p.numel() for p in pruned.parameters()) == before - 6 * per_head


def test_parameter_count_without_qkv_bias():
    dense = tiny_vit(qkv_bias=False)
    adapter = adapter_for(dense)
    assert adapter.head_parameter_count(dense, 0) == 4 * HIDDEN * HEAD_SIZE
    before = sum(p.numel() for p in dense.parameters())
    assert sum(p.numel() for p in prune_heads(dense, {0: [0]}).parameters()) == before - 4 * HIDDEN * HEAD_SIZE


def test_module_attributes_and_config_follow_the_surgery():
    model = prune_heads(tiny_vit(), REMOVE)
    attention = model.layers[2].attention
    assert attention.num_attention_heads == 1 and attention.head_dim == HEAD_SIZE
    assert attention.q_proj.weight.shape == attention.k_proj.weight.shape == attention.v_proj.weight.shape == (8, 32)
    assert attention.o_proj.weight.shape == (32, 8)
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 2], [1, 2, 3], [3]]
    blocks = adapter_for(model).attention_blocks(model)
    assert [b.num_heads for b in blocks] == [2, 3, 1]
    assert [b.original_heads for b in blocks] == [(0, 2), (1, 2, 3), (3,)]
    assert {b.dense_heads for b in blocks} == {4}


def test_pruning_twice_uses_the_dense_head_indices():
    pixels = _pixels()
    twice = prune_heads(prune_heads(tiny_vit(), {1: [0, 3]}), {1: [2]})  # dense head 2, now at position 1
    assert getattr(twice.config, KEPT_HEADS_CONFIG_KEY)[1] == [1]
    direct = prune_heads(tiny_vit(), {1: [0, 2, 3]})
    torch.testing.assert_close(_run(twice, pixels), _run(direct, pixels))


def test_removing_a_layer_equals_a_model_built_without_it():
    model = prune_heads(tiny_vit(), {0: [3], 2: [0]})
    pixels = _pixels()
    state = {k.replace("layers.2.", "layers.1."): v for k, v in model.state_dict().items()
             if not k.startswith("layers.1.")}
    reference = prune_heads(tiny_vit(num_hidden_layers=2), {0: [3], 1: [0]})
    reference.load_state_dict(state)
    adapter = adapter_for(model)
    adapter.remove_layers(model, [1])
    assert model.config.num_hidden_layers == 2 and len(model.layers) == 2
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 1, 2], [1, 2, 3]]
    torch.testing.assert_close(_run(model, pixels), _run(reference, pixels))
    with pytest.raises(ValueError, match="not all"):
        adapter.remove_layers(model, [0, 1])


def test_head_weights_are_the_slices_the_surgery_removes():
    model = tiny_vit()
    adapter = adapter_for(model)
    views = adapter.head_weights(model, 2, 3)
    assert [tuple(v.shape) for v in views] == [(8, 32)] * 3 + [(32, 8)] + [(8,)] * 3
    assert sum(v.numel() for v in views) == adapter.head_parameter_count(model, 2)
    torch.testing.assert_close(views[3], model.layers[2].attention.o_proj.weight[:, 24:32])


def test_attention_probabilities_have_one_row_per_head_and_sum_to_one():
    model = prune_heads(tiny_vit(), REMOVE)
    seen = {}
    with adapter_for(model).attention_probs_hook(model, lambda layer, probs: seen.__setitem__(layer, probs)):
        _run(model, _pixels())
    assert [tuple(seen[layer].shape) for layer in range(3)] == [(2, h, TOKENS, TOKENS) for h in (2, 3, 1)]
    for probs in seen.values():
        assert probs.min() >= 0
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))


def test_save_and_load_an_image_classifier_with_uneven_heads(tmp_path):
    from transformers import ViTForImageClassification

    torch.manual_seed(0)
    model = ViTForImageClassification(tiny_vit_config()).eval()
    prune_heads(model, {0: [0], 1: [1, 2], 2: [0, 1, 3]})
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert type(again) is ViTForImageClassification
    blocks = adapter_for(again).attention_blocks(again)
    assert [b.num_heads for b in blocks] == [3, 2, 1]
    assert [b.original_heads for b in blocks] == [(1, 2, 3), (0, 3), (2,)]
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        torch.testing.assert_close(again(pixel_values=_pixels()).logits, model(pixel_values=_pixels()).logits)
