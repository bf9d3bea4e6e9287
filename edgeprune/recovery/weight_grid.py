"""Quantization-aware recovery: the student's linears trained through the 4-bit grid their artifact stores.

Distillation moves every weight off the grid it came on. SmolLM2's weights come from a Q4_1 GGUF, so `litert-int4`
(asymmetric blocks of 32, edgeprune/quantize/block_offsets.py) holds the dense model exactly; a recovered student
quantized after training lost that (a pruned SmolLM2 recovered in float: cosine 0.969 through its litert-int4
program, refused). Trained through its own asymmetric 4-bit projection (straight-through: the forward multiplies by
the quantized weight, the gradient reaches the float one) and left on it afterwards, the student's 4-bit artifact
is the model that was validated (docs/FINDINGS.md).
"""

from collections.abc import Iterator, Sequence
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
    if not recipe.asymmetric_blocks:
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


# a grid linear of SmolLM2-135M (dequantized from its Q4_1 GGUF) sits on its grid to the last bit (mean distance 0);
# Gaussian weights sit a quarter of a block's step from theirs on average
ON_GRID_MEAN_STEPS = 0.01


def lies_on_grid(model: nn.Module, group: int) -> bool:
    """True when `model` has grid linears (`grid_linears`) and their weights are their own asymmetric 4-bit
    quantization in blocks of `group`: on average within ON_GRID_MEAN_STEPS of a block's step of it."""
    distance, count = 0.0, 0
    with torch.no_grad():
        for linear in grid_linears(model, group):
            weight = linear.weight.detach().float()
            blocks = weight.unflatten(1, (-1, group))
            steps = ((blocks.amax(-1) - blocks.amin(-1)) / 15).clamp_min(torch.finfo(torch.float32).tiny)
            distance += ((weight - quantized_blocks(weight, group)).abs().unflatten(1, (-1, group))
                         / steps[..., None]).sum().item()
            count += weight.numel()
    return count > 0 and distance / count <= ON_GRID_MEAN_STEPS


def grid_for_recovery(teacher: nn.Module, recipes: Sequence[str]) -> str | None:
    """Fit's default for quantization-aware recovery: the first of `recipes` with an asymmetric 4-bit grid
    (`grid_of`) when the teacher's weights already lie on it (a model that came as a Q4_1 GGUF: a student recovered
    in float leaves it, and its 4-bit artifact fails verification), else None (float students)."""
    from edgeprune.quantize.recipes import RECIPES

    for name in recipes:
        recipe = RECIPES.get(name)
        if recipe.asymmetric_blocks:
            return name if lies_on_grid(teacher, recipe.group_size) else None
    return None
