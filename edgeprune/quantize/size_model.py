"""Predict an artifact's size from parameter counts and the recipe, before exporting.

Bytes per element by storage: fp32 = 4, int8 = 1 plus a 4-byte fp32 scale per output row (linears)
or per table row (embeddings). What the file adds on top (program, delegate headers, alignment) is
`overhead_bytes`, measured from real exports and refined as they come in.
"""

from dataclasses import dataclass

from torch import nn

from edgeprune.quantize.recipes import Recipe

FP32_BYTES = 4
INT8_BYTES = 1
SCALE_BYTES = 4


def payload_bytes(model: nn.Module, recipe: Recipe) -> int:
    """Bytes of weights the recipe stores for `model` (an unquantized module)."""
    total = 0
    counted: set[int] = set()
    for module in model.modules():
        if isinstance(module, nn.Linear):
            rows, cols = module.weight.shape
            total += _matrix_bytes(rows, cols, recipe.linear)
            counted.add(id(module.weight))
        elif isinstance(module, nn.Embedding):
            rows, cols = module.weight.shape
            total += _matrix_bytes(rows, cols, recipe.embedding)
            counted.add(id(module.weight))
    total += sum(p.numel() * FP32_BYTES for p in model.parameters() if id(p) not in counted)
    return total


def _matrix_bytes(rows: int, cols: int, fmt: str) -> int:
    if fmt == "int8":
        return rows * cols * INT8_BYTES + rows * SCALE_BYTES
    return rows * cols * FP32_BYTES


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

    def observe(self, model: nn.Module, recipe: Recipe, actual_bytes: int) -> None:
        """Record a real file's size so later predictions for this recipe use the measured overhead."""
        self.overhead_bytes = dict(self.overhead_bytes or {})
        self.overhead_bytes[recipe.name] = max(0, actual_bytes - payload_bytes(model, recipe))
