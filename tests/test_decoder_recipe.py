"""`int4-decoder`: a decoder's 4-bit recipe with its output layer (the vocabulary projection) at int8 per channel
and every other linear in asymmetric 4-bit blocks split into a symmetric part and offsets. The head is found and
stored apart, the split parts hold the asymmetric quantization exactly, the size rule counts the head and the
offsets exactly, the export verifies and its size follows, and on weights that lie on an asymmetric grid (as a Q4_1
model's do) the program keeps them where symmetric blocks do not."""

import pytest
import torch

from edgeprune.export import export, load_artifact
from edgeprune.export.verify import compare_artifact
from edgeprune.quantize import RECIPES
from edgeprune.quantize.block_offsets import BlockOffsetLinear, quantized_blocks
from edgeprune.quantize.formats import FORMATS, output_layer
from edgeprune.quantize.fused_projections import ProjectionPart
from edgeprune.quantize.size_model import ParameterLayout, payload_bytes
from edgeprune.runtimes import RUNTIMES
from tests.conftest import tiny_bert
from tests.test_generation import PREFILL, tiny_decoder

DECODER_RECIPE = RECIPES.get("int4-decoder")


def test_the_output_layer_is_stored_at_int8_and_every_other_linear_in_split_4_bit_blocks():
    model = tiny_decoder()
    quantized = DECODER_RECIPE.apply(model)
    head = output_layer(quantized)
    assert head is quantized.model.lm_head
    assert head.weight.target_dtype == torch.int8 and tuple(head.weight.block_size) == (1, 32)  # one scale a row
    parts = [m for m in quantized.modules() if isinstance(m, BlockOffsetLinear)]
    plain = [m for m in quantized.modules() if type(m) is torch.nn.Linear and m is not head
             and all(m is not part.block_offsets for part in parts)]
    # q/k/v and gate/up fused first (four linears a layer), then split wherever the group divides the width; the
    # o_proj of layers 0 and 2 keep 16 and 24 inputs: 8 bits
    attention = quantized.model.model.layers[0].self_attn
    assert attention.q_proj.shared is attention.v_proj.shared and attention.q_proj.out_features == 16
    assert len(parts) == 3 * 4 - 2 and sorted(m.in_features for m in plain) == [16, 24]
    assert all(part.weight.target_dtype == torch.int4 and tuple(part.weight.block_size) == (1, 32) for part in parts)
    # offsets at int8 per row; a linear one block wide keeps its one column of offsets in float
    assert all(part.block_offsets.weight.target_dtype == torch.int8 for part in parts if part.in_features > 32)
    assert all(type(part.block_offsets.weight) is torch.nn.Parameter for part in parts if part.in_features == 32)
    assert all(m.weight.target_dtype == torch.int8 for m in plain)
    assert type(model.model.lm_head.weight) is torch.nn.Parameter  # the source is left as it was


def stored_rows(module: torch.nn.Module) -> tuple[torch.nn.Module, slice]:
    """The split linear holding `module`'s rows, and which: a fused projection's part holds its rows of one."""
    if isinstance(module, ProjectionPart):
        start = sum(module.shared.sizes[:module.index])
        return module.shared.fused, slice(start, start + module.out_features)
    return module, slice(None)


def test_the_split_parts_hold_the_asymmetric_quantization_exactly():
    model = tiny_decoder()
    originals = {name: m.weight.detach().clone() for name, m in model.named_modules()
                 if type(m) is torch.nn.Linear and m.in_features % 32 == 0 and m is not output_layer(model)}
    quantized = dict(DECODER_RECIPE.apply(model).named_modules())
    for name, weight in originals.items():
        part, rows = stored_rows(quantized[name])
        offsets = part.block_offsets.weight.dequantize()[rows]
        stored = part.weight.dequantize()[rows] + offsets.repeat_interleave(32, dim=1)
        expected = quantized_blocks(weight, 32)
        step = (weight.unflatten(1, (-1, 32)).amax(-1) - weight.unflatten(1, (-1, 32)).amin(-1)) / 15
        # the 4-bit codes exactly; the offsets at int8 per row: within half an int8 step of the row's largest
        offset_error = offsets.abs().amax(1, keepdim=True) / 127 / 2
        assert torch.all((stored - expected).abs() <= offset_error.repeat(1, weight.shape[1]) + 1e-6 * step.amax()), \
            name
        codes = part.weight.dequantize()[rows].unflatten(1, (-1, 32)) / step[..., None]
        assert torch.allclose(codes, codes.round(), atol=1e-4), name  # on the grid of the original's steps


def test_the_size_rule_counts_the_head_at_its_own_format_exactly():
    model = tiny_decoder()
    layout = ParameterLayout.of(model)
    assert [kind for kind, *_ in layout.matrices].count("output") == 1
    rows, cols = model.model.lm_head.weight.shape
    runtime = RUNTIMES.get("executorch")
    head_int8 = FORMATS.get("int8").linear_bytes(rows, cols, runtime, 32)
    head_int4 = FORMATS.get("int4").linear_bytes(rows, cols, runtime, 32)
    assert head_int8 == rows * cols + rows * 4 and head_int4 == rows * cols / 2 + rows * 2
    # each split linear adds its offsets' linear: an int8 per row and block and the row's fp32 scale; a float per row
    # for a linear one block wide
    offsets = sum(m.out_features * (4 if m.in_features == 32 else m.in_features // 32 + 4) for m in model.modules()
                  if type(m) is torch.nn.Linear and m.in_features % 32 == 0 and m is not model.model.lm_head)
    difference = payload_bytes(model, DECODER_RECIPE) - payload_bytes(model, RECIPES.get("int4-linear"))
    assert difference == int(head_int8 - head_int4 + offsets)
    assert ParameterLayout.of(tiny_bert()).matrices and all(kind != "output" for kind, *_ in
                                                            ParameterLayout.of(tiny_bert()).matrices)


@pytest.mark.integration
def test_the_export_verifies_its_size_follows_the_rule_and_it_keeps_weights_on_an_asymmetric_grid(tmp_path):
    """SmolLM2-135M's weights come from a Q4_1 GGUF: asymmetric blocks of 32. The split program multiplies by such
    weights as they are; symmetric blocks (int4-linear) round them a second time."""
    model = tiny_decoder()
    with torch.no_grad():
        for module in model.modules():
            if type(module) is torch.nn.Linear and module.in_features % 32 == 0:
                module.weight.copy_(quantized_blocks(module.weight, 32))
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    sizes, agreement = {}, {}
    for name in ("int4-linear", "int4-decoder"):
        artifact = export(model, example, tmp_path / f"{name}.pte", name, verify_on=[example])
        assert artifact.verification.passed
        sizes[name] = artifact.size_bytes
        program = load_artifact(artifact.path)
        agreement[name] = compare_artifact(model, program, [example], 0.99).min_cosine  # against the float model
    assert agreement["int4-decoder"] > 0.999 > agreement["int4-linear"], agreement
    predicted = payload_bytes(model, DECODER_RECIPE) - payload_bytes(model, RECIPES.get("int4-linear"))
    measured = sizes["int4-decoder"] - sizes["int4-linear"]
    # beside the weights, each split linear adds the program's records of its offsets' ops (about 1.5 KB here: the
    # per-recipe overhead the size model learns from real files; 0.9 MB of SmolLM2's 122 MB)
    split = sum(isinstance(m, BlockOffsetLinear) for m in DECODER_RECIPE.apply(model).modules())
    assert abs(measured - predicted) <= 0.02 * predicted + 2048 * split, (measured, predicted, split)


@pytest.mark.integration
@torch.no_grad()
def test_int4_decoder_all_ships_the_head_at_4_bits_and_a_table_reading_the_same_codes(tmp_path):
    """int4-decoder-all: the output layer placed by GPTQ on 4-bit blocks, the tied table a TiedFourBitEmbedding; the
    .pte verifies, is smaller than int4-decoder's by what the size rule says, and decodes like its PyTorch source."""
    from tests.test_tied_output import calibration, decodes_like, tied_decoder

    model = tied_decoder(vocab=2048, layer_std=0.05)
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    recipe = RECIPES.get("int4-decoder-all")
    decoder = export(model, example, tmp_path / "decoder.pte", "int4-decoder", verify_on=[example])
    artifact = export(model, example, tmp_path / "all.pte", recipe, calibration=calibration(vocab=2048),
                      verify_on=[example])
    prepared = recipe.apply(model, calibration(vocab=2048))
    assert isinstance(prepared.model.lm_head, BlockOffsetLinear)
    assert prepared.model.lm_head.weight.target_dtype == torch.int4
    predicted = payload_bytes(model, DECODER_RECIPE) - payload_bytes(model, recipe)
    measured = decoder.size_bytes - artifact.size_bytes
    # (less what the rule leaves to the learned overhead: the lookup's ops, here 7 KB of the 94 KB)
    assert abs(measured - predicted) <= 0.1 * predicted, (measured, predicted)
    decodes_like(prepared, artifact.path)


def test_the_all_recipes_size_rule_counts_the_4_bit_head_its_offsets_and_a_tied_tables_own_codes():
    from edgeprune.quantize.block_offsets import offset_bytes
    from edgeprune.quantize.int4_embedding import scale_bytes_per_row
    from edgeprune.quantize.tied_output import TIED_BLOCK_BYTES, TIED_ROW_BYTES
    from tests.test_tied_output import tied_decoder

    rows, cols = 1024, 64
    blocks = rows * cols // 32
    int8_matrix = rows * cols + rows * 4  # int4-decoder's head and its table: int8, an fp32 scale a row
    head_int4 = rows * cols / 2 + blocks * 2 + offset_bytes(rows, cols, 32, 4)  # bf16 steps, int8 offsets
    # tied: the lookup's steps and offsets and its own copy of the codes (ExecuTorch keeps the head's apart);
    # untied: the table stored as the recipe's 4-bit embeddings
    table_int4 = {True: blocks * TIED_BLOCK_BYTES + rows * TIED_ROW_BYTES + rows * cols / 2,
                  False: rows * cols / 2 + rows * scale_bytes_per_row(cols)}
    for tie in (True, False):
        model = tied_decoder(tie=tie, vocab=rows)
        saved = payload_bytes(model, DECODER_RECIPE) - payload_bytes(model, RECIPES.get("int4-decoder-all"))
        assert saved == int(2 * int8_matrix - head_int4 - table_int4[tie]), tie


def test_an_nn_linear_subclass_is_stored_at_4_bits_without_offsets_and_the_size_rule_says_so():
    """nn.MultiheadAttention reads its out_proj's weight itself, so the split (exactly nn.Linear) leaves that
    subclass whole; the size rule counts offsets for the plain linear only."""
    from edgeprune.quantize.block_offsets import offset_bytes, split_block_offsets

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = torch.nn.MultiheadAttention(64, 4, batch_first=True)
            self.projection = torch.nn.Linear(64, 96)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.projection(self.attention(x, x, x, need_weights=False)[0])

    model = Block()
    layout = ParameterLayout.of(model)
    assert sorted(kind for kind, *_ in layout.matrices) == ["fixed-linear", "linear"]
    assert split_block_offsets(Block(), 32) == 1
    runtime = RUNTIMES.get("executorch")
    difference = payload_bytes(model, DECODER_RECIPE) - payload_bytes(model, RECIPES.get("int4-linear"))
    assert difference == int(offset_bytes(96, 64, 32, runtime.row_parameter_bytes))
