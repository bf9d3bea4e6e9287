"""Predict an artifact's size from parameter counts and the recipe, before exporting.

Each matrix costs what its weight format's size rule says (edgeprune/quantize/formats.py): bytes per element
(fp32 = 4, fp16 = 2, int8 = 1, int4 = 1/2) plus quantization parameters: per output row (linears) or table row
(embeddings) one fp32 scale in ExecuTorch, and a scale plus an int64 zero point in LiteRT's per-channel format
(the runtime's descriptor); 4-bit linears carry one 16-bit scale per group of columns. Embedding tables that
edgeprune quantizes itself keep one fp32 scale per row (`Int8Embedding`) or one fp16 scale per group of columns
(`Int4Embedding`) in either runtime.
What the file adds on top (program, delegate headers, alignment) is `overhead_bytes`, measured from
real exports and refined as they come in.
"""

from dataclasses import dataclass

from torch import nn

from edgeprune.quantize.block_offsets import offset_bytes
from edgeprune.quantize.formats import FORMATS, output_layer
from edgeprune.quantize.recipes import Recipe
from edgeprune.quantize.tied_output import TIED_BLOCK_BYTES, TIED_ROW_BYTES
from edgeprune.runtimes import RUNTIMES


@dataclass(frozen=True)
class ParameterLayout:
    """What the size of any recipe's export depends on: each matrix's kind and shape, and the other parameters."""

    # ("linear" | "fixed-linear" | "output" | "embedding", rows, columns); a fixed linear is an nn.Linear subclass
    # (nn.MultiheadAttention's out_proj, whose weight the attention reads itself): quantized like a linear, never
    # split into a symmetric part and offsets (`block_offsets.grid_linears` takes exactly nn.Linear)
    matrices: tuple[tuple[str, int, int], ...]
    other_parameters: int
    tied_output: bool = False  # the output layer's weight is an embedding table's (counted in both matrices)

    @classmethod
    def of(cls, model: nn.Module) -> "ParameterLayout":
        matrices = []
        counted: set[int] = set()
        head = output_layer(model)
        tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                rows, cols = module.weight.shape
                kind = "embedding" if isinstance(module, nn.Embedding) else "output" if module is head \
                    else "linear" if type(module) is nn.Linear else "fixed-linear"
                matrices.append((kind, rows, cols))
                counted.add(id(module.weight))
        return cls(tuple(matrices), sum(p.numel() for p in model.parameters() if id(p) not in counted),
                   head is not None and id(head.weight) in tables)

    @property
    def core_parameters(self) -> int:
        """Parameters outside the embedding tables (linear weights and everything else)."""
        return sum(rows * cols for kind, rows, cols in self.matrices if kind != "embedding") + self.other_parameters


def payload_bytes(model: "nn.Module | ParameterLayout", recipe: Recipe) -> int:
    """Bytes of weights the recipe stores for `model` (an unquantized module, or its layout): each matrix by its
    format's size rule (edgeprune/quantize/formats.py), the other parameters at the linears' format's width."""
    layout = model if isinstance(model, ParameterLayout) else ParameterLayout.of(model)
    runtime = RUNTIMES.get(recipe.runtime)
    linear, table = FORMATS.get(recipe.linear), FORMATS.get(recipe.embedding)
    head = FORMATS.get(recipe.output_layer or recipe.linear)
    total = 0.0
    # a calibrated output layer's tied table reads the layer's own codes, and adds steps and offsets of its own (a
    # width with no whole blocks keeps the output layer as it is: tied_output.quantize_output_layer)
    tied_table = next(((rows, cols) for kind, rows, cols in layout.matrices
                       if kind == "output" and cols % recipe.group_size == 0), None) \
        if layout.tied_output and recipe.output_layer_calibrated else None
    for kind, rows, cols in layout.matrices:
        if kind == "output" and layout.tied_output and runtime.stores_tied_weights_once and tied_table is None:
            continue  # the table's bytes, counted with the embedding
        if kind == "embedding" and (rows, cols) == tied_table:
            total += rows * (-(-cols // recipe.group_size) * TIED_BLOCK_BYTES + TIED_ROW_BYTES)
            if not runtime.stores_tied_weights_once:  # the table's own copy of the codes, two to a byte
                total += rows * cols / 2
        elif kind != "embedding":
            total += (head if kind == "output" else linear).linear_bytes(rows, cols, runtime, recipe.group_size)
            split = kind == "linear" or (kind == "output" and recipe.output_layer_calibrated)  # a calibrated head too
            if recipe.block_offsets and split and linear.stores_grouped(cols, recipe.group_size):
                total += offset_bytes(rows, cols, recipe.group_size, runtime.row_parameter_bytes)
        else:
            total += table.table_bytes(rows, cols, runtime, recipe.embeddings_quantized_in_pytorch)
    total += layout.other_parameters * linear.other_parameter_bytes
    return int(total)


@dataclass
class SizeModel:
    """Size = payload + per-recipe overhead; the overhead is learned from real files."""

    default_overhead_bytes: int = 64 * 1024
    overhead_bytes: dict[str, int] | None = None

    def predict(self, model: nn.Module, recipe: Recipe) -> int:
        return payload_bytes(model, recipe) + self.overhead(recipe)

    def overhead(self, recipe: Recipe) -> int:
        """The recipe's measured overhead; else the largest measured for any recipe; else the default."""
        measured = self.overhead_bytes or {}
        if recipe.name in measured:
            return measured[recipe.name]
        return max(measured.values(), default=self.default_overhead_bytes)

    def observed(self, recipe: Recipe) -> bool:
        """Whether a real file of this recipe has been measured (its overhead is then its own)."""
        return recipe.name in (self.overhead_bytes or {})

    def observe(self, model: nn.Module, recipe: Recipe, actual_bytes: int) -> None:
        """Record a real file's size so later predictions for this recipe use the measured overhead."""
        self.overhead_bytes = dict(self.overhead_bytes or {})
        self.overhead_bytes[recipe.name] = max(0, actual_bytes - payload_bytes(model, recipe))
