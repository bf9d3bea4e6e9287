"""Projections that read one input, fused for a generator's export (edgeprune/quantize/fused_projections.py): q/k/v and
gate/up become one linear each, with the same outputs, and a LiteRT generator carries one FULLY_CONNECTED per group."""

import copy
import importlib

import pytest
import torch
import torch.nn.functional as F

from edgeprune.export import export
from edgeprune.quantize.block_offsets import BlockOffsetLinear, split_block_offsets
from edgeprune.quantize.fused_projections import (
    FusedProjection,
    ProjectionPart,
    fuse_projections,
    projections_fused,
)
from tests.test_generation import PREFILL, tiny_decoder


def ids() -> torch.Tensor:
    return torch.arange(PREFILL)[None] % 90 + 3


@torch.no_grad()
def test_fused_projections_compute_what_the_separate_linears_did():
    model = tiny_decoder()  # unevenly pruned: layer 0 keeps 4 query heads over 1 KV head
    fused = copy.deepcopy(model)
    assert len(fuse_projections(fused)) == 3 * 5  # q, k, v, gate and up in each of 3 layers
    attention = fused.model.model.layers[0].self_attn
    assert isinstance(attention.q_proj, ProjectionPart) and attention.q_proj.shared is attention.v_proj.shared
    assert attention.q_proj.shared.fused.weight.shape == (16 + 4 + 4, 32)
    torch.testing.assert_close(fused(ids())[0], model(ids())[0], rtol=0, atol=1e-5)
    assert fuse_projections(fused) == []  # parts are not fused again


@torch.no_grad()
def test_a_part_called_on_its_own_computes_its_own_rows():
    model = tiny_decoder()
    mlp = model.model.model.layers[1].mlp
    gate, up = mlp.gate_proj.weight.clone(), mlp.up_proj.weight.clone()
    fuse_projections(model)
    first, second = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    # up before gate, and each on another input: no part takes another input's rows
    torch.testing.assert_close(mlp.up_proj(first), F.linear(first, up))
    torch.testing.assert_close(mlp.gate_proj(second), F.linear(second, gate))
    torch.testing.assert_close(mlp.up_proj(second), F.linear(second, up))
    assert mlp.gate_proj.shared.last_input is None  # every part had its rows: the shared one holds nothing


@torch.no_grad()
def test_parts_called_in_any_order_compute_the_fused_layer_once():
    model = tiny_decoder()
    attention = model.model.model.layers[2].self_attn
    weights = [attention.q_proj.weight.clone(), attention.k_proj.weight.clone(), attention.v_proj.weight.clone()]
    fuse_projections(model)
    shared = attention.q_proj.shared
    calls = []
    shared.fused.register_forward_hook(lambda *args: calls.append(1))
    x = torch.randn(1, 3, 32)
    for index, part in ((0, attention.q_proj), (2, attention.v_proj), (1, attention.k_proj)):
        torch.testing.assert_close(part(x), F.linear(x, weights[index]))
    assert len(calls) == 1 and shared.last_input is None
    attention.q_proj(x)  # a part called alone keeps the result for the others, and a repeat computes it again
    attention.q_proj(x)
    assert len(calls) == 3 and shared.taken == {0}


@torch.no_grad()
def test_projections_fused_puts_the_models_own_linears_back():
    model = tiny_decoder()
    before = {name: module for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    with projections_fused(model) as parts:
        assert parts == 3 * 5
        assert isinstance(model.model.model.layers[0].mlp.up_proj, ProjectionPart)
    after = {name: module for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    assert after.keys() == before.keys() and all(after[name] is before[name] for name in before)


@torch.no_grad()
def test_split_4_bit_linears_stack_into_one_4_bit_linear_with_the_same_outputs():
    model = tiny_decoder()
    split_block_offsets(model, 32)
    before = model(ids())[0]
    attention = model.model.model.layers[1].self_attn
    parts = [attention.q_proj, attention.k_proj, attention.v_proj]
    fuse_projections(model)
    shared = attention.q_proj.shared
    assert isinstance(shared, FusedProjection) and isinstance(shared.fused, BlockOffsetLinear)
    assert torch.equal(shared.fused.dense_weight(), torch.cat([part.dense_weight() for part in parts]))
    torch.testing.assert_close(model(ids())[0], before, rtol=0, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("split", [False, True])
def test_projections_with_biases_fuse_with_their_biases(split):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = Qwen2ForCausalLM(config).eval()
    assert model.model.layers[0].self_attn.q_proj.bias is not None
    if split:  # 4-bit split linears with biases, stacked with them
        split_block_offsets(model, 32)
    tokens = torch.arange(12)[None] % 60
    before = model(tokens).logits
    assert len(fuse_projections(model)) == 2 * 5
    fused = model.model.layers[0].self_attn.q_proj.shared.fused
    assert isinstance(fused, BlockOffsetLinear) == split and fused.bias.shape == (32 + 16 + 16,)
    torch.testing.assert_close(model(tokens).logits, before, rtol=0, atol=1e-5)


def test_a_litert_generator_runs_one_fully_connected_per_fused_group(tmp_path):
    from ai_edge_litert import schema_py_generated as schema

    model = tiny_decoder()
    example = (ids(), torch.arange(PREFILL))
    artifact = export(model, example, tmp_path / "model.tflite", "litert-fp32", verify_on=[example])
    assert artifact.verification.passed and artifact.verification.min_cosine >= 0.99999
    data = artifact.path.read_bytes()
    program = schema.Model.GetRootAs(data, 0)
    decode = program.Subgraphs(0)
    codes = [program.OperatorCodes(decode.Operators(i).OpcodeIndex()) for i in range(decode.OperatorsLength())]
    fully_connected = [code for code in codes if max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
                       == schema.BuiltinOperator.FULLY_CONNECTED]
    # per layer: q/k/v, o, gate/up, down; then the vocabulary projection
    assert len(fully_connected) == 3 * 4 + 1
    assert type(model.model.model.layers[0].self_attn.q_proj) is torch.nn.Linear  # the caller's model is untouched


def test_a_4_bit_layer_from_its_parts_refuses_offsets_of_another_shape():
    symmetric = torch.nn.Linear(64, 3)
    assert BlockOffsetLinear(symmetric, 32, torch.zeros(3, 2)).block_offsets.weight.shape == (3, 2)
    with pytest.raises(ValueError, match="offsets of shape"):
        BlockOffsetLinear(symmetric, 32, torch.zeros(3, 1))


@pytest.mark.parametrize("recipe", ["fp32", "int8-linear", "int4-decoder"])
def test_an_executorch_recipe_fuses_before_it_quantizes_and_computes_what_the_separate_linears_would(recipe):
    """Each row of a fused linear keeps its own quantization (per-row int8 scales, per-row-and-block 4-bit steps
    and offsets) and its input's per-token int8 quantization is shared anyway: the fused module computes what the
    module quantized layer by layer does."""
    from edgeprune.quantize import RECIPES

    recipes_module = importlib.import_module("edgeprune.quantize.recipes")  # the package's `recipes` is a function
    model = tiny_decoder()
    fused = RECIPES.get(recipe).apply(model)
    with torch.no_grad(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(recipes_module, "fuse_projections", lambda module: [])
        separate = RECIPES.get(recipe).apply(model)
        assert type(separate.model.model.layers[1].mlp.up_proj) is not ProjectionPart
        assert type(fused.model.model.layers[1].mlp.up_proj) is ProjectionPart
        tokens = ids()
        torch.testing.assert_close(fused.model(tokens).logits, separate.model(tokens).logits, rtol=0, atol=1e-5)
