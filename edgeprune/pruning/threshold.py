"""Threshold selection: remove every head scoring below a value, or below a quantile of all scores."""

import numpy as np

from edgeprune.errors import UserInputError
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.selection import keep_top, present_heads
from edgeprune.pruning.strategies import SelectionAmount, register_strategy


def plan_threshold(scores: HeadScores, threshold: float | None = None, quantile: float | None = None,
                   constraints: Constraints | None = None) -> PruningPlan:
    """Remove heads with score < `threshold`, or < the `quantile` (0..1) of present heads' scores.

    Layers keep their best heads up to the minimum even when all of them fall below the line.
    """
    if (threshold is None) == (quantile is None):
        raise UserInputError("give exactly one of threshold (an absolute score) or quantile (0..1)")
    if quantile is not None:
        if not 0.0 <= quantile <= 1.0:
            raise UserInputError(f"quantile must be within 0..1, got {quantile}")
        threshold = float(np.nanquantile(scores.scores, quantile))
    constraints = constraints or Constraints()
    keep_counts = [sum(1 for h in heads if scores.scores[layer, h] >= threshold)
                   for layer, heads in enumerate(present_heads(scores))]
    label = f"threshold({threshold:.6g})" if quantile is None else f"threshold(quantile={quantile})"
    return keep_top(scores, keep_counts, constraints, label)


@register_strategy("threshold", ("threshold", "quantile"), "an absolute score, or a quantile 0..1 of the scores")
def select_threshold(scores: HeadScores, amount: SelectionAmount, constraints: Constraints) -> PruningPlan:
    return plan_threshold(scores, amount.threshold, amount.quantile, constraints)
