"""The head scoring a model gets, chosen by measurement rather than by family.

A criterion that ranks an encoder's heads well can rank a decoder's badly (on SmolLM2-135M, fluctuation's
projected form compared raw across layers left 1.62× the dense perplexity where Taylor left 1.32×; its relative
form, now the default, 1.25×: docs/FINDINGS.md). So `criterion="auto"` scores the heads
with every candidate scoring, removes the same number of heads by each ranking (global top-k, the plan the search
itself builds), folds the removed heads' means into the biases when the fit compensates, and measures each pruned
model's PyTorch validation quality, as the search's own estimates do. The best wins; a difference within the
tolerance goes to the earlier candidate (the default). The winner's measurement is the search's estimate for that
structure, so only the losers cost extra. Validation data only: the test split stays untouched.
"""

import copy
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from edgeprune.importance import HeadScores, ScoringChoice, score_heads
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import (
    Constraints,
    PruningPlan,
    StructureCompensation,
    StructurePlan,
    apply_structure,
    nearest_reachable,
    plan_global_topk,
    reachable_head_plans,
)
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.search.choice import quality_tolerance
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.search.scores_cache import ScoringSettings, cached_head_scores
from edgeprune.search.shared import SharedWork, dense_head_means
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, to_jsonable
from edgeprune.tasks.base import Quality, Task, batched_quality

AUTO = "auto"
# what `auto` compares, in order of preference on a tie: the encoder winner first (docs/FINDINGS.md)
CANDIDATES = (ScoringChoice("fluctuation", "none", True), ScoringChoice("taylor", "l2", True))
SCORING_KEY = "scoring"  # where the decision rides in the winner's HeadScores.extra (journal, fleet, result.json)


@dataclass
class ScoringTrial:
    """One candidate scoring, measured: its pruned model's PyTorch validation quality."""

    criterion: str
    normalize: str
    compensate: bool
    quality: Quality
    seconds: float  # scoring plus pruning plus evaluation
    heads_removed: int = 0  # by this ranking's plan: grouped-query layers snap to whole KV groups


@dataclass
class ScoringDecision:
    """Which scoring won, at how many heads removed, against what; the first trial with the best quality."""

    heads_removed: int
    heads: int
    trials: list[ScoringTrial] = field(default_factory=list)
    chosen: int = 0  # index into trials
    tolerance: float = 0.0
    version: int = 1

    @property
    def choice(self) -> ScoringChoice:
        trial = self.trials[self.chosen]
        return ScoringChoice(trial.criterion, trial.normalize, trial.compensate)

    def describe(self) -> str:
        """One line for logs and reports: the winner and every trial's figure."""
        def name(trial: ScoringTrial) -> str:
            return f"{trial.criterion} ({trial.normalize} per layer{', compensated' if trial.compensate else ''})"

        winner = self.trials[self.chosen]
        others = "; ".join(f"{name(t)} {t.quality.value:.4f}" for i, t in enumerate(self.trials) if i != self.chosen)
        return (f"head scoring chosen by measurement: {name(winner)}, validation {winner.quality.metric} "
                f"{winner.quality.value:.4f} with {self.heads_removed} of {self.heads} heads removed (PyTorch); "
                f"{others}")


def scoring_decision(scores: HeadScores) -> ScoringDecision | None:
    """The decision recorded with a winner's scores (None: the criterion was named, not chosen)."""
    recorded = scores.extra.get(SCORING_KEY)
    return from_jsonable(ScoringDecision, recorded) if recorded is not None else None


def probe_heads_removed(model: nn.Module, min_heads_per_layer: int, step: int | None) -> tuple[int, int]:
    """(heads removed where the scorings are compared, heads in all): the count of the search's head ladder
    (multiples of `step`, default the number of layers) closest to half of the removable heads, the larger on a
    tie."""
    blocks = adapter_for(model).attention_blocks(model)
    removable = sum(max(0, block.num_heads - min_heads_per_layer) for block in blocks)
    step = step or max(1, len(blocks))
    ladder = sorted(set(range(0, removable + 1, step)) | {removable})
    return min(ladder, key=lambda count: (abs(count - removable / 2), -count)), sum(b.num_heads for b in blocks)


def choose_scoring(teacher: nn.Module, task: Task, batches: Sequence[dict[str, torch.Tensor]],
                   means: HeadOutputMeans | None, *, candidates: Sequence[ScoringChoice] = CANDIDATES,
                   min_heads_per_layer: int = 1, head_step: int | None = None, tolerance: float = 0.0,
                   progress: Progress | None = None) -> tuple[HeadScores, Quality]:
    """Score `teacher`'s heads with each candidate on `batches` (the task's calibration data, with labels where a
    criterion needs them) and keep the ranking whose pruned model measures best on the validation split.

    `means`: the dense teacher's head means when removed heads are compensated (None: removed outright; a
    candidate's own `compensate` is ignored, the fit's option decides). Returns the winner's raw scores, with the
    `ScoringDecision` in `extra["scoring"]`, and the winner's validation quality at the probe (the search's
    PyTorch estimate for that structure)."""
    progress = progress or task.progress
    heads_removed, heads = probe_heads_removed(teacher, min_heads_per_layer, head_step)
    constraints = Constraints.for_model(teacher, min_heads_per_layer)  # grouped-query layers lose whole groups
    decision = ScoringDecision(heads_removed, heads, tolerance=tolerance)
    if heads_removed == 0:  # no head can go (one per layer): every ranking prunes nothing, the default stands
        candidates = candidates[:1]
    winners: list[HeadScores] = []
    scored: dict[str, HeadScores] = {}  # a criterion scores once, whatever normalizations compare its scores
    for candidate in candidates:
        started = time.perf_counter()
        if candidate.criterion not in scored:
            examples = sum(len(next(iter(batch.values()))) for batch in batches)
            with progress.task(f"scoring heads ({candidate.criterion}) to compare", examples) as bar:
                scored[candidate.criterion] = score_heads(teacher, bar.track(batches), candidate.criterion,
                                                          loss_fn=task.loss)
        raw = copy.deepcopy(scored[candidate.criterion])
        plan, removed = probe_plan(raw.normalize_per_layer(candidate.normalize), heads_removed, constraints)
        pruned = apply_structure(copy.deepcopy(teacher), StructurePlan(plan), StructureCompensation(means, None))
        quality = batched_quality(task, pruned, "validation")
        decision.trials.append(ScoringTrial(candidate.criterion, candidate.normalize, means is not None, quality,
                                            round(time.perf_counter() - started, 1), removed))
        winners.append(raw)
        progress.note(f"  {candidate.criterion} ({candidate.normalize} per layer): validation {quality.metric} "
                      f"{quality.value:.4f} with {removed} of {heads} heads removed (PyTorch)")
    decision.chosen = best_trial(decision.trials, tolerance)
    decision.heads_removed = decision.trials[decision.chosen].heads_removed
    progress.note(decision.describe())
    raw = winners[decision.chosen]
    raw.extra[SCORING_KEY] = to_jsonable(decision)
    return raw, decision.trials[decision.chosen].quality


def probe_plan(scores: HeadScores, heads_removed: int, constraints: Constraints) -> tuple[PruningPlan, int]:
    """(plan, heads it removes) at the probe: global top-k; with grouped-query attention the reachable plan
    nearest to it, the one the search's `HeadPlanner` builds for that count (the winner's estimate is journaled
    under it)."""
    if constraints.kv_heads is None:
        return plan_global_topk(scores, heads_removed, constraints=constraints), heads_removed
    reachable = reachable_head_plans(scores, constraints)
    count = nearest_reachable(reachable, heads_removed)
    return reachable[count], count


def best_trial(trials: Sequence[ScoringTrial], tolerance: float) -> int:
    """The index of the best quality; a later trial must beat an earlier one by more than `tolerance`."""
    def signed(trial: ScoringTrial) -> float:
        return trial.quality.value if trial.quality.higher_is_better else -trial.quality.value

    best = 0
    for index, trial in enumerate(trials[1:], start=1):
        if signed(trial) > signed(trials[best]) + tolerance:
            best = index
    return best


def normalization(scores: HeadScores, options: FitOptions) -> str:
    """How the search compares `scores` across layers: the fit's `normalize` when given, else the chosen
    scoring's (auto), else raw ("none")."""
    if options.normalize is not None:
        return options.normalize
    decision = scoring_decision(scores)
    return decision.choice.normalize if decision is not None else "none"


def journaled_head_scores(task: Task, model: nn.Module, options: FitOptions, progress: Progress,
                          journal: Journal, shared: SharedWork | None = None,
                          reference: Quality | None = None, means: HeadOutputMeans | None = None) -> HeadScores:
    """The raw head scores the search ranks by: resumed from the journal, taken from another device of the
    fleet, scored with the named criterion, or (`auto`) chosen by measurement, the winner's PyTorch estimate
    at the probe journaled as the search's estimate for that structure. `reference` (the dense teacher's
    validation quality) sets the tie tolerance as the search's own (`quality_tolerance`); `means`, the dense
    teacher's head means when the fit compensates (`dense_head_means`)."""
    if journal.scores is not None:
        progress.note("head scores: finished before (resumed)")
        return HeadScores.from_dict(journal.scores)
    shared = shared if shared is not None else SharedWork()
    if shared.raw_scores is not None:  # scored for another device of the fleet
        shared.count("head scores")
        journal.record_scores(shared.raw_scores.to_dict())
        return shared.raw_scores
    tolerance = quality_tolerance(options, reference) if reference else 0.0

    def score() -> tuple[HeadScores, Quality | None]:
        batches = list(task.batches("calibration", options.scoring_batch_size, limit=options.scoring_examples))
        if options.criterion == AUTO:
            return choose_scoring(model, task, batches, means, candidates=auto_candidates(options),
                                  min_heads_per_layer=options.min_heads_per_layer, head_step=options.head_step,
                                  tolerance=tolerance, progress=progress)
        examples = sum(len(next(iter(batch.values()))) for batch in batches)
        with progress.task(f"scoring heads ({options.criterion})", examples) as bar:
            return score_heads(model, bar.track(batches), options.criterion, loss_fn=task.loss), None

    scores, probe = cached_head_scores(task, scoring_settings(options, means is not None, tolerance), score, progress)
    decision = scoring_decision(scores)
    if probe is not None and decision is not None:
        key = Shape(decision.heads_removed).structure.key
        journal.record_proxy(key, to_jsonable(probe))
        shared.proxies[key] = journal.proxies[key]
    journal.record_scores(scores.to_dict())
    shared.raw_scores = scores
    return scores


def measured_head_scores(task: Task, teacher: nn.Module, reference: Quality | None = None, examples: int = 256,
                         batch_size: int = 16, compensate: bool = True,
                         progress: Progress | None = None) -> HeadScores:
    """`edgeprune score` without a criterion, as fit chooses: the candidates compared on `teacher` (the task's
    dense model) with the task's first `examples` calibration documents; the winner's raw scores, the decision in
    `extra["scoring"]`."""
    options = FitOptions(scoring_examples=examples, scoring_batch_size=batch_size, compensate=compensate)
    progress = progress or task.progress
    tolerance = quality_tolerance(options, reference) if reference else 0.0

    def score() -> tuple[HeadScores, Quality]:
        batches = list(task.batches("calibration", batch_size, limit=examples))
        means = dense_head_means(teacher, task, options, SharedWork()) if compensate else None
        return choose_scoring(teacher, task, batches, means, candidates=auto_candidates(options),
                              tolerance=tolerance, progress=progress)

    scores, _ = cached_head_scores(task, scoring_settings(options, compensate, tolerance), score, progress)
    return scores


def auto_candidates(options: FitOptions) -> list[ScoringChoice]:
    """The scorings `auto` compares, each with the fit's normalization when it names one."""
    return [dataclasses.replace(c, normalize=options.normalize or c.normalize) for c in CANDIDATES]


def scoring_settings(options: FitOptions, compensate: bool, tolerance: float) -> ScoringSettings:
    """How `options` score heads, as the scores cache names them: `fit` and `edgeprune score` with the same
    settings share one entry."""
    auto = options.criterion == AUTO
    return ScoringSettings(options.criterion, tuple(auto_candidates(options)) if auto else (),
                           options.scoring_examples, options.scoring_batch_size, compensate and auto,
                           options.min_heads_per_layer, options.head_step, round(tolerance, 12) if auto else 0.0)
