"""Quantization-aware recovery: the student's linears trained through the 4-bit grid their artifact stores.

Distillation moves every weight off the grid it came on. SmolLM2's weights come from a Q4_1 GGUF, so `litert-int4`
(asymmetric blocks of 32, edgeprune/quantize/block_offsets.py) holds the dense model exactly; a recovered student
quantized after training lost that (a pruned SmolLM2 recovered in float: cosine 0.969 through its litert-int4
program, refused). Trained through its own asymmetric 4-bit projection (straight-through: the forward multiplies by
the quantized weight, the gradient reaches the float one) and left on it afterwards, the student's 4-bit artifact
is the model that was validated (docs/FINDINGS.md).

A recipe that stores the output layer at 4 bits too (`litert-int4-all`, `int4-decoder-all`: GPTQ places it at export,
edgeprune/quantize/tied_output.py) has it trained the same way: placed by GPTQ on what it sees when training starts,
then trained through its grid, its tied embedding table looking rows up on that grid. Two SmolLM2 layers removed:
validation perplexity through the litert-int4-all program 45.67, against 46.09 with the output layer trained in float
and placed by GPTQ afterwards, and 45.83 placed first and then frozen (docs/FINDINGS.md, 2026-12-07, second session).
"""

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from edgeprune.errors import UserInputError
from edgeprune.quantize.block_offsets import LEVELS, grid_linears, quantized_blocks
from edgeprune.quantize.formats import output_layer
from edgeprune.quantize.gptq import block_step, gptq_blocks, observed_moment
from edgeprune.quantize.tied_output import holder_of


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


class StraightThrough(torch.autograd.Function):
    """The forward's `quantized`, the gradient `weight`'s as if it were used unquantized (one tensor less than
    weight + (quantized − weight).detach(): the output layer is a decoder's largest matrix)."""

    @staticmethod
    def forward(ctx: object, weight: torch.Tensor, quantized: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
        return quantized

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ARG004
        return grad, None


def output_grid(weight: torch.Tensor, group: int) -> torch.Tensor:
    """`weight` [rows, cols] rounded to the grid GPTQ places an output layer on (edgeprune/quantize/gptq.py):
    asymmetric 4-bit blocks of `group` columns, each block's minimum and a bfloat16 step of its range / 15. Placed
    again by GPTQ, a weight on this grid comes back as it is. Rows are independent: a table's looked-up rows round
    as the whole table would."""
    # not block_offsets.quantized_blocks: its steps are float, not GPTQ's bfloat16 ones, and its symmetric part plus
    # offsets takes more passes over what is here a decoder's largest matrix, every training step
    blocks = weight.detach().float().unflatten(-1, (-1, group))
    low, high = torch.aminmax(blocks, dim=-1, keepdim=True)
    step = block_step(low, high)
    safe = torch.where(step > 0, step, torch.ones_like(step))
    codes = (blocks - low).div_(safe).round_().clamp_(0, LEVELS)
    return codes.mul_(step).add_(low).flatten(-2).to(weight.dtype)


class OutputBlocks(nn.Module):
    """A weight parametrization: `output_grid` of the weight, with the identity's gradient."""

    def __init__(self, group: int) -> None:
        super().__init__()
        self.group = group

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            quantized = output_grid(weight, self.group)
        return StraightThrough.apply(weight, quantized)


class GridLookup(nn.Module):
    """While training, an embedding table tied to the output layer: rows of the shared float weight looked up and
    rounded to `output_grid` (straight-through), as the program's table reads the output layer's codes."""

    def __init__(self, table: nn.Embedding, group: int) -> None:
        super().__init__()
        self.weight, self.group, self.padding_idx = table.weight, group, table.padding_idx

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = F.embedding(ids, self.weight, self.padding_idx)
        with torch.no_grad():
            quantized = output_grid(rows, self.group)
        return StraightThrough.apply(rows, quantized)


def place_output_layer(model: nn.Module, group: int, calibration: Callable[[], object]) -> nn.Linear | None:
    """Put `model`'s output layer (and so a table tied to it) on its 4-bit grid, in place, where GPTQ places it for
    the inputs it sees while `calibration()` runs the model; the layer, or None when there is none or its width has
    no whole blocks of `group`."""
    head = output_layer(model)
    if head is None or head.in_features % group:
        return None
    symmetric, offsets = gptq_blocks(head.weight, observed_moment(head, calibration), group)
    with torch.no_grad():
        # GPTQ may leave a block short of its lowest or highest code: snapped onto its own min/max grid, the
        # export's GPTQ finds the layer exactly where training left it
        head.weight.copy_(output_grid(symmetric + offsets.repeat_interleave(group, dim=1), group))
    return head


@contextmanager
def output_layer_trained_on_grid(model: nn.Module, head: nn.Linear, group: int) -> Iterator[None]:
    """While open, `head` multiplies by `output_grid` of its weight (the float weight trains underneath) and a table
    tied to it looks its rows up on the same grid; on closing the weight is left on the grid and the table reads
    it again."""
    table = next((module for module in model.modules()
                  if isinstance(module, nn.Embedding) and module.weight is head.weight), None)
    holder = holder_of(model, "get_input_embeddings", table) if table is not None else None
    parametrize.register_parametrization(head, "weight", OutputBlocks(group))
    if holder is not None:
        holder.set_input_embeddings(GridLookup(table, group))
    try:
        yield
    finally:
        parametrize.remove_parametrizations(head, "weight", leave_parametrized=True)
        if holder is not None:
            table.weight = head.weight  # tied again, whatever removing the parametrization did to the Parameter
            holder.set_input_embeddings(table)


def trains_output_layer(recipe_name: str) -> bool:
    """True when `recipe_name` stores a language model's output layer on a 4-bit grid, so that quantization-aware
    recovery trains it through that grid too (`litert-int4-all`, `int4-decoder-all`)."""
    from edgeprune.quantize.recipes import RECIPES

    return RECIPES.get(recipe_name).output_layer == "int4"


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
def trained_on_grid(model: nn.Module, group: int | None,
                    output_calibration: Callable[[], object] | None = None) -> Iterator[int]:
    """While open, `model`'s grid linears (`grid_linears`: not the output layer, whole blocks wide) multiply by
    their asymmetric 4-bit quantization (the float weights train underneath); on closing each weight is left on its
    grid. With `output_calibration` (runs the model on calibration batches), the output layer is first placed by
    GPTQ on what it sees (`place_output_layer`) and then trained through its grid as well
    (`output_layer_trained_on_grid`). Yields how many linears; `group` None: none."""
    linears = grid_linears(model, group) if group else []
    for linear in linears:
        parametrize.register_parametrization(linear, "weight", AsymmetricBlocks(group))
    try:
        with ExitStack() as stack:
            head = place_output_layer(model, group, output_calibration) if group and output_calibration else None
            if head is not None:
                stack.enter_context(output_layer_trained_on_grid(model, head, group))
            yield len(linears) + (head is not None)
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
    """Fit's default for quantization-aware recovery, when the teacher's weights already lie on an asymmetric 4-bit
    grid (a model that came as a Q4_1 GGUF: a student recovered in float leaves it, and its 4-bit artifact fails
    verification): the ladder's recipe with such a grid (`grid_of`) that stores the output layer on one as well
    (`trains_output_layer`: its student is then at home in the others too, whose output layer is int8), else the
    first with such a grid. None otherwise (float students)."""
    from edgeprune.quantize.recipes import RECIPES

    gridded = [name for name in recipes if RECIPES.get(name).asymmetric_blocks]
    if not gridded:
        return None
    name = next((name for name in gridded if trains_output_layer(name)), gridded[0])
    return name if lies_on_grid(teacher, RECIPES.get(name).group_size) else None
