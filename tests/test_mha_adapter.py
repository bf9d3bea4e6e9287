"""nn.MultiheadAttention adapter: the replacement module computes what torch's does, removal equals gating,
parameter counts are exact, and hooks leave the model as they found it."""

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from edgeprune import PruningPlan, apply_plan, prune_heads
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.base import frozen_parameters
from edgeprune.models.mha import MultiheadAttentionAdapter, PrunedMultiheadAttention
from edgeprune.pruning import predicted_parameter_count
from tests.conftest import tiny_bert

EMBED, HEADS, HEAD_SIZE = 16, 4, 4
PER_HEAD = 3 * (EMBED * HEAD_SIZE + HEAD_SIZE) + EMBED * HEAD_SIZE  # Q/K/V rows with biases, out_proj columns
REMOVE = {0: [1, 3], 1: [0], 2: [0, 1, 2]}


def _randomize(model: nn.Module, seed: int) -> nn.Module:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # nn.TransformerEncoder deep-copies one layer, so every layer starts identical
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model.eval()


def encoder(layers: int = 3, batch_first: bool = True, seed: int = 0) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(EMBED, HEADS, 32, dropout=0.0, batch_first=batch_first)
    return _randomize(nn.TransformerEncoder(layer, layers, enable_nested_tensor=batch_first), seed)


def _inputs(batch_first: bool = True, batch: int = 3, length: int = 7):
    x = torch.randn(batch, length, EMBED, generator=torch.Generator().manual_seed(7))
    padding = torch.zeros(batch, length, dtype=torch.bool)
    padding[1, 5:] = True
    return (x if batch_first else x.transpose(0, 1)), padding


def _run(model, x, padding):
    with torch.no_grad():
        return model(x, src_key_padding_mask=padding)


def _gates(remove, layers=3):
    gates = torch.ones(layers, HEADS)
    for layer, heads in remove.items():
        gates[layer, heads] = 0.0
    return gates


class SelfAttention(nn.Module):
    """A bare attention module in a container, outside any encoder layer."""

    def __init__(self, **options) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(EMBED, HEADS, batch_first=True, **options)

    def forward(self, x):
        return self.attention(x, x, x)[0]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("options", [{}, {"add_bias_kv": True}, {"add_zero_attn": True}, {"bias": False}])
def test_the_replacement_computes_what_torch_computes(batch_first, options):
    torch.manual_seed(0)
    dense = _randomize(nn.MultiheadAttention(EMBED, HEADS, batch_first=batch_first, **options), 1)
    ours = PrunedMultiheadAttention.sharing(dense)
    assert ours.in_proj_weight is dense.in_proj_weight and ours.out_proj is dense.out_proj
    generator = torch.Generator().manual_seed(3)
    query, memory = torch.randn(2, 5, EMBED, generator=generator), torch.randn(2, 6, EMBED, generator=generator)
    if not batch_first:
        query, memory = query.transpose(0, 1), memory.transpose(0, 1)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    extra = 1 if options.get("add_bias_kv") or options.get("add_zero_attn") else 0  # one more key
    float_mask = torch.randn(5, 6 + extra, generator=generator)
    head_mask = torch.rand(2 * HEADS, 5, 6 + extra, generator=generator) > 0.7
    head_mask[..., 0] = False  # every query keeps a key
    calls = [
        dict(key_padding_mask=padding),
        dict(key_padding_mask=padding, attn_mask=float_mask[:, :6], average_attn_weights=False),
        dict(attn_mask=head_mask[..., :6], average_attn_weights=False),
    ]
    with torch.no_grad():
        for kwargs in calls:
            expected, expected_weights = dense(query, memory, memory, **kwargs)
            actual, weights = ours(query, memory, memory, **kwargs)
            torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)
        # self-attention without weights can take torch's fused kernel
        expected, none = dense(query, query, query, key_padding_mask=padding[:, :5], need_weights=False)
        actual, also_none = ours(query, query, query, key_padding_mask=padding[:, :5], need_weights=False)
        assert none is None and also_none is None
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
        unbatched = query[0] if batch_first else query[:, 0]
        expected, expected_weights = dense(unbatched, unbatched, unbatched, average_attn_weights=False)
        actual, weights = ours(unbatched, unbatched, unbatched, average_attn_weights=False)
        torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
        assert weights.shape == (HEADS, 5, 5 + extra)
        torch.testing.assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)


def test_the_adapter_claims_torch_attention_but_not_transformers_models():
    assert isinstance(adapter_for(encoder()), MultiheadAttentionAdapter)
    bert = tiny_bert(vocab_size=100)
    bert.pool = nn.MultiheadAttention(32, 4)  # e.g. an attention-pooling head
    assert not MultiheadAttentionAdapter.matches(bert)
    assert not MultiheadAttentionAdapter.matches(nn.Sequential(nn.Linear(4, 4)))


@pytest.mark.parametrize("batch_first", [True, False])
def test_structural_removal_equals_dense_model_with_heads_gated_to_zero(batch_first):
    dense = encoder(batch_first=batch_first)
    x, padding = _inputs(batch_first)
    with adapter_for(dense).gate_heads(dense, _gates(REMOVE)):
        expected = _run(dense, x, padding)
    pruned = prune_heads(copy.deepcopy(dense), REMOVE)
    actual = _run(pruned, x, padding)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    real = ~padding if batch_first else ~padding.T  # dense torch zeroes padded positions on its nested path
    assert not torch.allclose(_run(dense, x, padding)[real], actual[real], atol=1e-3)


def test_hooks_swap_in_the_replacement_and_restore_the_dense_modules():
    dense = encoder()
    attentions = [layer.self_attn for layer in dense.layers]
    parameters = list(dense.parameters())
    x, padding = _inputs()
    reference = _run(dense, x, padding)
    with adapter_for(dense).gate_heads(dense, torch.ones(3, HEADS)):
        assert all(isinstance(layer.self_attn, PrunedMultiheadAttention) for layer in dense.layers)
        assert not dense.use_nested_tensor
        ungated = _run(dense, x, padding)
    assert [layer.self_attn for layer in dense.layers] == attentions and dense.use_nested_tensor
    assert all(a is b for a, b in zip(dense.parameters(), parameters, strict=True))
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in dense.modules())
    torch.testing.assert_close(ungated[~padding], reference[~padding], atol=1e-5, rtol=1e-5)


def test_gates_receive_gradients_through_frozen_dense_attention():
    dense = encoder()
    x, padding = _inputs()
    gates = torch.ones(3, HEADS, requires_grad=True)
    with frozen_parameters(dense), adapter_for(dense).gate_heads(dense, gates):
        dense(x, src_key_padding_mask=padding).pow(2).sum().backward()
    assert gates.grad is not None and (gates.grad.abs() > 0).all()


def test_parameter_count_is_exactly_the_predicted_one():
    dense = encoder()
    plan = PruningPlan(num_heads=[4, 4, 4], kept_heads=[[0, 2], [1, 2, 3], [3]])
    before = sum(p.numel() for p in dense.parameters())
    assert adapter_for(dense).head_parameter_count(dense, 0) == PER_HEAD
    assert predicted_parameter_count(dense, plan) == before - 6 * PER_HEAD
    pruned = apply_plan(copy.deepcopy(dense), plan)
    assert sum(p.numel() for p in pruned.parameters()) == before - 6 * PER_HEAD


def test_module_attributes_follow_the_surgery():
    model = prune_heads(encoder(), REMOVE)
    attention = model.layers[2].self_attn
    assert isinstance(attention, PrunedMultiheadAttention)
    assert (attention.num_heads, attention.head_dim, attention.embed_dim) == (1, HEAD_SIZE, EMBED)
    assert attention.in_proj_weight.shape == (3 * HEAD_SIZE, EMBED) and attention.in_proj_bias.shape == (12,)
    assert attention.out_proj.weight.shape == (EMBED, HEAD_SIZE)
    assert attention.batch_first and attention.original_heads == (3,)
    assert not model.use_nested_tensor  # torch's nested-tensor path assumes dense heads
    blocks = adapter_for(model).attention_blocks(model)
    assert [b.num_heads for b in blocks] == [2, 3, 1]
    assert [b.original_heads for b in blocks] == [(0, 2), (1, 2, 3), (3,)]
    assert {b.dense_heads for b in blocks} == {HEADS}
    assert adapter_for(model).layer_modules(model) == list(model.layers)


def test_pruning_twice_uses_the_dense_head_indices():
    x, padding = _inputs()
    twice = prune_heads(prune_heads(encoder(), {0: [1, 3]}), {0: [2]})  # dense head 2, now at position 1
    assert twice.layers[0].self_attn.original_heads == (0,)
    direct = prune_heads(encoder(), {0: [1, 2, 3]})
    torch.testing.assert_close(_run(twice, x, padding), _run(direct, x, padding))
    with pytest.raises(UserInputError, match="not in the model"):
        prune_heads(twice, {0: [1]})


def test_removing_a_layer_equals_an_encoder_built_without_it():
    model = prune_heads(encoder(), {2: [0]})
    x, padding = _inputs()
    state = {k.replace("layers.2.", "layers.1."): v for k, v in model.state_dict().items()
             if not k.startswith("layers.1.")}
    reference = prune_heads(encoder(layers=2), {1: [0]})
    reference.load_state_dict(state)
    adapter = adapter_for(model)
    adapter.remove_layers(model, [1])
    assert model.num_layers == 2 and len(model.layers) == 2
    assert [b.original_heads for b in adapter.attention_blocks(model)] == [(0, 1, 2, 3), (1, 2, 3)]
    torch.testing.assert_close(_run(model, x, padding), _run(reference, x, padding))
    with pytest.raises(ValueError, match="not all"):
        adapter.remove_layers(model, [0, 1])
    bare = SelfAttention()
    with pytest.raises(ValueError, match="outside an nn.TransformerEncoderLayer"):
        adapter_for(bare).remove_layers(nn.Sequential(bare, SelfAttention()), [0])


def test_decoder_layers_expose_self_and_cross_attention():
    layer = nn.TransformerDecoderLayer(EMBED, HEADS, 32, dropout=0.0, batch_first=True)
    dense = _randomize(nn.TransformerDecoder(layer, 1), 2)
    adapter = adapter_for(dense)
    assert adapter.layer_modules(dense) == [dense.layers[0].self_attn, dense.layers[0].multihead_attn]
    target, memory = torch.randn(2, 5, EMBED), torch.randn(2, 6, EMBED)
    remove = {0: [1], 1: [0, 2, 3]}
    with torch.no_grad(), adapter.gate_heads(dense, _gates(remove, layers=2)):
        expected = dense(target, memory)
    pruned = prune_heads(copy.deepcopy(dense), remove)
    assert pruned.layers[0].multihead_attn.num_heads == 1
    with torch.no_grad():
        torch.testing.assert_close(pruned(target, memory), expected, atol=1e-5, rtol=1e-5)


def test_head_weights_are_the_slices_the_surgery_removes():
    model = nn.Sequential(SelfAttention(add_bias_kv=True))
    adapter = adapter_for(model)
    views = adapter.head_weights(model, 0, 2)
    assert [tuple(v.shape) for v in views] == [(4, 16)] * 3 + [(16, 4)] + [(4,)] * 5
    assert sum(v.numel() for v in views) == adapter.head_parameter_count(model, 0) == PER_HEAD + 2 * HEAD_SIZE
    in_proj = model[0].attention.in_proj_weight
    torch.testing.assert_close(views[1], in_proj[EMBED + 8:EMBED + 12])  # key rows of head 2
    before = sum(p.numel() for p in model.parameters())
    prune_heads(model, {0: [2]})
    assert sum(p.numel() for p in model.parameters()) == before - PER_HEAD - 2 * HEAD_SIZE
    assert model[0].attention.bias_k.shape == (1, 1, 3 * HEAD_SIZE)


def _captured_probs(model, x, padding):
    seen = {}
    with adapter_for(model).attention_probs_hook(model, lambda layer, probs: seen.__setitem__(layer, probs)):
        _run(model, x, padding)
    return seen


def test_attention_probabilities_have_one_row_per_head_and_sum_to_one():
    x, padding = _inputs()
    for model, heads in ((encoder(), [4, 4, 4]), (prune_heads(encoder(), REMOVE), [2, 3, 1])):
        seen = _captured_probs(model, x, padding)
        assert [tuple(seen[layer].shape) for layer in range(3)] == [(3, h, 7, 7) for h in heads]
        for probs in seen.values():
            torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))
            assert probs[1, :, :, 5:].abs().max() == 0  # padded keys get no attention


def test_unsupported_layouts_are_named():
    with pytest.raises(UserInputError, match="kdim"):
        prune_heads(nn.Sequential(nn.MultiheadAttention(EMBED, HEADS, kdim=8, vdim=8)), {0: [0]})
    with pytest.raises(UserInputError, match="bare attention module"):
        prune_heads(nn.MultiheadAttention(EMBED, HEADS), {0: [0]})
    with pytest.raises(ValueError, match="at least one"):
        prune_heads(encoder(), {1: [0, 1, 2, 3]})


@settings(max_examples=20, deadline=None)
@given(kept=st.lists(st.sets(st.integers(0, HEADS - 1), min_size=1), min_size=3, max_size=3),
       first=st.lists(st.sets(st.integers(0, HEADS - 1)), min_size=3, max_size=3),
       batch_first=st.booleans(), length=st.integers(1, 6))
def test_any_plan_in_two_steps_keeps_shapes_and_equals_gating(kept, first, batch_first, length):
    dense = encoder(batch_first=batch_first)
    plan = PruningPlan([HEADS] * 3, [sorted(k) for k in kept])
    x, padding = _inputs(batch_first, batch=2, length=length)
    padding[:] = False
    with adapter_for(dense).gate_heads(dense, _gates(plan.removed_heads)):
        expected = _run(dense, x, padding)
    # some of the removals first, then the plan on the partly pruned model
    step = {layer: sorted(set(heads) & set(first[layer])) for layer, heads in plan.removed_heads.items()}
    pruned = apply_plan(prune_heads(copy.deepcopy(dense), step), plan)
    actual = _run(pruned, x, padding)
    assert actual.shape == x.shape
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert [list(b.original_heads) for b in adapter_for(pruned).attention_blocks(pruned)] == plan.kept_heads
    assert sum(p.numel() for p in pruned.parameters()) == predicted_parameter_count(dense, plan)
