"""litert-int4: asymmetric 4-bit blocks of 32 on LiteRT's symmetric blockwise kernels. A linear is split into a
symmetric part and per-block offsets (edgeprune/quantize/block_offsets.py) and the quantizer's codes are made exact
(edgeprune/export/litert_blocks.py), so a model whose weights already lie on an asymmetric 4-bit grid (a GGUF Q4_1,
like the bundled SmolLM2) runs at 4 bits with nothing lost but the int8 activations'."""

import numpy as np
import pytest
import torch

from edgeprune.errors import VerificationError
from edgeprune.export import export, export_prepared, load_artifact, verify_artifact
from edgeprune.export.litert_blocks import exact_codes
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.pruning import prune_heads
from edgeprune.quantize import RECIPES, SizeModel, quantize
from edgeprune.quantize.block_offsets import BlockOffsetLinear, asymmetric_blocks, pack_int4, split_block_offsets
from tests.conftest import tiny_bert
from tests.test_generation import PREFILL, tiny_decoder

GROUP = 32


def on_grid(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every linear whose width 32 divides moved onto its own asymmetric 4-bit grid (as a GGUF Q4_1's
    weights are): the weights a 4-bit export can hold exactly."""
    with torch.no_grad():
        for module in model.modules():
            if type(module) is torch.nn.Linear and module.in_features % GROUP == 0:
                module.weight.copy_(BlockOffsetLinear(module, GROUP).dense_weight())
    return model


def tensor_shapes(path, kind: str = "INT4") -> list[tuple[int, ...]]:
    """The shapes of the first subgraph's tensors of `kind` (a TFLite tensor type)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(path.read_bytes(), 0)
    graph = model.Subgraphs(0)
    tensors = [graph.Tensors(i) for i in range(graph.TensorsLength())]
    wanted = getattr(schema.TensorType, kind)
    return [tuple(t.Shape(i) for i in range(t.ShapeLength())) for t in tensors if t.Type() == wanted]


def int4_buffer_bytes(path) -> int:
    """The bytes the first subgraph's INT4 tensors hold in the file."""
    from ai_edge_litert import schema_py_generated as schema

    from edgeprune.export.litert_blocks import tensor_bytes

    data = path.read_bytes()
    model = schema.Model.GetRootAs(data, 0)
    graph = model.Subgraphs(0)
    tensors = [graph.Tensors(i) for i in range(graph.TensorsLength())]
    return sum(len(tensor_bytes(model, data, t)) for t in tensors if t.Type() == schema.TensorType.INT4)


@torch.no_grad()
def test_a_split_linear_is_the_asymmetric_quantization_of_its_weight_and_exact_on_a_grid():
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 10)
    split = BlockOffsetLinear(linear, GROUP)
    step = (linear.weight.reshape(10, 3, GROUP).amax(-1) - linear.weight.reshape(10, 3, GROUP).amin(-1)) / 15
    error = (split.dense_weight() - linear.weight).abs().reshape(10, 3, GROUP).amax(-1)
    assert torch.all(error <= step / 2 + 1e-6) and error.max() > 0  # within half a step of its block, not exact
    symmetric, offsets = asymmetric_blocks(linear.weight.detach(), GROUP)
    codes = symmetric.reshape(10, 3, GROUP) / step[..., None]
    assert torch.allclose(codes, codes.round(), atol=1e-4)
    assert codes.round().min() == -8 and codes.round().max() <= 7  # each block's minimum at −8
    assert offsets.shape == (10, 3)
    x = torch.randn(4, 7, 96)
    assert torch.allclose(split(x), torch.nn.functional.linear(x, split.dense_weight(), linear.bias), atol=1e-5)
    on_grid(linear)  # already on its grid: the split changes nothing
    again = BlockOffsetLinear(linear, GROUP)
    assert torch.allclose(again.dense_weight(), linear.weight, atol=1e-6)
    assert torch.allclose(again(x), linear(x), atol=1e-5)
    constant = torch.nn.Linear(32, 2, bias=False)
    constant.weight.fill_(0.25)  # a block with one value: no step, all of it in the offset
    assert torch.equal(BlockOffsetLinear(constant, GROUP).dense_weight(), constant.weight)


def test_only_linears_the_group_divides_are_split_and_the_skipped_stay():
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 64), torch.nn.Linear(64, 8))
    assert split_block_offsets(model, GROUP, skip=[model[2]]) == 1
    assert [type(m).__name__ for m in model] == ["BlockOffsetLinear", "Linear", "Linear"]
    assert split_block_offsets(model, GROUP) == 1  # the skipped one now; a split one is never split again
    with pytest.raises(ValueError, match="no whole blocks"):
        BlockOffsetLinear(torch.nn.Linear(48, 2), GROUP)


def test_codes_are_exact_for_a_grid_and_off_grid_weights_are_refused():
    rng = np.random.default_rng(0)
    codes = rng.integers(-8, 8, size=(3, 64))
    codes[:, 0] = codes[:, 32] = -8  # each block's minimum maps to −8 (block_offsets.py)
    scales = rng.uniform(0.01, 0.1, size=(3, 2)).astype(np.float32)
    weight = (codes * np.repeat(scales, GROUP, axis=1)).astype(np.float32)
    found, found_scales = exact_codes(weight, "w")
    assert np.array_equal(found, codes) and np.allclose(found_scales, scales)
    with pytest.raises(VerificationError, match="'w' is off a 4-bit grid"):
        exact_codes(weight + 0.3 * np.repeat(scales, GROUP, axis=1), "w")
    # a block whose codes stop short of −8 (GPTQ's may): its own step, found as max|w| / 7 here
    short = np.clip(codes, -7, 7)
    found, found_scales = exact_codes((short * np.repeat(scales, GROUP, axis=1)).astype(np.float32), "w")
    assert np.array_equal(found, short) and np.allclose(found_scales, scales)
    assert pack_int4(np.array([1, -2, 7, -8])) == bytes([0xE1, 0x87])  # the first code in the low nibble


def _inputs(count=4):
    generator = torch.Generator().manual_seed(1)
    return [(torch.randint(1000, 30522, (1, 24), generator=generator), torch.ones(1, 24, dtype=torch.long))
            for _ in range(count)]


def test_an_encoder_on_a_grid_exports_at_4_bits_as_close_as_int8_and_the_size_model_holds(tmp_path):
    recipe = RECIPES.get("litert-int4")
    torch.manual_seed(0)
    model = on_grid(EncoderClassifier(tiny_bert(hidden_size=64, intermediate_size=128),
                                      torch.nn.Linear(64, 5)).eval())
    inputs = _inputs()
    artifact = export_prepared(quantize(model, recipe), inputs[0], tmp_path / "int4.tflite", recipe)
    assert len(tensor_shapes(artifact.path)) == 3 * 6 + 1  # q, k, v, out, up, down of 3 layers; the classifier
    int8 = export_prepared(quantize(model, "litert-int8"), inputs[0], tmp_path / "int8.tflite",
                           RECIPES.get("litert-int8"))
    check = verify_artifact(model, load_artifact(artifact.path), inputs, recipe.min_cosine)
    int8_check = verify_artifact(model, load_artifact(int8.path), inputs, 0.0)
    assert check.min_cosine >= 0.999 and check.min_cosine >= int8_check.min_cosine - 5e-4
    # the linears' weights take half a byte each in the file (a model this small is mostly its int8 embedding table
    # and the offsets' ops: its file is no smaller than int8's); the unused pooler is not in the graph
    layers = [m for m in model.encoder.encoder.modules() if isinstance(m, torch.nn.Linear)] + [model.classifier]
    linear_weights = sum(m.weight.numel() for m in layers)
    assert int4_buffer_bytes(artifact.path) == linear_weights // 2
    sizes = SizeModel()
    sizes.observe(model, recipe, artifact.size_bytes)
    # a 16-wide attention output (three heads of 16 out of layer 0) has no whole block: that linear stays at 8 bits,
    # and the size model predicts the file from the dense one's
    pruned = prune_heads(model, {0: [0, 1, 2]})
    smaller = export_prepared(quantize(pruned, recipe), inputs[0], tmp_path / "pruned.tflite", recipe)
    assert len(tensor_shapes(smaller.path)) == 3 * 6
    assert verify_artifact(pruned, load_artifact(smaller.path), inputs, recipe.min_cosine).passed
    assert abs(sizes.predict(pruned, recipe) - smaller.size_bytes) <= 0.02 * smaller.size_bytes


def test_a_decoder_generator_stores_its_weights_exactly_at_4_bits_and_its_output_layer_at_8(tmp_path):
    model = on_grid(tiny_decoder())
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    artifact = export(model, example, tmp_path / "int4.tflite", "litert-int4", verify_on=[example])
    assert artifact.verification.min_cosine >= 0.999
    stored = stored_int4_weights(artifact.path)
    assert (30522, 32) not in [w.shape for w in stored]  # the vocabulary projection
    # the generator fuses q/k/v and gate/up (quantize/fused_projections.py): per layer one 4-bit q/k/v, one gate/up
    # (32 wide) and one down (64); o_proj only in layer 1 (8 heads of 4: 32 wide)
    assert len(stored) == 3 * 3 + 1
    # each is the symmetric part of the model's linears it stacks, up to the scales' bfloat16 rounding (2^-9)
    def symmetric(*linears: torch.nn.Linear) -> torch.Tensor:
        return torch.cat([BlockOffsetLinear(linear, GROUP).weight for linear in linears])

    expected = []
    for index, layer in enumerate(model.model.model.layers):
        attention, mlp = layer.self_attn, layer.mlp
        expected += [symmetric(attention.q_proj, attention.k_proj, attention.v_proj),
                     symmetric(mlp.gate_proj, mlp.up_proj), symmetric(mlp.down_proj)]
        expected += [symmetric(attention.o_proj)] if index == 1 else []
    for weight in stored:
        assert any(w.shape == weight.shape and torch.allclose(w, weight, rtol=2 ** -8, atol=0) for w in expected)
    # the offsets are int8 weights (dynamic-range FULLY_CONNECTEDs): the only fp16 tensors left are the 4-bit
    # weights' block scales, one [rows, blocks] tensor each
    assert sorted(tensor_shapes(artifact.path, "FLOAT16")) == sorted((len(w), w.shape[1] // GROUP) for w in stored)
    assert tensor_shapes(artifact.path, "INT8").count((32, 2)) == 3  # each layer's down_proj offsets: 2 blocks


def stored_int4_weights(path) -> list[torch.Tensor]:
    """The decode signature's 4-bit weights as the runtime multiplies by them: codes × their blocks' scales."""
    from ai_edge_litert import schema_py_generated as schema

    from edgeprune.export.litert_blocks import tensor_bytes

    data = path.read_bytes()
    model = schema.Model.GetRootAs(data, 0)
    graph = model.Subgraphs(0)
    weights = []
    for index in range(graph.TensorsLength()):
        tensor = graph.Tensors(index)
        if tensor.Type() != schema.TensorType.INT4:
            continue
        rows, cols = (tensor.Shape(i) for i in range(tensor.ShapeLength()))
        packed = np.frombuffer(tensor_bytes(model, data, tensor), np.uint8)
        nibbles = np.stack([packed & 0xF, packed >> 4], axis=1).reshape(-1)[:rows * cols].astype(np.int8)
        codes = np.where(nibbles > 7, nibbles - 16, nibbles).reshape(rows, cols // GROUP, GROUP)
        details = tensor.Quantization().Details()
        blockwise = schema.BlockwiseQuantization()
        blockwise.Init(details.Bytes, details.Pos)
        scales = np.frombuffer(tensor_bytes(model, data, graph.Tensors(blockwise.Scales())), np.float16)
        weights.append(torch.from_numpy((codes * scales.reshape(rows, -1, 1).astype(np.float32)).reshape(rows, cols)))
    return weights


def test_a_split_linear_off_its_grid_after_conversion_is_stored_at_8_bits(tmp_path):
    """A weight the converter changed (folded with a neighbouring constant) is no longer on its grid: its exact codes
    do not exist, so it is quantized again at int8 per channel instead of keeping the quantizer's re-rounded ones."""
    torch.manual_seed(0)
    model = EncoderClassifier(tiny_bert(hidden_size=64, intermediate_size=128), torch.nn.Linear(64, 5)).eval()
    split_block_offsets(model, GROUP)
    query = model.encoder.encoder.layer[1].attention.self.query
    with torch.no_grad():
        query.weight.add_(1e-3 * torch.randn_like(query.weight))  # off the grid, as a folded constant leaves it
    artifact = export(model, _inputs()[0], tmp_path / "int4.tflite", "litert-int4", verify_on=_inputs())
    assert len(tensor_shapes(artifact.path)) == 3 * 6 + 1 - 1
    assert tensor_shapes(artifact.path, "INT8").count((64, 64)) == 1  # that query weight
    assert artifact.verification.min_cosine >= 0.999
