"""Each weight format is one descriptor (edgeprune/quantize/formats.py) that owns its rank, its element size, its
size rule and how it quantizes linears and tables; recipes and the size model only name formats. Exact byte counts
for each rule, and the recipes' order read from the formats."""

import pytest
from torch import nn

from edgeprune.quantize import RECIPES, fidelity_rank, payload_bytes
from edgeprune.quantize.formats import FORMATS
from edgeprune.quantize.int4_embedding import Int4Embedding, scale_bytes_per_row
from edgeprune.quantize.int8_embedding import Int8Embedding
from edgeprune.runtimes import RUNTIMES

EXECUTORCH, LITERT = RUNTIMES.get("executorch"), RUNTIMES.get("litert")


@pytest.mark.parametrize(("name", "cols", "runtime", "expected"), [
    ("fp32", 64, EXECUTORCH, 64 * 64 * 4), ("fp16", 64, LITERT, 64 * 64 * 2),
    ("int8", 64, EXECUTORCH, 64 * 64 + 64 * 4), ("int8", 64, LITERT, 64 * 64 + 64 * LITERT.row_parameter_bytes),
    ("int4", 64, EXECUTORCH, 64 * 64 // 2 + 64 * 2 * 2),  # two groups of 32 per row, a 16-bit scale each
    ("int4", 48, EXECUTORCH, 64 * 48 + 64 * 4),  # 48 inputs: groups of 32 do not divide them, stored at 8 bits
])
def test_each_formats_linear_size_rule(name, cols, runtime, expected):
    assert FORMATS.get(name).linear_bytes(64, cols, runtime, 32) == expected


def test_table_rules_keep_edgeprunes_own_scales_or_the_runtimes():
    assert FORMATS.get("int8").table_bytes(100, 64, EXECUTORCH, in_pytorch=True) == 100 * 64 + 100 * 4
    assert FORMATS.get("int4").table_bytes(100, 64, EXECUTORCH, True) == 100 * 32 + 100 * scale_bytes_per_row(64)
    assert FORMATS.get("int8").table_bytes(100, 64, LITERT, False) == 100 * 64 + 100 * LITERT.row_parameter_bytes
    assert FORMATS.get("fp32").table_bytes(100, 64, EXECUTORCH, True) == 100 * 64 * 4


def test_the_size_model_is_the_sum_of_the_formats_rules():
    model = nn.Sequential(nn.Embedding(100, 64), nn.Linear(64, 64), nn.LayerNorm(64))
    for name in RECIPES.names():
        recipe = RECIPES.get(name)
        runtime = RUNTIMES.get(recipe.runtime)
        linear, table = FORMATS.get(recipe.linear), FORMATS.get(recipe.embedding)
        expected = (table.table_bytes(100, 64, runtime, recipe.embeddings_quantized_in_pytorch)
                    + linear.linear_bytes(64, 64, runtime, recipe.group_size)
                    + (64 + 64 + 64) * linear.other_parameter_bytes)  # the bias and the norm's two vectors
        if recipe.block_offsets:  # the split linear's offsets: an int8 per row and block, the row's scale
            expected += 64 * (64 // 32) + 64 * runtime.row_parameter_bytes
        assert payload_bytes(model, recipe) == int(expected), name


def test_formats_quantize_tables_and_linears_in_pytorch():
    model = nn.Sequential(nn.Embedding(100, 64), nn.Linear(64, 64), nn.Linear(48, 64))
    FORMATS.get("int8").quantize_tables(model)
    assert isinstance(model[0], Int8Embedding)
    tables = nn.Sequential(nn.Embedding(100, 64))
    FORMATS.get("int4").quantize_tables(tables)
    assert isinstance(tables[0], Int4Embedding)
    FORMATS.get("int4").quantize_linears(model, 32)
    # the 64-wide linear in 4 bits, the 48-wide one at 8 bits (torchao's quantized weights name their dtype)
    assert "int4" in repr(model[1].weight).lower() and "int8" in repr(model[2].weight).lower()


def test_recipes_rank_by_their_formats():
    assert [FORMATS.get(n).rank for n in ("fp32", "fp16", "int8", "int4")] == [0, 1, 2, 3]
    assert fidelity_rank(RECIPES.get("int8-emb4")) == (2, 3) and fidelity_rank(RECIPES.get("fp32")) == (0, 0)
