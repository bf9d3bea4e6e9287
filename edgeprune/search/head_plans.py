"""Which heads a candidate of the search removes: global top-k over the layers that stay, whole layers chosen by
angular distance, and for grouped-query attention only the counts whole KV groups allow (a plan that asks for
another count would break the layer: `edgeprune.models.llama.gqa_removal_is_valid`)."""

import dataclasses

import numpy as np
from torch import nn

from edgeprune.importance import HeadScores
from edgeprune.models import adapter_for
from edgeprune.pruning import Constraints, PruningPlan, nearest_reachable, plan_global_topk, reachable_head_plans
from edgeprune.search.options import FitOptions
from edgeprune.search.shared import SharedWork, calibration_inputs
from edgeprune.tasks.base import Task


class HeadPlanner:
    """The head plans of one teacher and one ranking, cached per number of layers removed."""

    def __init__(self, teacher: nn.Module, scores: HeadScores, task: Task, options: FitOptions,
                 shared: SharedWork) -> None:
        self.teacher, self.scores, self.task, self.options, self.shared = teacher, scores, task, options, shared
        self.constraints = Constraints.for_model(teacher, options.min_heads_per_layer)
        self.layers = len(adapter_for(teacher).attention_blocks(teacher))
        self.gqa_plans: dict[int, dict[int, PruningPlan]] = {}  # layers removed → reachable grouped-query plans

    def removed_layers(self, count: int) -> list[int]:
        """The `count` consecutive layers of the teacher that change its hidden states least (angular distance)."""
        if count == 0:
            return []
        if count not in self.shared.removed_layers:
            from edgeprune.importance import score_layers

            inputs = calibration_inputs(self.task, self.options)
            scores = score_layers(self.teacher, inputs, "angular-distance", block_size=count)
            start = int(np.argmin(scores.scores))
            self.shared.removed_layers[count] = list(range(start, start + count))
        return self.shared.removed_layers[count]

    def head_counts(self, layers_removed: int = 0) -> list[int]:
        """Heads-removed counts the search tries: multiples of the step up to all removable in the kept layers."""
        gone = set(self.removed_layers(layers_removed))
        blocks = adapter_for(self.teacher).attention_blocks(self.teacher)
        removable = sum(max(0, b.num_heads - self.options.min_heads_per_layer)
                        for i, b in enumerate(blocks) if i not in gone)
        step = self.options.head_step or max(1, self.layers)
        ladder = sorted(set(range(0, removable + 1, step)) | {removable})
        if self.constraints.kv_heads is None:
            return ladder
        reachable = self.reachable_plans(layers_removed)  # grouped-query: the counts whole KV groups allow
        return sorted({nearest_reachable(reachable, count) for count in ladder})

    def plan(self, heads_removed: int, layers_removed: int = 0) -> PruningPlan:
        """Global top-k over the layers that stay (a removed layer's heads go with it); with grouped-query
        attention, the plan that removes exactly `heads_removed` query heads in valid groups."""
        if self.constraints.kv_heads is None:
            return plan_global_topk(self.layer_scores(layers_removed), heads_removed, constraints=self.constraints)
        reachable = self.reachable_plans(layers_removed)
        if heads_removed not in reachable:
            raise ValueError(f"no grouped-query plan removes exactly {heads_removed} heads; reachable: "
                             f"{sorted(reachable)}")
        return reachable[heads_removed]

    def layer_scores(self, layers_removed: int) -> HeadScores:
        """The head scores with a removed layer's heads scored +inf (they go with the layer, not one by one)."""
        gone = self.removed_layers(layers_removed)
        if not gone:
            return self.scores
        values = self.scores.scores.copy()
        values[gone] = np.where(np.isnan(values[gone]), np.nan, np.inf)
        return dataclasses.replace(self.scores, scores=values)

    def reachable_plans(self, layers_removed: int) -> dict[int, PruningPlan]:
        if layers_removed not in self.gqa_plans:
            self.gqa_plans[layers_removed] = reachable_head_plans(self.layer_scores(layers_removed), self.constraints)
        return self.gqa_plans[layers_removed]

