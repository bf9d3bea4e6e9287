"""Quantization-aware recovery: the student's linears trained through the 4-bit grid their artifact stores.

Distillation moves every weight off the grid it came on. SmolLM2's weights come from a Q4_1 GGUF, so `litert-int4`
(asymmetric blocks of 32, edgeprune/quantize/block_offsets.py) holds the dense model exactly; a recovered student
quantized after training lost that (a pruned SmolLM2 recovered in float: cosine 0.969 through its litert-int4
program, refused). Trained through its own asymmetric 4-bit projection (straight-through: the forward multiplies by
the quantized weight, the gradient reaches the float one) and left on it afterwards, the student's 4-bit artifact
is the model that was validated (docs/FINDINGS.md).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn.utils import parametrize

from edgeprune.errors import UserInputError
from edgeprune.quantize.block_offsets import grid_linears, quantized_blocks


class AsymmetricBlocks(nn.Module):
    """A weight parametrization: the weight's asymmetric 4-bit quantization in blocks of `group` input columns,
    with the identity's gradient (straight-through)."""

    def __init__(self, group: int) -> None:
        super().__init__()
        self.group = group

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            quantized = quantized_blocks(weight.detach().float(), self.group).to(weight.dtype)
        return weight + (quantized - weight).detach()


def grid_of(recipe_name: str) -> int:
    """The block width of the asymmetric 4-bit grid `recipe_name` stores linears on (`litert-int4`, `litert-int4-all`,
    `int4-decoder`, `int4-decoder-all`: 32)."""
    from edgeprune.quantize.recipes import RECIPES

    recipe = RECIPES.get(recipe_name)
    if recipe.litert_quantization != "dynamic-int4" and not recipe.block_offsets:
        raise UserInputError(f"quantization-aware recovery trains on an asymmetric 4-bit grid (litert-int4's, "
                             f"int4-decoder's); {recipe_name} stores its weights otherwise")
    return recipe.group_size


@contextmanager
def trained_on_grid(model: nn.Module, group: int | None) -> Iterator[int]:
    """While open, `model`'s grid linears (`grid_linears`: not the output layer, whole blocks wide) multiply by
    their asymmetric 4-bit quantization (the float weights train underneath); on closing each weight is left on its
    grid. Yields how many linears; `group` None: none."""
    linears = grid_linears(model, group) if group else []
    for linear in linears:
        parametrize.register_parametrization(linear, "weight", AsymmetricBlocks(group))
    try:
        yield len(linears)
    finally:
        for linear in linears:
            parametrize.remove_parametrizations(linear, "weight", leave_parametrized=True)
