"""Predict an artifact's size from parameter counts and the recipe, before exporting.

Bytes per element by storage: fp32 = 4, fp16 = 2, int8 = 1, int4 = 1/2, plus quantization parameters:
per output row (linears) or table row (embeddings) one fp32 scale in ExecuTorch, and a scale plus an
int64 zero point in LiteRT's per-channel format; 4-bit linears carry one 16-bit scale per group of columns.
Embedding tables that edgeprune quantizes itself keep one fp32 scale per row (`Int8Embedding`) or one fp16 scale
per group of columns (`Int4Embedding`) in either runtime.
What the file adds on top (program, delegate headers, alignment) is `overhead_bytes`, measured from
real exports and refined as they come in.
"""

from dataclasses import dataclass

from torch import nn

from edgeprune.quantize.int4_embedding import scale_bytes_per_row
from edgeprune.quantize.recipes import Recipe
from edgeprune.runtimes import RUNTIMES

BYTES = {"fp32": 4.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class ParameterLayout:
    """What the size of any recipe's export depends on: each matrix's kind and shape, and the other parameters."""

    matrices: tuple[tuple[str, int, int], ...]  # ("linear" | "embedding", rows, columns)
    other_parameters: int

    @classmethod
    def of(cls, model: nn.Module) -> "ParameterLayout":
        matrices = []
        counted: set[int] = set()
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                rows, cols = module.weight.shape
                matrices.append(("linear" if isinstance(module, nn.Linear) else "embedding", rows, cols))
                counted.add(id(module.weight))
        return cls(tuple(matrices), sum(p.numel() for p in model.parameters() if id(p) not in counted))

    @property
    def core_parameters(self) -> int:
        """Parameters outside the embedding tables (linear weights and everything else)."""
        return sum(rows * cols for kind, rows, cols in self.matrices if kind == "linear") + self.other_parameters


def payload_bytes(model: "nn.Module | ParameterLayout", recipe: Recipe) -> int:
    """Bytes of weights the recipe stores for `model` (an unquantized module, or its layout)."""
    layout = model if isinstance(model, ParameterLayout) else ParameterLayout.of(model)
    total = 0.0
    for kind, rows, cols in layout.matrices:
        row_bytes = None
        if kind == "embedding" and recipe.embeddings_quantized_in_pytorch:
            row_bytes = scale_bytes_per_row(cols) if recipe.embedding == "int4" else 4  # fp32 scale of Int8Embedding
        total += _matrix_bytes(rows, cols, getattr(recipe, kind), kind, recipe.runtime, row_bytes, recipe.group_size)
    total += layout.other_parameters * (BYTES["fp16"] if recipe.linear == "fp16" else BYTES["fp32"])
    return int(total)


def _matrix_bytes(rows: int, cols: int, fmt: str, kind: str, runtime: str, row_bytes: int | None,
                  group: int) -> float:
    if fmt == "int4" and kind == "linear" and cols % group:
        fmt = "int8"  # the recipe keeps widths that groups do not divide at 8 bits
    data = rows * cols * BYTES[fmt]
    if fmt == "int4" and kind == "linear":
        return data + rows * -(-cols // group) * RUNTIMES.get(runtime).group_scale_bytes
    if fmt in ("int8", "int4"):
        return data + rows * (RUNTIMES.get(runtime).row_parameter_bytes if row_bytes is None else row_bytes)
    return data


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
