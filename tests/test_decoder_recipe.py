"""`int4-decoder`: a decoder's 4-bit recipe with its output layer (the vocabulary projection) at int8 per channel.
The head is found and stored apart, every other linear stays at 4 bits, the size rule counts the head at its own
format exactly, the export verifies and its size follows, and an encoder's ladder leaves the recipe out."""

import torch

from edgeprune.export import export
from edgeprune.quantize import RECIPES
from edgeprune.quantize.formats import FORMATS, output_layer
from edgeprune.quantize.size_model import ParameterLayout, payload_bytes
from edgeprune.runtimes import RUNTIMES
from tests.conftest import tiny_bert
from tests.test_generation import PREFILL, tiny_decoder

DECODER_RECIPE = RECIPES.get("int4-decoder")


def test_the_output_layer_is_stored_at_int8_and_every_other_linear_at_4_bits():
    model = tiny_decoder()
    quantized = DECODER_RECIPE.apply(model)
    head = output_layer(quantized)
    assert head is quantized.model.lm_head
    assert head.weight.target_dtype == torch.int8 and tuple(head.weight.block_size) == (1, 32)  # one scale a row
    others = [m for m in quantized.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    # 4 bits wherever the group divides the width (the o_proj of layers 0 and 2 keep 16 and 24 inputs: 8 bits, the
    # recipes' rule)
    assert all(m.weight.target_dtype == (torch.int4 if m.in_features % 32 == 0 else torch.int8) for m in others)
    assert sum(m.weight.target_dtype == torch.int4 for m in others) == len(others) - 2
    assert type(model.model.lm_head.weight) is torch.nn.Parameter  # the source is left as it was


def test_the_size_rule_counts_the_head_at_its_own_format_exactly():
    model = tiny_decoder()
    layout = ParameterLayout.of(model)
    assert [kind for kind, *_ in layout.matrices].count("output") == 1
    rows, cols = model.model.lm_head.weight.shape
    runtime = RUNTIMES.get("executorch")
    head_int8 = FORMATS.get("int8").linear_bytes(rows, cols, runtime, 32)
    head_int4 = FORMATS.get("int4").linear_bytes(rows, cols, runtime, 32)
    assert head_int8 == rows * cols + rows * 4 and head_int4 == rows * cols / 2 + rows * 2
    difference = payload_bytes(model, DECODER_RECIPE) - payload_bytes(model, RECIPES.get("int4-linear"))
    assert difference == int(head_int8 - head_int4)
    assert ParameterLayout.of(tiny_bert()).matrices and all(kind != "output" for kind, *_ in
                                                            ParameterLayout.of(tiny_bert()).matrices)


def test_the_export_verifies_and_its_size_follows_the_rule(tmp_path):
    model = tiny_decoder()
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    sizes = {}
    for name in ("int4-linear", "int4-decoder"):
        artifact = export(model, example, tmp_path / f"{name}.pte", name, verify_on=[example])
        assert artifact.verification.passed
        sizes[name] = artifact.size_bytes
    predicted = payload_bytes(model, DECODER_RECIPE) - payload_bytes(model, RECIPES.get("int4-linear"))
    measured = sizes["int4-decoder"] - sizes["int4-linear"]
    assert abs(measured - predicted) <= 0.02 * predicted, (measured, predicted)
