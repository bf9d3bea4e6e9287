"""Selection strategies, constraints, costs and the structural surgery."""

from edgeprune.pruning.compensation import HeadOutputMeans, measure_head_means
from edgeprune.pruning.constraints import Constraints
from edgeprune.pruning.cost import head_flops, measure_flops, predicted_flops
from edgeprune.pruning.global_topk import nearest_reachable, plan_global_topk, reachable_head_plans
from edgeprune.pruning.hard_concrete import HardConcreteConfig, learn_head_gates, plan_hard_concrete
from edgeprune.pruning.iterative import current_plan, iterative_prune
from edgeprune.pruning.joint import JointPlan, plan_joint, prunable_parameters, prune_jointly
from edgeprune.pruning.per_layer import plan_per_layer
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.strategies import STRATEGIES, SelectionAmount, SelectionStrategy, plan_heads
from edgeprune.pruning.structure import StructureCompensation, StructurePlan, apply_structure, prune
from edgeprune.pruning.surgery import apply_plan, predicted_parameter_count, prune_heads
from edgeprune.pruning.threshold import plan_threshold

__all__ = [
    "STRATEGIES", "Constraints", "HardConcreteConfig", "HeadOutputMeans", "JointPlan", "PruningPlan", "SelectionAmount",
    "SelectionStrategy", "StructureCompensation", "StructurePlan", "apply_plan", "apply_structure", "current_plan",
    "head_flops", "iterative_prune", "learn_head_gates", "measure_flops", "measure_head_means", "plan_global_topk",
    "nearest_reachable", "plan_joint", "prunable_parameters", "reachable_head_plans",
    "plan_hard_concrete", "plan_heads", "plan_per_layer", "plan_threshold", "predicted_flops",
    "predicted_parameter_count", "prune", "prune_heads", "prune_jointly",
]
