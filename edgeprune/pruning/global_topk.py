"""Global selection: remove the lowest-scoring heads across all layers at once.

Michel et al. (2019) prune globally after normalizing scores per layer; a minimum per layer keeps
every layer's attention alive.
"""

import numpy as np

from edgeprune.errors import UserInputError
from edgeprune.importance.base import HeadScores
from edgeprune.pruning.plan import PruningPlan


def plan_global_topk(scores: HeadScores, remove: int, min_heads_per_layer: int = 1) -> PruningPlan:
    """Remove the `remove` least important heads, never leaving a layer with fewer than the minimum."""
    values = scores.scores
    layers, width = values.shape
    num_heads = [int(np.sum(~np.isnan(row))) for row in values]
    if min_heads_per_layer < 1:
        raise UserInputError(f"min_heads_per_layer must be at least 1, got {min_heads_per_layer}")
    removable = sum(max(0, n - min_heads_per_layer) for n in num_heads)
    if not 0 <= remove <= removable:
        raise UserInputError(
            f"cannot remove {remove} heads: between 0 and {removable} can go while keeping "
            f"{min_heads_per_layer} per layer"
        )
    kept = [set(np.flatnonzero(~np.isnan(row)).tolist()) for row in values]
    # stable order: ties broken by layer, then head, so plans are reproducible
    order = sorted(
        ((values[layer, head], layer, head) for layer in range(layers) for head in kept[layer]),
        key=lambda item: (item[0], item[1], item[2]),
    )
    removed = 0
    for _, layer, head in order:
        if removed == remove:
            break
        if len(kept[layer]) > min_heads_per_layer:
            kept[layer].discard(head)
            removed += 1
    return PruningPlan(
        num_heads=[width] * layers if all(n == width for n in num_heads) else num_heads,
        kept_heads=[sorted(k) for k in kept],
        criterion=scores.criterion,
        strategy=f"global-topk(min_heads_per_layer={min_heads_per_layer})",
    )
