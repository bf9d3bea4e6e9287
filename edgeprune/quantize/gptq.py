"""GPTQ (Frantar et al., 2022, "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained Transformers")
onto the asymmetric 4-bit blocks of edgeprune/quantize/block_offsets.py.

Rounding each weight to its nearest code minimizes the error of the weights; GPTQ minimizes the error of the layer's
outputs on real inputs, ‖(W − Q)·X‖², by quantizing one input column at a time and spreading its error over the
columns not yet quantized, weighted by the inverse of the inputs' second moment H = X·Xᵀ. On SmolLM2-135M's output
layer (49,152 × 576, blocks of 32), rounding cost +6.7 % perplexity and GPTQ +1.4 % (docs/FINDINGS.md, 2026-12-06,
fifth session).

Written here rather than taken from a library: the maintained GPTQ packages (gptqmodel, auto-gptq, torchao's
GPTQ) need CUDA kernels or pack their own formats, and this grid is LiteRT's split one: a bfloat16 step per block
(what XNNPACK's blockwise kernels read, so that the codes stay exact on the runtime) and a float minimum.
"""

from collections.abc import Callable, Iterable

import torch
from torch import nn

from edgeprune.quantize.block_offsets import LEVELS, SHIFT

DAMPING = 0.01  # of H's mean diagonal, added to its diagonal: GPTQ's default, keeps the Cholesky factor stable


def input_moment(model: nn.Module, linear: nn.Linear, batches: Iterable[tuple[torch.Tensor, ...]]) -> torch.Tensor:
    """H = Σ x·xᵀ / n over every input row `linear` sees while `model` runs on each batch (float64, in × in)."""

    def run() -> None:
        for batch in batches:
            model(*batch)

    return observed_moment(linear, run)


def observed_moment(linear: nn.Linear, run: Callable[[], object]) -> torch.Tensor:
    """H = Σ x·xᵀ / n over every input row `linear` sees while `run()` runs (without gradients): float64, in × in.
    ValueError when it saw none."""
    moment = torch.zeros(linear.in_features, linear.in_features, dtype=torch.float64)
    rows = 0

    def observe(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        nonlocal rows
        flat = inputs[0].detach().reshape(-1, linear.in_features).double()
        moment.add_(flat.T @ flat)
        rows += flat.shape[0]

    hook = linear.register_forward_pre_hook(observe)
    try:
        with torch.no_grad():
            run()
    finally:
        hook.remove()
    if rows == 0:
        raise ValueError("the calibration batches never reached the layer")
    return moment / rows


def block_step(low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """A block's step on the grid GPTQ places weights on: its range / 15 rounded to bfloat16 (what XNNPACK's blockwise
    kernels read), in `low`'s dtype."""
    return ((high - low) / LEVELS).float().to(torch.bfloat16).to(low.dtype)


def gptq_blocks(weight: torch.Tensor, moment: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_sym, C) as `block_offsets.asymmetric_blocks` returns them, for `weight` [rows, cols] quantized by GPTQ
    against the input moment `moment` [cols, cols]: each block's step (bfloat16) and minimum come from the block's
    min/max once the error of the blocks before it has been spread into it, its codes from GPTQ's column order."""
    rows, cols = weight.shape
    if cols % group:
        raise ValueError(f"a weight of {cols} columns has no whole blocks of {group}")
    work = weight.detach().double().clone()
    moment = moment.double().clone()
    unseen = torch.diag(moment) == 0  # an input that is always zero: its weights cannot matter
    moment[unseen, unseen] = 1.0
    work[:, unseen] = 0.0
    moment += DAMPING * torch.diag(moment).mean() * torch.eye(cols, dtype=moment.dtype)
    # the upper Cholesky factor of H⁻¹: row j holds how column j's error moves the columns after it
    inverse = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(moment)), upper=True)
    symmetric = torch.zeros(rows, cols, dtype=torch.float64)
    offsets = torch.zeros(rows, cols // group, dtype=torch.float64)
    for start in range(0, cols, group):
        end = start + group
        block = work[:, start:end]
        low = block.amin(1)
        step = block_step(low, block.amax(1))
        safe = torch.where(step > 0, step, torch.ones_like(step))
        errors = torch.zeros(rows, group, dtype=torch.float64)
        for column in range(group):  # GPTQ's lazy batch: within the block column by column, then one update
            index = start + column
            codes = torch.round((block[:, column] - low) / safe).clamp(0, LEVELS)
            symmetric[:, index] = step * (codes - SHIFT)
            error = (block[:, column] - (step * codes + low)) / inverse[index, index]
            block[:, column + 1:] -= error[:, None] * inverse[index, index + 1:end][None, :]
            errors[:, column] = error
        offsets[:, start // group] = low + SHIFT * step
        work[:, end:] -= errors @ inverse[start:end, end:]
    return symmetric.float(), offsets.float()
