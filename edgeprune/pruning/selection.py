"""Turning a choice of heads to drop into a plan that honours the constraints."""

import numpy as np

from edgeprune.importance.base import HeadScores
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.plan import PruningPlan


def present_heads(scores: HeadScores) -> list[list[int]]:
    """Per layer, the dense indices of heads the model still has (non-NaN scores)."""
    return [np.flatnonzero(~np.isnan(row)).tolist() for row in scores.scores]


def keep_top(scores: HeadScores, keep_counts: list[int], constraints: Constraints, strategy: str) -> PruningPlan:
    """Keep the `keep_counts[l]` highest-scoring present heads of each layer, after the constraints."""
    values = scores.scores
    kept = []
    for layer, heads in enumerate(present_heads(scores)):
        count = constraints.kept_count(keep_counts[layer], len(heads))
        if constraints.kv_heads is not None and constraints.kv_heads[layer] < len(heads):
            from edgeprune.models.llama import round_to_gqa

            drop = set(round_to_gqa([values[layer, h] for h in heads], constraints.kv_heads[layer], len(heads) - count))
            kept.append([h for position, h in enumerate(heads) if position not in drop])
            continue
        # ties broken by head index, so plans are reproducible
        ranked = sorted(heads, key=lambda h, row=values[layer]: (-row[h], h))
        kept.append(sorted(ranked[:count]))
    return PruningPlan(num_heads=[values.shape[1]] * values.shape[0], kept_heads=kept,
                       criterion=scores.criterion, strategy=f"{strategy}({constraints.describe()})")
