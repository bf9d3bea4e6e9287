"""Linears that read the same input, computed as one: a layer's query, key and value projections, and its MLP's gate
and up projections.

A decode step of a small decoder is hundreds of small ops, and a runtime pays for each: on LiteRT (XNNPACK, 2
threads) a SmolLM2-135M step is about 2,400 ops, and every FULLY_CONNECTED is split across the thread pool and
joined again. One FULLY_CONNECTED of the rows of q, k and v (and one of gate and up), split afterwards, is the same
arithmetic in fewer ops: 5 % off a SmolLM2 decode step (docs/FINDINGS.md, 2026-12-06, fourth session). Each output
row depends on its own weights only, so the fused layer's per-row (int8) and per-row-and-block (4-bit) quantization
is each original's.

The model's own attention and MLP code still calls `q_proj(x)`, `k_proj(x)` and `v_proj(x)` one after the other:
each becomes a `ProjectionPart` of one shared `FusedProjection`, whose first part called computes every row and
whose later parts, called with that same input tensor, take their slice of that result. A part called with any other
input, or a second time, computes the fused layer again, so the result never depends on the order the model happens
to call them in; once every part has its rows, nothing is kept.
"""

import contextlib
from collections.abc import Iterator, Sequence
from typing import cast

import torch
from torch import nn

from edgeprune.quantize.block_offsets import BlockOffsetLinear

# attribute names of the linears a module calls on one input (Llama, Qwen2, Mistral, Gemma: attention and MLP)
SHARED_INPUT_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class FusedProjection(nn.Module):
    """`linears` (same input width, same kind) stacked by rows into one `fused` layer."""

    def __init__(self, linears: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.sizes = [linear.out_features for linear in linears]
        self.fused = stacked(linears)
        self.forget()

    def forget(self) -> None:
        self.last_input: torch.Tensor | None = None
        self.last_parts: tuple[torch.Tensor, ...] = ()
        self.taken: set[int] = set()

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Rows `index` of the fused output for `x`: computed for every part at once, unless this is the same input
        as the last call and that part has not been handed out yet."""
        if self.last_input is not x or index in self.taken:
            self.forget()
            self.last_input, self.last_parts = x, self.fused(x).split(self.sizes, dim=-1)
        self.taken.add(index)
        output = self.last_parts[index]
        if len(self.taken) == len(self.sizes):  # every part has its rows: nothing is kept past the last
            self.forget()
        return output


class ProjectionPart(nn.Module):
    """What was one of the fused linears: its rows of the shared projection's output."""

    def __init__(self, shared: FusedProjection, index: int) -> None:
        super().__init__()
        self.index, self.in_features, self.out_features = index, shared.fused.in_features, shared.sizes[index]
        if index == 0:
            self.shared = shared
        else:  # registered under the first part only: module walks (torchao's quantize_) must meet its weights once
            self.__dict__["shared"] = shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared.part(x, self.index)


def stacked(linears: Sequence[nn.Linear]) -> nn.Linear:
    """One layer whose rows are `linears`' rows in order: an nn.Linear, or a BlockOffsetLinear whose symmetric parts
    and offsets are stacked alike (each row's 4-bit quantization is its own)."""
    first = linears[0]
    if len({type(linear) for linear in linears}) > 1 or {linear.in_features for linear in linears} != {
            first.in_features}:
        raise ValueError("only linears of one kind and one input width can be fused")
    if len({linear.bias is None for linear in linears}) > 1:
        raise ValueError("only linears that all have a bias, or none, can be fused")
    weight = torch.cat([linear.weight.detach() for linear in linears])
    fused = nn.Linear(first.in_features, len(weight), bias=first.bias is not None, device=weight.device,
                      dtype=weight.dtype)
    fused.weight = nn.Parameter(weight)
    if first.bias is not None:
        fused.bias = nn.Parameter(torch.cat([linear.bias.detach() for linear in linears]))
    if not isinstance(first, BlockOffsetLinear):
        return fused
    split = cast(Sequence[BlockOffsetLinear], linears)
    if len({linear.group for linear in split}) > 1:
        raise ValueError("only 4-bit linears of one block width can be fused")
    return BlockOffsetLinear(fused, first.group, torch.cat([linear.block_offsets.weight.detach() for linear in split]))


def fuse_projections(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """In place: in every module of `model` holding all the linears of one of SHARED_INPUT_GROUPS (same kind, same
    input width), those linears become parts of one fused projection. Returns what was replaced, (module, name,
    original linear), for `projections_fused` to put back."""
    replaced = []
    for module in list(model.modules()):
        for names in SHARED_INPUT_GROUPS:
            linears = [getattr(module, name, None) for name in names]
            if not all(isinstance(linear, nn.Linear) for linear in linears):
                continue
            try:
                shared = FusedProjection(linears)
            except ValueError:
                continue  # e.g. a pruned layer whose projections differ in kind: left as it is
            for index, (name, linear) in enumerate(zip(names, linears, strict=True)):
                setattr(module, name, ProjectionPart(shared, index))
                replaced.append((module, name, linear))
    return replaced


@contextlib.contextmanager
def projections_fused(model: nn.Module) -> Iterator[int]:
    """`model` with its projections fused (`fuse_projections`) inside the block, its own linears back after it: the
    fused copies of the weights are the only memory it adds. Yields how many projections became parts."""
    replaced = fuse_projections(model)
    try:
        yield len(replaced)
    finally:
        for module, name, linear in replaced:
            setattr(module, name, linear)
