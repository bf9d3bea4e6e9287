"""Structural head removal: smaller dense tensors, module attributes and config kept true."""

from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.pruning.plan import PruningPlan


def prune_heads(model: nn.Module, remove: dict[int, list[int]]) -> nn.Module:
    """Remove the listed heads (indices into each layer's dense heads) in place; returns `model`."""
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    for layer, heads in remove.items():
        if not 0 <= layer < len(blocks):
            raise UserInputError(f"layer {layer} does not exist; the model has layers 0..{len(blocks) - 1}")
        original = blocks[layer].original_heads
        missing = sorted(set(heads) - set(original))
        if missing:
            raise UserInputError(f"layer {layer}: heads {missing} are not in the model (present: {list(original)})")
        adapter.remove_heads(model, layer, [original.index(h) for h in sorted(set(heads))])
    return model


def apply_plan(model: nn.Module, plan: PruningPlan) -> nn.Module:
    """Prune `model` (dense or partly pruned) in place down to the heads `plan` keeps."""
    blocks = adapter_for(model).attention_blocks(model)
    if len(blocks) != len(plan.kept_heads):
        raise UserInputError(f"plan has {len(plan.kept_heads)} layers, the model has {len(blocks)}")
    remove = {}
    for block, kept in zip(blocks, plan.kept_heads, strict=True):
        absent = sorted(set(kept) - set(block.original_heads))
        if absent:
            raise UserInputError(f"plan keeps heads {absent} of layer {block.layer}, which the model no longer has")
        remove[block.layer] = [h for h in block.original_heads if h not in set(kept)]
    return prune_heads(model, remove)


def predicted_parameter_count(model: nn.Module, plan: PruningPlan) -> int:
    """Exact parameter count of `model` after `apply_plan(model, plan)`, without doing it."""
    adapter = adapter_for(model)
    total = sum(p.numel() for p in model.parameters())
    for block, kept in zip(adapter.attention_blocks(model), plan.kept_heads, strict=True):
        removed = [i for i, h in enumerate(block.original_heads) if h not in set(kept)]
        total -= adapter.removed_parameter_count(model, block.layer, removed)
    return total
