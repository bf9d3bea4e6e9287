"""Prune → recover schedules: one-shot (remove every target head, then distill) or iterative (remove a share,
distill a little, re-score, repeat), optionally after dropping the most redundant layers."""

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.importance import score_heads, score_layers
from edgeprune.importance.base import Batch, LayerScores
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import Constraints, PruningPlan, apply_plan, current_plan, iterative_prune, plan_global_topk
from edgeprune.recovery.config import DistillConfig, DistillResult
from edgeprune.recovery.data import DistillData
from edgeprune.recovery.distill import distill

SCHEDULES = ("one-shot", "iterative")


@dataclass
class LayerRemoval:
    removed: list[int]  # teacher (dense) layer indices that went
    layer_map: list[int]  # student layer i ↔ teacher layer layer_map[i]
    scores: LayerScores


@dataclass
class Recovered:
    """What `prune_and_recover` did: the final plan, the model (pruned in place) and each distillation."""

    plan: PruningPlan
    model: nn.Module
    distillations: list[DistillResult] = field(default_factory=list)
    layers: LayerRemoval | None = None
    seconds: float = 0.0
    recovery_seconds: float = 0.0


def remove_redundant_layers(model: nn.Module, batches: Iterable[Batch], count: int) -> LayerRemoval:
    """Drop the `count` consecutive layers whose block changes the hidden states least (angular distance,
    Gromov et al. 2024), in place."""
    layers = len(adapter_for(model).layer_modules(model))
    if not 0 < count < layers:
        raise UserInputError(f"can remove 1..{layers - 1} layers of {layers}, not {count}")
    scores = score_layers(model, batches, "angular-distance", block_size=count)
    start = int(np.argmin(scores.scores))
    removed = list(range(start, start + count))
    adapter_for(model).remove_layers(model, removed)
    return LayerRemoval(removed, [i for i in range(layers) if i not in removed], scores)


def prune_and_recover(
    model: nn.Module,
    teacher: nn.Module,
    data: DistillData,
    target_removed: int,
    schedule: str = "one-shot",
    steps: int = 4,
    recover_config: DistillConfig | None = None,
    criterion: str = "taylor",
    constraints: Constraints | None = None,
    remove_layers: int = 0,
    scoring_batches: Callable[[], Iterable[Batch]] | None = None,
    progress: Progress | None = None,
) -> Recovered:
    """Remove `target_removed` heads from `model` (in place) and recover it by distillation from `teacher`.

    one-shot: score once, remove all of them, distill with `recover_config`. iterative: `steps` rounds of
    score → remove a share → distill, each round with 1/steps of the step and time budgets, so both schedules
    spend the same recovery budget. With `remove_layers` n, the n most redundant consecutive layers go first
    and are recovered from with a layer map (counted in the plan as the remaining layers only). Scoring
    uses `scoring_batches` (default: the first training epoch).
    """
    if schedule not in SCHEDULES:
        raise UserInputError(f"unknown schedule {schedule!r}; choose from {', '.join(SCHEDULES)}")
    if target_removed < 0:
        raise UserInputError(f"target_removed must be >= 0, got {target_removed}")
    if model is teacher:
        raise UserInputError("the model to prune is the teacher itself; pass a copy (copy.deepcopy) as `model`")
    started = time.monotonic()
    config = recover_config or DistillConfig()
    progress = progress or Progress()
    scoring = scoring_batches or data.scoring_batches()
    constraints = constraints or Constraints()
    outcome = Recovered(current_plan(model), model)

    def recover(run_config: DistillConfig) -> None:
        began = time.monotonic()
        outcome.distillations.append(distill(model, teacher, data, run_config, progress))
        outcome.recovery_seconds += time.monotonic() - began

    if remove_layers:
        outcome.layers = remove_redundant_layers(model, scoring(), remove_layers)
        progress.note(f"removed layers {outcome.layers.removed} (angular distance)")
        config = config.replace(layer_map=outcome.layers.layer_map)
        recover(config)
    if schedule == "one-shot" or target_removed == 0:
        if target_removed:
            scores = score_heads(model, scoring(), criterion).normalize_per_layer()
            apply_plan(model, plan_global_topk(scores, target_removed, constraints=constraints))
        recover(config)
        outcome.plan = current_plan(model, f"one-shot+distill({constraints.describe()})", criterion)
    else:
        per_round = config.replace(max_steps=max(1, config.max_steps // steps),
                                   max_seconds=None if config.max_seconds is None else config.max_seconds / steps,
                                   warmup_steps=min(config.warmup_steps, math.ceil(config.max_steps / steps / 5)))
        plan = iterative_prune(model, scoring, target_removed, steps, criterion, constraints=constraints,
                               between_steps=lambda _model, _step: recover(per_round))
        outcome.plan = PruningPlan(plan.num_heads, plan.kept_heads, plan.criterion, f"{plan.strategy}+distill")
    outcome.seconds = time.monotonic() - started
    return outcome


def prune_ffn_and_recover(model: nn.Module, teacher: nn.Module, data: DistillData, fraction: float,
                          criterion: str = "activation", recover_config: DistillConfig | None = None,
                          scoring_batches: Callable[[], Iterable[Batch]] | None = None,
                          progress: Progress | None = None) -> tuple[dict[int, list[int]], DistillResult]:
    """Remove `fraction` of every layer's FFN neurons (lowest scores first, equal widths), then distill."""
    from edgeprune.pruning.ffn import plan_neurons, remove_neurons, score_neurons

    if model is teacher:
        raise UserInputError("the model to prune is the teacher itself; pass a copy (copy.deepcopy) as `model`")
    batches = (scoring_batches or data.scoring_batches())() if criterion == "activation" else None
    removed = plan_neurons(score_neurons(model, batches, criterion), fraction)
    remove_neurons(model, removed)
    return removed, distill(model, teacher, data, recover_config, progress)
