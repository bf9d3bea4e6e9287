"""Structural head removal: smaller dense tensors, module attributes and config kept true."""

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.llama import gqa_removal_is_valid
from edgeprune.pruning.compensation import HeadOutputMeans, fold_head_means, measure_head_means
from edgeprune.pruning.plan import PruningPlan

# bias compensation: head means already measured, or batches (keyword inputs of the model) to measure them on
Compensation = HeadOutputMeans | Iterable[Mapping[str, torch.Tensor]]


def _head_means(model: nn.Module, compensation: Compensation | None) -> HeadOutputMeans | None:
    if compensation is None or isinstance(compensation, HeadOutputMeans):
        return compensation
    if isinstance(compensation, Mapping | torch.Tensor | str):
        raise UserInputError("compensation takes HeadOutputMeans or an iterable of batches (dicts of model inputs), "
                             f"got a single {type(compensation).__name__}; wrap one batch in a list")
    return measure_head_means(model, compensation)


def prune_heads(model: nn.Module, remove: dict[int, list[int]], compensate: Compensation | None = None) -> nn.Module:
    """Remove the listed heads (indices into each layer's dense heads) in place; returns `model`.

    With `compensate` (batches to measure on, or `measure_head_means` output for this model), each removed
    head's mean output, projected by its output-projection columns, is folded into that projection's bias
    (see `edgeprune.pruning.compensation`): the result equals the unpruned model with those heads' outputs
    replaced by their means. Without it, removal equals gating the heads to zero.
    """
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    check_removal(model, remove)  # before any surgery: nothing is half cut
    means = _head_means(model, compensate)
    for layer, heads in remove.items():
        positions = [blocks[layer].original_heads.index(h) for h in sorted(set(heads))]
        if means is not None:
            fold_head_means(adapter, model, layer, positions, means)
        adapter.remove_heads(model, layer, positions)
    return model


def check_removal(model: nn.Module, remove: Mapping[int, Iterable[int]]) -> None:
    """UserInputError unless the model can lose these heads (per layer, indices into its dense heads): the layers
    and heads exist, and a grouped-query layer loses whole KV groups or the same number from every group."""
    blocks = adapter_for(model).attention_blocks(model)
    for layer, heads in remove.items():
        if not 0 <= layer < len(blocks):
            raise UserInputError(f"layer {layer} does not exist; the model has layers 0..{len(blocks) - 1}")
        block = blocks[layer]
        missing = sorted(set(heads) - set(block.original_heads))
        if missing:
            raise UserInputError(f"layer {layer}: heads {missing} are not in the model (present: "
                                 f"{list(block.original_heads)})")
        positions = [block.original_heads.index(h) for h in sorted(set(heads))]
        reason = gqa_removal_is_valid(block.num_heads, block.num_kv_heads, positions) \
            if positions and block.num_kv_heads != block.num_heads else None
        if reason:
            raise UserInputError(f"layer {layer}: {reason}")


def apply_plan(model: nn.Module, plan: PruningPlan, compensation: Compensation | None = None) -> nn.Module:
    """Prune `model` (dense or partly pruned) in place down to the heads `plan` keeps.

    `compensation`: as `compensate` of `prune_heads` (batches, or head means measured on this model)."""
    blocks = adapter_for(model).attention_blocks(model)
    if len(blocks) != len(plan.kept_heads):
        raise UserInputError(f"plan has {len(plan.kept_heads)} layers, the model has {len(blocks)}")
    remove = {}
    for block, kept in zip(blocks, plan.kept_heads, strict=True):
        absent = sorted(set(kept) - set(block.original_heads))
        if absent:
            raise UserInputError(f"plan keeps heads {absent} of layer {block.layer}, which the model no longer has")
        remove[block.layer] = [h for h in block.original_heads if h not in set(kept)]
    return prune_heads(model, remove, compensate=compensation)


def predicted_parameter_count(model: nn.Module, plan: PruningPlan) -> int:
    """Exact parameter count of `model` after `apply_plan(model, plan)`, without doing it."""
    adapter = adapter_for(model)
    total = sum(p.numel() for p in model.parameters())
    for block, kept in zip(adapter.attention_blocks(model), plan.kept_heads, strict=True):
        removed = [i for i, h in enumerate(block.original_heads) if h not in set(kept)]
        total -= adapter.removed_parameter_count(model, block.layer, removed)
    return total
