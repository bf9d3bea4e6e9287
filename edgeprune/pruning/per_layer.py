"""Per-layer selection: the same number of heads (or a list, one per layer) goes from every layer."""

from edgeprune.errors import UserInputError
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.selection import keep_top, present_heads
from edgeprune.pruning.strategies import SelectionAmount, register_strategy


def plan_per_layer(scores: HeadScores, remove_per_layer: int | list[int],
                   constraints: Constraints | None = None) -> PruningPlan:
    """Remove the lowest-scoring `remove_per_layer` heads within each layer."""
    constraints = constraints or Constraints()
    heads = present_heads(scores)
    counts = [remove_per_layer] * len(heads) if isinstance(remove_per_layer, int) else list(remove_per_layer)
    if len(counts) != len(heads):
        raise UserInputError(f"remove_per_layer has {len(counts)} entries; the model has {len(heads)} layers")
    for layer, (count, present) in enumerate(zip(counts, heads, strict=True)):
        if not 0 <= count <= len(present) - constraints.min_heads_per_layer:
            raise UserInputError(f"layer {layer}: can remove 0..{len(present) - constraints.min_heads_per_layer} "
                                 f"of its {len(present)} heads, asked {count}")
    return keep_top(scores, [len(p) - c for p, c in zip(heads, counts, strict=True)], constraints, "per-layer")


@register_strategy("per-layer", ("remove_per_layer",), "heads to remove from each layer")
def select_per_layer(scores: HeadScores, amount: SelectionAmount, constraints: Constraints) -> PruningPlan:
    return plan_per_layer(scores, amount.remove_per_layer, constraints)
