"""Global selection: remove the lowest-scoring heads across all layers at once.

Michel et al. (2019) prune globally after normalizing scores per layer; a minimum per layer keeps
every layer's attention alive.
"""

from edgeprune.errors import UserInputError
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.selection import keep_top, present_heads
from edgeprune.pruning.strategies import SelectionAmount, register_strategy


def plan_global_topk(scores: HeadScores, remove: int, min_heads_per_layer: int = 1,
                     constraints: Constraints | None = None) -> PruningPlan:
    """Remove the `remove` least important heads overall, never leaving a layer under the minimum.

    With `heads_multiple` > 1, layers round their kept count up, so fewer heads may go than asked.
    """
    constraints = constraints or Constraints(min_heads_per_layer=min_heads_per_layer)
    heads = present_heads(scores)
    removable = sum(max(0, len(h) - constraints.min_heads_per_layer) for h in heads)
    if not 0 <= remove <= removable:
        raise UserInputError(f"cannot remove {remove} heads: between 0 and {removable} can go while keeping "
                             f"{constraints.min_heads_per_layer} per layer")
    values = scores.scores
    order = sorted(((values[layer, h], layer, h) for layer, hs in enumerate(heads) for h in hs))
    keep_counts = [len(h) for h in heads]
    removed = 0
    for _, layer, _ in order:
        if removed == remove:
            break
        if keep_counts[layer] > constraints.min_heads_per_layer:
            keep_counts[layer] -= 1
            removed += 1
    return keep_top(scores, keep_counts, constraints, "global-topk")


@register_strategy("global-topk", ("remove",), "heads to remove in all")
def select_global_topk(scores: HeadScores, amount: SelectionAmount, constraints: Constraints) -> PruningPlan:
    return plan_global_topk(scores, amount.remove, constraints=constraints)


def reachable_head_plans(scores: HeadScores, constraints: Constraints) -> dict[int, PruningPlan]:
    """Every global top-k plan, keyed by the number of heads it really removes: the first (least) request that
    removes that many wins. Without grouped-query attention every count 0..removable is there, each the plan
    `plan_global_topk` makes for it; with it, a layer's removal snaps to whole KV groups or the same number of
    heads from every group (`round_to_gqa`), so some counts cannot be reached and are absent. A search over
    these keys asks only for structures that exist, and the count it reports is the one removed."""
    heads = present_heads(scores)
    removable = sum(max(0, len(h) - constraints.min_heads_per_layer) for h in heads)
    absent = sum(scores.scores.shape[1] - len(h) for h in heads)  # gone before these scores (NaN)
    plans: dict[int, PruningPlan] = {}
    for remove in range(removable + 1):
        plan = plan_global_topk(scores, remove, constraints=constraints)
        plans.setdefault(plan.heads_removed - absent, plan)
    return plans


def nearest_reachable(plans: dict[int, PruningPlan], wanted: int) -> int:
    """The reachable count closest to `wanted` (the smaller on a tie)."""
    return min(plans, key=lambda count: (abs(count - wanted), count))
