"""Iterative pruning: remove a share of the heads, re-score the smaller model, repeat.

Michel et al. (2019, section 5) re-estimate importance after each removal step; heads that looked
redundant next to a twin can become essential once the twin is gone.
"""

import math
from collections.abc import Callable, Iterable

from torch import nn

from edgeprune.importance import score_heads
from edgeprune.importance.base import Batch, HeadScores, LossFn
from edgeprune.models import adapter_for
from edgeprune.models.base import dense_head_count
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.global_topk import plan_global_topk
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.selection import present_heads
from edgeprune.pruning.surgery import apply_plan


def current_plan(model: nn.Module, strategy: str = "", criterion: str = "") -> PruningPlan:
    """The plan that describes `model` as it is now, in dense head indices."""
    blocks = adapter_for(model).attention_blocks(model)
    dense = dense_head_count(blocks)
    return PruningPlan([dense] * len(blocks), [list(b.original_heads) for b in blocks], criterion, strategy)


def iterative_prune(
    model: nn.Module,
    batches: Callable[[], Iterable[Batch]],
    remove: int,
    steps: int,
    criterion: str = "taylor",
    loss_fn: LossFn | None = None,
    constraints: Constraints | None = None,
    between_steps: Callable[[nn.Module, int], None] | None = None,
) -> PruningPlan:
    """Remove `remove` heads from `model` in place over `steps` rounds of score → remove.

    `batches()` yields fresh scoring data each round; `between_steps(model, step)` runs after each
    removal (recovery goes there).
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    constraints = constraints or Constraints()
    removed = 0
    for step in range(steps):
        share = math.ceil((remove - removed) / (steps - step))
        if share <= 0:
            break
        scores = score_heads(model, batches(), criterion, loss_fn).normalize_per_layer()
        before = current_plan(model)
        # the grouped-query layout changes as groups go, so it is read afresh every step
        step_constraints = Constraints.for_model(model, constraints.min_heads_per_layer, constraints.heads_multiple)
        plan = plan_global_topk(scores, min(share, _removable(scores, step_constraints)), constraints=step_constraints)
        apply_plan(model, plan)
        if plan.heads_kept == before.heads_kept:
            break  # the constraints allow no further removal
        removed += before.heads_kept - plan.heads_kept
        if between_steps is not None:
            between_steps(model, step)
    return current_plan(model, f"iterative(steps={steps}, {constraints.describe()})", criterion)


def _removable(scores: HeadScores, constraints: Constraints) -> int:
    return sum(max(0, len(h) - constraints.min_heads_per_layer) for h in present_heads(scores))
