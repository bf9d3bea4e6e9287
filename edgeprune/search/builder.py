"""The candidate builder: the fit's search space, turning a search shape and a recipe into a measured artifact,
each one once.

It decides which float model a candidate exports — the dense teacher pruned to its `Shape` (`ShapeFacts`), or
that structure distilled from the teacher (`edgeprune.search.recovering`) — and has it quantized, exported,
verified, evaluated through the runtime and benchmarked (`ArtifactBuilder`, through the fit's `Benchmarker`). It
answers the search's cheap questions (exact sizes, FLOPs, predicted latency, the PyTorch quality bound) from
`ShapeFacts`, and knows nothing of the search itself.
"""

import copy
import time
from pathlib import Path

from torch import nn

from edgeprune.devices import DeviceProfile
from edgeprune.export import RUNTIMES
from edgeprune.importance import HeadScores
from edgeprune.progress import Progress
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.quantize import RECIPES, Recipe
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.search.artifact_builder import ArtifactBuilder
from edgeprune.search.benchmarkers import Benchmarker, WorkElsewhere
from edgeprune.search.budget import Budget
from edgeprune.search.choice import quality_tolerance
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.search.recipe_estimates import recipe_estimate
from edgeprune.search.recovering import (
    bound,
    needs_recovery,
    recover,
    recovered_qualities,
    signed_value,
    unrecovered_estimates,
)
from edgeprune.search.result import BuiltArtifact
from edgeprune.search.shape_facts import ShapeFacts
from edgeprune.search.shared import SharedWork, dense_head_means
from edgeprune.search.size_calibration import calibrate, worth_calibrating
from edgeprune.search.size_probe import budget_probe
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, to_jsonable
from edgeprune.tasks.base import Quality, Task, batched_quality


class CandidateBuilder:
    """The search space of one fit: predicts, prunes, recovers and builds candidates; each one once."""

    def __init__(self, teacher: nn.Module, scores: HeadScores, task: Task, options: FitOptions, work: Path,
                 progress: Progress, runtime: str, profile: DeviceProfile, benchmarker: Benchmarker,
                 journal: Journal, vocabulary: VocabularyMap | None = None, shared: SharedWork | None = None,
                 means: HeadOutputMeans | None = None, elsewhere: WorkElsewhere | None = None,
                 teacher_validation: Quality | None = None) -> None:
        self.teacher, self.task, self.options, self.work, self.progress = teacher, task, options, work, progress
        self.journal, self.vocabulary = journal, vocabulary
        if teacher_validation is not None and Shape().key not in journal.proxies:
            # the dense structure's PyTorch estimate is the teacher's, which the caller measured (`Task.teacher`)
            journal.record_proxy(Shape().key, to_jsonable(teacher_validation))
        # what does not depend on the device (means, statistics, layouts, estimates, runtime qualities): another
        # device's builder of the same fleet may have filled it already
        self.shared = shared if shared is not None else SharedWork()
        # the dense teacher's head means, measured here (or taken from `shared`) when the caller has not
        if means is None and options.compensate:
            means = dense_head_means(teacher, task, options, self.shared)
        self.means = means
        self.facts = ShapeFacts(teacher, scores, task, options, runtime, profile, self.shared, vocabulary, means)
        self.layer_counts = self.facts.layer_counts
        # qualities measured by builds that ran ahead, waits before a benchmark (`edgeprune.cluster.ahead`)
        self.elsewhere = elsewhere if elsewhere is not None else WorkElsewhere()
        self.artifacts = ArtifactBuilder(self.facts, work, progress, benchmarker, self.shared, self.elsewhere)
        self.suffix = RUNTIMES.get(runtime).suffix  # the dense baseline's; each candidate runs in its recipe's runtime
        self.started = self.artifacts.started

    # the search's cheap questions (`edgeprune.search.searcher.SearchSpace`), answered by the shape facts
    def head_counts(self, layers_removed: int = 0) -> list[int]:
        return self.facts.head_counts(layers_removed)

    def core_parameters(self, shape: Shape) -> int:
        return self.facts.core_parameters(shape)

    def predict_bytes(self, shape: Shape, recipe: Recipe) -> int:
        return self.facts.predict_bytes(shape, recipe)

    def predict_latency(self, shape: Shape, recipe: Recipe) -> float | None:
        return self.facts.predict_latency(shape, recipe)

    def size_slack(self, recipe: Recipe, shape: Shape) -> float:
        return self.facts.size_slack(recipe, shape)

    def latency_slack(self, recipe: Recipe) -> float:
        return self.facts.latency_slack(recipe)

    def candidate_model(self, shape: Shape) -> nn.Module:
        """The float model a candidate of `shape` exports: with recovery, a copy of the structure's recovered
        weights (trimmed after recovery when the shape trims the vocabulary); else the teacher pruned to it."""
        if not needs_recovery(self, shape):
            return self.facts.pruned(shape)
        # the structure distilled from the dense teacher, full vocabulary (`recovering.recover`); copied, for
        # quantization must not touch the kept recovered weights
        model = copy.deepcopy(recover(self, shape))
        if shape.trim_vocabulary:  # recovered at the full vocabulary (the teacher's inputs), trimmed after
            model = trim_vocabulary(model, self.facts.structure(shape).vocabulary)
        return model

    def bound(self, shape: Shape) -> Quality:
        """The most an artifact of this structure can measure, as the search closes lines on: `proxy` without
        recovery (`recovering.bound`)."""
        return bound(self, shape)

    def proxy(self, shape: Shape) -> Quality:
        """Validation quality of the structure's fp32 model in PyTorch: a cheap upper estimate of what an artifact
        of this structure reaches (quantization only takes away); the structure's, whatever the vocabulary. With
        recovery, measured after recovery once the structure is recovered, before that on the unrecovered model (an
        estimate that orders the candidates; `bound` is what closes lines)."""
        recovered = recovered_qualities(self).get(shape.structure.key) if needs_recovery(self, shape) else None
        return recovered if recovered is not None else self.unrecovered_proxy(shape)

    def unrecovered_proxy(self, shape: Shape) -> Quality:
        """Validation quality of the teacher pruned to the structure (no recovery), in PyTorch; measured once."""
        key = shape.structure.key
        proxies = self.journal.proxies
        if key not in proxies and key in self.shared.proxies:  # measured for another device of the fleet
            self.journal.record_proxy(key, self.shared.proxies[key])
            self.shared.count("PyTorch estimates")
        if key not in proxies:
            mark = time.perf_counter()
            quality = batched_quality(self.task, self.facts.pruned(shape.structure), "validation")
            self.journal.record_proxy(key, to_jsonable(quality))
            self.progress.note(f"  PyTorch estimate for {shape.structure.describe()}: validation {quality.metric} "
                               f"{quality.value:.4f} ({time.perf_counter() - mark:.0f} s)")
        self.shared.proxies[key] = proxies[key]
        return from_jsonable(Quality, proxies[key])

    def calibrate_size(self, recipe: Recipe, shape: Shape, budget: Budget) -> bool:
        """Calibrate `recipe`'s file overhead on cuts of the teacher when its first candidate, `shape`, is near the
        size budget and the model is large (`size_calibration`); whether it did (the predictions changed)."""
        if not worth_calibrating(self.facts, recipe, shape, budget):
            return False
        try:
            calibrate(self.facts, recipe, self.artifacts.file_bytes, self.progress)
        except (RuntimeError, ValueError) as error:  # a cut the exporter refuses: the first file settles the size
            self.facts.calibration_failed.add(recipe.name)
            message = " ".join(str(error).split())[:200]
            self.progress.warn(f"{recipe.name}'s file overhead could not be calibrated ({message}); its first "
                               "candidate is built on the size model's guess")
            return False
        return True

    def recipe_estimate(self, recipe: Recipe) -> Quality | None:
        """The dense teacher's validation quality with `recipe` (or the recipe standing in for it) applied, in
        PyTorch; None when none can (`recipe_estimates.recipe_estimate`)."""
        return recipe_estimate(self, recipe, lambda stand_in: self.artifacts.calibration(stand_in, False))

    def measured_estimates(self) -> dict[Shape, Quality]:
        """Each structure whose unrecovered PyTorch estimate is measured (the dense one's is the teacher's, when the
        caller gave it), with that estimate: what `proxy` answers without measuring, and what the searcher bounds
        the others by."""
        return {Shape.from_key(key): quality for key, quality in unrecovered_estimates(self).items()}

    def tolerance(self) -> float:
        """Validation qualities this close are a tie (`choice.quality_tolerance` of the teacher's PyTorch estimate)."""
        return quality_tolerance(self.options, self.unrecovered_proxy(Shape()))

    def candidate(self, recipe: Recipe, shape: Shape, budget: Budget, reference: Quality,
                  best: float | None = None, probe: bool = True) -> BuiltArtifact:
        """Build one candidate (or take it from the journal); measure its validation quality through the runtime
        when its file fits, and benchmark it on the device only when its quality (signed so higher is better)
        exceeds `best`, what it takes to replace the best candidate so far (None: there is none). `probe`: a
        candidate still to be recovered that the models put near the size budget or over the latency budget is
        measured unrecovered first (`size_probe.budget_probe`)."""
        key = f"{recipe.name}:{shape.key}"
        saved = journaled_artifact(self.journal, key)
        if saved is not None and (self.work / saved.path).is_file():
            self.progress.note(f"candidate {recipe.name}, {shape.describe()}: finished before (resumed)")
        else:
            name = f"candidate-{recipe.name}-{shape.key}{RUNTIMES.get(recipe.runtime).suffix}"
            probed = budget_probe(self, shape, recipe, budget, name) if probe else None
            saved = probed or self.build(shape, recipe, name, "candidate")
            if probed is None and not budget.size_fits(saved.file_bytes):
                saved.note = "over the size budget: not evaluated or benchmarked"
            elif probed is None:
                self.evaluate(saved)
                if can_win(saved.validation_quality, best, budget, reference):
                    self.benchmark(saved)
                else:
                    saved.note = "not benchmarked: its validation quality cannot beat the best candidate so far"
                    self.progress.note(f"  {saved.note}")
            self.journal.record_candidate(key, to_jsonable(saved))
        saved.checks = budget.check(saved.file_bytes, saved.benchmark, saved.validation_quality, reference)
        return saved

    def observe(self, recipe: str, shape: Shape, artifact: BuiltArtifact) -> None:
        """Teach the size and latency models what a built candidate measured (the searcher tells it, so a search
        replayed from its state learns exactly what the original did)."""
        self.facts.observe_size(RECIPES.get(recipe), shape, artifact.file_bytes)
        if artifact.benchmark is not None:
            self.facts.latency_model.observe(recipe, self.facts.flops(shape), artifact.benchmark.p50_ms)

    def build(self, shape: Shape, recipe: Recipe, file_name: str, label: str,
              baseline: bool = False, recover: bool = True) -> BuiltArtifact:
        """The artifact of `shape` in `recipe`, verified: of the dense teacher (`baseline`), of the teacher pruned to
        the shape (`recover` off, or no recovery needed), else of the structure's recovered weights."""
        recovery = ""
        if baseline:
            model = copy.deepcopy(self.teacher)
        elif not recover:
            model = self.facts.pruned(shape)
        else:
            model = self.candidate_model(shape)
            if needs_recovery(self, shape):
                recovery = self.shared.recovered[shape.structure].description
        return self.artifacts.build(model, shape, recipe, file_name, label, shape.trim_vocabulary and not baseline,
                                    recovery, observe=not baseline)

    def evaluate(self, artifact: BuiltArtifact) -> None:
        self.artifacts.evaluate(artifact)

    def benchmark(self, artifact: BuiltArtifact) -> None:
        self.artifacts.benchmark(artifact)


def can_win(quality: Quality | None, best: float | None, budget: Budget, reference: Quality) -> bool:
    """Whether a candidate of this validation quality could still become the result."""
    if quality is None:
        return False
    floor = budget.quality_floor(reference)
    if floor is not None and not (quality.value >= floor if reference.higher_is_better else quality.value <= floor):
        return False
    return best is None or signed_value(quality) > best


def journaled_artifact(journal: Journal, key: str) -> BuiltArtifact | None:
    saved = journal.candidates.get(key)
    return None if saved is None else from_jsonable(BuiltArtifact, saved)
