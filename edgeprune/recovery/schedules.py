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
from edgeprune.importance.base import Batch, HeadScores, LayerScores, LossFn
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import Constraints, PruningPlan, current_plan, plan_global_topk
from edgeprune.pruning.selection import present_heads
from edgeprune.pruning.structure import StructureCompensation, StructurePlan, apply_structure, ffn_kept_from_removal
from edgeprune.recovery.config import DistillConfig, DistillResult
from edgeprune.recovery.data import DistillData
from edgeprune.recovery.distill import distill
from edgeprune.recovery.losses import task_loss

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


def redundant_layers(model: nn.Module, batches: Iterable[Batch], count: int) -> LayerRemoval:
    """The `count` consecutive layers whose block changes the hidden states least (angular distance, Gromov et
    al. 2024); the model is left as it is."""
    layers = len(adapter_for(model).layer_modules(model))
    if not 0 < count < layers:
        raise UserInputError(f"can remove 1..{layers - 1} layers of {layers}, not {count}")
    scores = score_layers(model, batches, "angular-distance", block_size=count)
    start = int(np.argmin(scores.scores))
    removed = list(range(start, start + count))
    return LayerRemoval(removed, [i for i in range(layers) if i not in removed], scores)


def remove_redundant_layers(model: nn.Module, batches: Iterable[Batch], count: int) -> LayerRemoval:
    """Drop the `count` most redundant consecutive layers (`redundant_layers`) in place."""
    removal = redundant_layers(model, batches, count)
    apply_structure(model, StructurePlan(layers_removed=removal.removed))
    return removal


def plan_closest(scores: HeadScores, target_removed: int, constraints: Constraints) -> PruningPlan:
    """The global top-k plan that removes the number of heads closest to `target_removed` (fewer on a tie).

    Grouped-query layers can only lose heads in steps of their KV-head count (one query head from every
    group, or a whole group), so asking for exactly `target_removed` can land several heads off; nearby asks
    are tried and the closest outcome kept.
    """
    heads = sum(len(h) for h in present_heads(scores))
    removable = sum(max(0, len(h) - constraints.min_heads_per_layer) for h in present_heads(scores))
    if not 0 <= target_removed <= removable:
        raise UserInputError(f"cannot remove {target_removed} heads: between 0 and {removable} can go while keeping "
                             f"{constraints.min_heads_per_layer} per layer")
    width = scores.scores.shape[1]
    best: tuple[tuple[int, int], PruningPlan] | None = None
    for asked in range(max(0, target_removed - width), min(removable, target_removed + width) + 1):
        plan = plan_global_topk(scores, asked, constraints=constraints)
        removed = heads - plan.heads_kept
        key = (abs(removed - target_removed), removed)
        if best is None or key < best[0]:
            best = (key, plan)
    return best[1]


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
    loss_fn: LossFn | None = None,
) -> Recovered:
    """Remove `target_removed` heads from `model` (in place) and recover it by distillation from `teacher`.

    one-shot: score once, remove all of them, distill with `recover_config`. iterative: `steps` rounds of
    score → remove a share of what is left to remove → distill (re-scoring after each removal, as Michel et al.,
    2019), each round with 1/steps of the step and time budgets, so both schedules
    spend the same recovery budget. With `remove_layers` n, the n most redundant consecutive layers go first
    and are recovered from with a layer map (counted in the plan as the remaining layers only). Scoring
    uses `scoring_batches` (default: the first training epoch) and `loss_fn` for gradient criteria (default:
    next-token loss for a causal LM, cross-entropy on labels otherwise). Grouped-query attention layouts are
    always respected: removals snap to whole KV groups or the same number of heads from every group.
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
    loss_fn = loss_fn or task_loss
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
            scores = score_heads(model, scoring(), criterion, loss_fn).normalize_per_layer()
            # the grouped-query layout of the model as it is now (after any layer removal)
            constraints = Constraints.for_model(model, constraints.min_heads_per_layer, constraints.heads_multiple)
            apply_structure(model, StructurePlan(heads=plan_closest(scores, target_removed, constraints)))
        recover(config)
        outcome.plan = current_plan(model, f"one-shot+distill({constraints.describe()})", criterion)
    else:
        per_round = config.replace(max_steps=max(1, config.max_steps // steps),
                                   max_seconds=None if config.max_seconds is None else config.max_seconds / steps,
                                   warmup_steps=min(config.warmup_steps, math.ceil(config.max_steps / steps / 5)))
        if steps < 1:
            raise UserInputError(f"steps must be at least 1, got {steps}")
        removed = 0
        for step in range(steps):
            share = math.ceil((target_removed - removed) / (steps - step))
            if share <= 0:
                break
            scores = score_heads(model, scoring(), criterion, loss_fn).normalize_per_layer()
            # the grouped-query layout changes as groups go, so it is read afresh every round
            round_constraints = Constraints.for_model(model, constraints.min_heads_per_layer,
                                                      constraints.heads_multiple)
            present = present_heads(scores)
            removable = sum(max(0, len(h) - constraints.min_heads_per_layer) for h in present)
            plan = plan_closest(scores, min(share, removable), round_constraints)
            gone = sum(len(h) for h in present) - plan.heads_kept
            if gone == 0:
                break  # the constraints allow no further removal
            apply_structure(model, StructurePlan(heads=plan))
            removed += gone
            recover(per_round)
        outcome.plan = current_plan(model, f"iterative(steps={steps}, {constraints.describe()})+distill", criterion)
    outcome.seconds = time.monotonic() - started
    return outcome


def prune_ffn_and_recover(model: nn.Module, teacher: nn.Module, data: DistillData, fraction: float,
                          criterion: str = "activation", recover_config: DistillConfig | None = None,
                          scoring_batches: Callable[[], Iterable[Batch]] | None = None,
                          progress: Progress | None = None, *,
                          compensate: bool = True) -> tuple[dict[int, list[int]], DistillResult]:
    """Remove `fraction` of every layer's FFN neurons (lowest scores first, equal widths), then distill.

    With `compensate` (as `fit` does), each removed neuron's mean output is folded into the FFN output bias."""
    removed = ffn_removal(model, fraction, criterion, scoring_batches or data.scoring_batches(), compensate)
    return removed, distill(model, teacher, data, recover_config, progress)


def ffn_removal(model: nn.Module, fraction: float, criterion: str, scoring: Callable[[], Iterable[Batch]],
                compensate: bool, layers_removed: Iterable[int] = ()) -> dict[int, list[int]]:
    """Remove `fraction` of every layer's FFN neurons and the `layers_removed` (indices of `model` as it is) in
    one `apply_structure`, neurons scored on `model` before anything goes; returns the neurons removed."""
    from edgeprune.pruning.ffn import intermediate_sizes, neuron_statistics, plan_neurons, score_neurons

    needs_data = criterion != "weight-norm"
    removed = plan_neurons(score_neurons(model, scoring() if needs_data else None, criterion), fraction)
    means = neuron_statistics(model, scoring()).means if compensate and removed else None
    plan = StructurePlan(ffn_kept=ffn_kept_from_removal(intermediate_sizes(model), removed),
                         layers_removed=sorted(layers_removed))
    apply_structure(model, plan, StructureCompensation(neuron_means=means))
    return removed
