"""Selection strategies and structural surgery."""

from edgeprune.pruning.global_topk import plan_global_topk
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.surgery import apply_plan, predicted_parameter_count, prune_heads

__all__ = ["PruningPlan", "apply_plan", "plan_global_topk", "predicted_parameter_count", "prune_heads"]
