"""Asymmetric 4-bit blocks on a runtime whose kernels are symmetric.

A block of `group` weights quantized asymmetrically (min/max, 16 levels: w = d·q + lo, q in 0..15) is the same
matrix as a symmetric 4-bit block plus one offset per block:

    w = d·(q − 8) + (lo + 8·d)        so        W·x = W_sym·x + C·(block sums of x)

where W_sym holds d·k with k = q − 8 in −8..7 (what a symmetric int4 kernel with scale d stores) and C, one value
per row and block, multiplies the sum of each block of `group` inputs. XNNPACK's blockwise 4-bit kernels, which
LiteRT runs, have no zero points (ai-edge-quantizer refuses asymmetric blockwise weights for FULLY_CONNECTED), so
`BlockOffsetLinear` carries the offsets as a small linear of its own over the block sums.

Symmetric blocks cost SmolLM2-135M +32 % perplexity in PyTorch; asymmetric ones cost it nothing, because its weights
come from a Q4_1 GGUF, i.e. already lie on an asymmetric grid of blocks of 32 (docs/FINDINGS.md, 2026-12-06, third
session). On any other model they are the better 4-bit grid of the two.

Both runtimes run the split: LiteRT's exporter splits the converted model and rewrites the quantizer's codes
(edgeprune/export/litert_blocks.py); a recipe quantized in PyTorch for ExecuTorch splits the module and quantizes the
parts with torchao so that they hold it exactly (`quantize_split_linears`).
"""

from collections.abc import Collection

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.quantize.formats import output_layer

LEVELS = 15  # 4 bits: codes 0..15, i.e. 15 steps between a block's minimum and maximum
SHIFT = 8  # q − 8 lies in −8..7, a signed 4-bit code
GRID_TOLERANCE = 1e-5  # worst |k·d − w| relative to d for a weight on its grid: float rounding of d·k, nothing more


class BlockOffsetLinear(nn.Linear):
    """A linear whose weight is the symmetric part d·(q − 8) of an asymmetric 4-bit quantization (blocks of `group`
    input columns), and whose child `block_offsets` (rows × blocks) adds each block's offset lo + 8·d times the sum
    of that block's inputs. Still an nn.Linear, so model adapters and surgery see the layer they know."""

    def __init__(self, linear: nn.Linear, group: int, offsets: torch.Tensor | None = None) -> None:
        """`linear` quantized to asymmetric 4-bit blocks of `group` and split; or, with `offsets` (rows × blocks),
        `linear`'s weight taken as the symmetric part as it is (parts split already, e.g. stacked by rows)."""
        rows, cols = linear.weight.shape
        if cols % group:
            raise ValueError(f"a linear of {cols} inputs has no whole blocks of {group}")
        super().__init__(cols, rows, bias=linear.bias is not None, device=linear.weight.device)
        if offsets is None:
            symmetric, offsets = asymmetric_blocks(linear.weight.detach().float(), group)
        else:
            symmetric = linear.weight.detach().float()
        if offsets.shape != (rows, cols // group):
            raise ValueError(f"offsets of shape {tuple(offsets.shape)} for {rows} rows of {cols // group} blocks")
        self.group = group
        self.weight = nn.Parameter(symmetric)
        if linear.bias is not None:
            self.bias = nn.Parameter(linear.bias.detach().float().clone())
        self.block_offsets = nn.Linear(cols // group, rows, bias=False, device=linear.weight.device)
        self.block_offsets.weight = nn.Parameter(offsets)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block_sums = x.unflatten(-1, (-1, self.group)).sum(-1)
        return F.linear(x, self.weight, self.bias) + self.block_offsets(block_sums)

    def dense_weight(self) -> torch.Tensor:
        """The quantized weight this layer multiplies by (`quantized_blocks` of the original): the symmetric part
        plus each block's offset."""
        return self.weight + self.block_offsets.weight.repeat_interleave(self.group, dim=1)


def asymmetric_blocks(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(W_sym, C) of `weight` [rows, cols] quantized to 4 bits in blocks of `group` columns, min/max per block.

    Every block of W_sym holds d·k with k in −8..7 and its minimum at exactly −8·d (the block's minimum maps to
    q = 0), so a symmetric quantizer that takes d = max|w| / 8 recovers its codes exactly; a constant block has
    d = 0 (W_sym 0, its value in C)."""
    rows, cols = weight.shape
    blocks = weight.reshape(rows, cols // group, group)
    low, high = blocks.amin(-1), blocks.amax(-1)
    step = (high - low) / LEVELS
    safe = torch.where(step > 0, step, torch.ones_like(step))
    codes = torch.round((blocks - low[..., None]) / safe[..., None]).clamp(0, LEVELS)
    symmetric = (step[..., None] * (codes - SHIFT)).reshape(rows, cols)
    return symmetric, low + SHIFT * step


def block_codes(symmetric: np.ndarray, group: int,
                tolerance: float = GRID_TOLERANCE) -> tuple[np.ndarray, np.ndarray]:
    """Codes k (−8..7, int8) and steps d (rows × blocks, float32) with k·d = `symmetric` [rows, cols], a symmetric part
    of asymmetric blocks of `group`, within `tolerance` of a step. Min/max blocks (`asymmetric_blocks`) hold their
    minimum at −8·d, so d = max|w| / 8; a block quantized by GPTQ (edgeprune/quantize/gptq.py) may use fewer codes
    (say −7..6): d = max|w| / m for the largest m in 8..1 that reproduces it. ValueError, naming the worst error in
    steps, when no m does."""
    rows, cols = symmetric.shape
    blocks = symmetric.reshape(rows, cols // group, group).astype(np.float32)
    largest = np.abs(blocks).max(-1)
    steps = np.ones_like(largest)  # an all-zero block: codes 0 at any step
    found = largest == 0
    first_error = None  # at m = 8, for the message
    for widest in range(SHIFT, 0, -1):  # the finest step first
        candidate = np.where(largest > 0, largest / widest, 1.0).astype(np.float32)
        codes = np.clip(np.rint(blocks / candidate[..., None]), -SHIFT, SHIFT - 1)
        error = np.abs(codes * candidate[..., None] - blocks).max(-1) / candidate
        first_error = error if first_error is None else first_error
        fits = (error <= tolerance) & ~found
        steps, found = np.where(fits, candidate, steps), found | fits
        if found.all():
            break
    if not found.all():
        raise ValueError(f"off a 4-bit grid of blocks of {group} by {first_error.max():.3g} of a step")
    codes = np.clip(np.rint(blocks / steps[..., None]), -SHIFT, SHIFT - 1).astype(np.int8)
    return codes.reshape(rows, cols), steps


def pack_int4(codes: np.ndarray) -> bytes:
    """Signed 4-bit codes two to a byte, the first in the low nibble (TFLite's INT4 layout)."""
    flat = codes.reshape(-1).astype(np.uint8) & 0xF
    if flat.size % 2:
        flat = np.append(flat, np.uint8(0))
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


def quantized_blocks(weight: torch.Tensor, group: int) -> torch.Tensor:
    """`weight` [rows, cols] as its asymmetric 4-bit quantization in blocks of `group` columns multiplies."""
    symmetric, offsets = asymmetric_blocks(weight, group)
    return symmetric + offsets.repeat_interleave(group, dim=1)


def grid_linears(model: nn.Module, group: int, skip: Collection[nn.Module] = ()) -> list[nn.Linear]:
    """The linears a 4-bit recipe stores in blocks of `group`: exactly nn.Linear (a BlockOffsetLinear is split
    already), whole blocks wide, neither a language model's output layer (int8, or placed by GPTQ in the -all recipes:
    rounded to 4 bits it costs a decoder most of its quality) nor one of `skip`."""
    skipped = {id(module) for module in skip} | {id(output_layer(model))}
    return [module for module in model.modules()
            if type(module) is nn.Linear and id(module) not in skipped and module.in_features % group == 0]


def split_block_offsets(model: nn.Module, group: int, skip: Collection[nn.Module] = ()) -> int:
    """Replace each of `model`'s grid linears (`grid_linears`) by its BlockOffsetLinear, in place: the model's
    weights become their 4-bit asymmetric quantization. Returns how many were replaced; the other linears stay as
    they are (a runtime stores them at 8 bits)."""
    targets = {id(module) for module in grid_linears(model, group, skip)}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in targets:
                setattr(parent, name, BlockOffsetLinear(child, group))
    return len(targets)


def quantize_split_linears(model: nn.Module) -> list[nn.Module]:
    """Quantize each BlockOffsetLinear of `model` in place for torchao's int8-dynamic-activation linears, so that the
    artifact keeps the split weights' codes: the symmetric part at 4 bits in its blocks with its own steps
    (`block_codes`: d for a min/max block, whatever step a GPTQ block was placed on), its offsets at int8 per row
    (`offset_bytes`). Returns the modules quantized, for later quantization to leave alone. ExecuTorch's XNNPACK
    lowering stores the steps in bfloat16 (within 2⁻⁹ of d; a GPTQ block's steps are bfloat16 already).

    torchao's own symmetric scale, max|w| / 7.5, would re-round the codes: on SmolLM2-135M that second rounding
    (ExecuTorch's int4 recipes, symmetric blocks of the original weights) cost +35 % perplexity where the split costs
    +2 % (docs/FINDINGS.md, 2026-12-06, sixth session)."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, IntxUnpackedToInt8Tensor, quantize_
    from torchao.quantization.granularity import PerAxis

    parts = [module for module in model.modules() if isinstance(module, BlockOffsetLinear)]
    for part in parts:
        symmetric = part.weight.detach().float()
        _codes, steps = block_codes(symmetric.numpy(), part.group)
        steps = torch.from_numpy(steps)
        # no qparams algorithm: the steps and zero points given are the ones stored
        weight = IntxUnpackedToInt8Tensor.from_hp(
            symmetric, (1, part.group), torch.int4, activation_quantization="int8_asym_per_token",
            intx_choose_qparams_algorithm=None, custom_scale=steps,
            custom_zero_point=torch.zeros(steps.shape, dtype=torch.int8))
        part.weight = nn.Parameter(weight, requires_grad=False)
    # torchao cannot quantize a one-column weight (a linear one block wide): its offsets stay in float, a float each
    offsets = {id(part.block_offsets) for part in parts if part.block_offsets.in_features > 1}
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)),
              filter_fn=lambda module, _name: id(module) in offsets)
    return [*parts, *(part.block_offsets for part in parts)]


def offset_bytes(rows: int, cols: int, group: int, row_parameter_bytes: int) -> int:
    """Bytes of the offsets `quantize_split_linears` stores for a linear of `rows` × `cols` split in blocks of
    `group`: an int8 per row and block and the row's quantization parameters (`row_parameter_bytes`: ExecuTorch's
    fp32 scale), or a float per row for a single block."""
    blocks = cols // group
    return rows * 4 if blocks == 1 else rows * (blocks + row_parameter_bytes)
