"""The candidate builder: turns a structure and a recipe into a measured artifact, each one once.

It prunes the dense teacher to a `Shape` (heads with their mean outputs folded into the bias, FFN neurons with
theirs, whole layers, the vocabulary), optionally distils it, quantizes, exports, verifies against PyTorch,
evaluates through the runtime and benchmarks on the device (or estimates there when the device is not
connected). It also answers the search's cheap questions (exact sizes, FLOPs, predicted latency, the PyTorch
quality bound) and knows nothing of the search itself.
"""

import copy
import dataclasses
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from edgeprune.bench.benchmark import benchmark_on
from edgeprune.devices import DeviceProfile
from edgeprune.devices.transports.base import Transport
from edgeprune.errors import UserInputError
from edgeprune.export import RUNTIMES, ExportJob, content_key, export, load_artifact
from edgeprune.importance import HeadScores
from edgeprune.progress import Progress
from edgeprune.pruning import PruningPlan, measure_flops
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.pruning.ffn import intermediate_sizes, plan_neurons
from edgeprune.pruning.structure import StructureCompensation, StructurePlan, apply_structure, ffn_kept_from_removal
from edgeprune.quantize import CALIBRATION_EXAMPLES, FP32_RECIPE, RECIPES, Recipe, SizeModel, fidelity_rank
from edgeprune.quantize.size_model import ParameterLayout, payload_bytes
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.search.budget import Budget
from edgeprune.search.build_job import BuildJob, RecoverySpec
from edgeprune.search.choice import quality_tolerance
from edgeprune.search.estimate import HostEstimator
from edgeprune.search.head_plans import HeadPlanner
from edgeprune.search.journal import Journal
from edgeprune.search.latency import LatencyModel
from edgeprune.search.options import FitOptions
from edgeprune.search.recovering import (
    bound,
    may_start_from,
    needs_recovery,
    recover,
    recovered_qualities,
    recovery_start,
    signed_value,
)
from edgeprune.search.result import BuiltArtifact
from edgeprune.search.shared import SharedWork, calibration_inputs, dense_head_means
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, to_jsonable
from edgeprune.tasks.base import Quality, Split, Task

if TYPE_CHECKING:  # Ray is an extra: the pool is imported only where one is made
    from edgeprune.cluster import BoardPool

SIZE_MODEL_SLACK = 1.05  # export anyway when the predicted size is within 5 % over the budget ...
# ... and within 1 % once a file of the recipe has been measured: the payload is exact and the measured overhead is
# the same for every structure (int4 on MiniLM: 116,056 bytes dense and with half the heads; a 13.20 MB prediction
# was 13.20 MB: docs/FINDINGS.md)
OBSERVED_SIZE_SLACK = 1.01
LATENCY_MODEL_SLACK = 1.15  # benchmark anyway when the latency model predicts within 15 % of the budget
FITTED_LATENCY_SLACK = 1.05  # the same once the recipe's own line is fitted to two measurements
# ... and while a recipe borrows the measurements of a recipe of its runtime that keeps its linears in more bits:
# int8 ran 2.2× (ExecuTorch) and 2.8× (LiteRT) faster than fp32 on MiniLM at one thread (docs/FINDINGS.md, export
# matrix), so such a figure may be that far too slow; skip on it only beyond what that gap explains. (Fewer bits
# were never slower than that here: ExecuTorch's int4 runs a little slower than its int8, so a figure borrowed
# from a recipe with as few bits or fewer keeps the usual slack.)
BORROWED_LATENCY_SLACK = 3.0


class CandidateBuilder:
    """Prunes, quantizes, exports, verifies, evaluates and benchmarks candidates; each one once."""

    def __init__(self, teacher: nn.Module, scores: HeadScores, task: Task, options: FitOptions, work: Path,
                 progress: Progress, runtime: str, profile: DeviceProfile, device_link: Transport | None,
                 journal: Journal, vocabulary: VocabularyMap | None = None,
                 estimator: HostEstimator | None = None, shared: SharedWork | None = None,
                 boards: "BoardPool | None" = None, means: HeadOutputMeans | None = None) -> None:
        self.teacher = teacher
        self.vocabulary = vocabulary  # the trimmed vocabulary shapes with trim_vocabulary use
        # what does not depend on the device (means, statistics, layouts, estimates, runtime qualities): another
        # device's builder of the same fleet may have filled it already
        self.shared = shared if shared is not None else SharedWork()
        self.scores = scores
        self.task = task
        self.options = options
        self.work = work
        self.progress = progress
        self.runtime = runtime  # the dense baseline's; each candidate runs in its recipe's runtime
        self.profile = profile
        self.device_link = device_link
        self.estimator = estimator  # set when the device is not connected: figures are estimated
        self.boards = boards  # a lab pool with boards of this profile: benchmarks run there, not on device_link
        self.before_benchmark: Callable[[], None] | None = None  # e.g. wait for builds running beside it
        # (sha256 of an artifact, split) → its quality, measured by a build that ran ahead (`build_job`)
        self.measured_ahead: dict[tuple[str, str], Quality] = {}
        self.journal = journal
        self.size_model = SizeModel()
        self.latency_model = LatencyModel(profile.peak_gflops, profile.mem_bandwidth_gbs)
        self.example = task.example_inputs("validation", 1)[0]
        self.verify_inputs = task.example_inputs("validation", options.verify_examples)
        self.suffix = RUNTIMES.get(runtime).suffix
        self.planner = HeadPlanner(teacher, scores, task, options, self.shared)
        self.layers = self.planner.layers
        # layer counts the model allows (a 2-layer model can lose 1); the defaults are for 6+ layers
        self.layer_counts = tuple(c for c in options.layer_removals if c < self.layers) or (0,)
        # shapes at 0 and at all removable heads removed → their layouts; (recipe, such a shape) → payload bytes
        self._layouts, self._payload = self.shared.layouts, self.shared.payload
        self._flops = self.shared.flops
        self._core = self.shared.core  # shapes at the ends of a line → parameters outside the embeddings
        self._size_observed: set[tuple[str, Shape]] = set()  # candidates the size model has learnt from
        # the dense teacher's head means, measured here (or taken from `shared`) when the caller has not
        if means is None and options.compensate:
            means = dense_head_means(teacher, task, options, self.shared)
        self.means = means
        self.started = time.perf_counter()

    def removed_layers(self, count: int) -> list[int]:
        return self.planner.removed_layers(count)

    def head_counts(self, layers_removed: int = 0) -> list[int]:
        return self.planner.head_counts(layers_removed)

    def plan(self, heads_removed: int, layers_removed: int = 0) -> PruningPlan:
        return self.planner.plan(heads_removed, layers_removed)

    def neuron_statistics(self) -> Any:
        if self.shared.neurons is None:
            from edgeprune.pruning.ffn import neuron_statistics

            self.shared.neurons = neuron_statistics(self.teacher, calibration_inputs(self.task, self.options))
        return self.shared.neurons

    def structure(self, shape: Shape) -> StructurePlan:
        """What `shape` keeps of the teacher, on the teacher's indices: the global top-k heads of the layers that
        stay, the FFN neurons of highest fluctuation, the most redundant layers removed, the trimmed vocabulary."""
        ffn_kept = None
        if shape.ffn_fraction:
            removal = plan_neurons(self.neuron_statistics().fluctuation, shape.ffn_fraction)
            ffn_kept = ffn_kept_from_removal(intermediate_sizes(self.teacher), removal)
        if shape.trim_vocabulary and self.vocabulary is None:
            raise UserInputError("this task has no vocabulary to trim")
        return StructurePlan(self.plan(shape.heads_removed, shape.layers_removed), ffn_kept,
                             self.removed_layers(shape.layers_removed),
                             self.vocabulary if shape.trim_vocabulary else None)

    def pruned(self, shape: Shape) -> nn.Module:
        """The teacher cut to `shape` by `apply_structure`: heads and FFN neurons with their mean outputs folded
        into the biases (unless compensation is off), layers, vocabulary."""
        structure = self.structure(shape)
        neuron_means = self.neuron_statistics().means if shape.ffn_fraction and self.options.compensate else None
        compensation = StructureCompensation(self.means, neuron_means)
        if structure.vocabulary is not None and self.shared.trimmed is None:  # trimmed once, copied for every shape
            self.shared.trimmed = trim_vocabulary(copy.deepcopy(self.teacher), structure.vocabulary)
        model = copy.deepcopy(self.shared.trimmed if structure.vocabulary is not None else self.teacher)
        return apply_structure(model, dataclasses.replace(structure, vocabulary=None), compensation)

    def candidate_model(self, shape: Shape) -> nn.Module:
        """The float model a candidate of `shape` exports: with recovery, a copy of the structure's recovered
        weights (trimmed after recovery when the shape trims the vocabulary); else the teacher pruned to it."""
        if not needs_recovery(self, shape):
            return self.pruned(shape)
        model = copy.deepcopy(self.recovered(shape))  # quantization must not touch the kept recovered weights
        if shape.trim_vocabulary:  # recovered at the full vocabulary (the teacher's inputs), trimmed after
            model = trim_vocabulary(model, self.structure(shape).vocabulary)
        return model

    def recovered(self, shape: Shape) -> nn.Module:
        """The structure of `shape` distilled from the dense teacher, full vocabulary (`recovering.recover`)."""
        return recover(self, shape)

    def bound(self, shape: Shape) -> Quality:
        """The most an artifact of this structure can measure, as the search closes lines on: `proxy` without
        recovery (`recovering.bound`)."""
        return bound(self, shape)

    def _ends(self, shape: Shape) -> tuple[Shape, Shape, int]:
        top = self.head_counts(shape.layers_removed)[-1]
        return dataclasses.replace(shape, heads_removed=0), dataclasses.replace(shape, heads_removed=top), top

    def _interpolated(self, cache: dict, key: tuple, shape: Shape, exact: Any) -> float:
        """`exact(shape)` at no head and at every removable head removed, linear in between: exact when every
        head owns the same parameters and FLOPs (true of MHA models); the real file settles what is built."""
        low, high, top = self._ends(shape)
        for end in (low, high):
            if (*key, end) not in cache:
                cache[(*key, end)] = exact(end)
        if top == 0:
            return cache[(*key, low)]
        share = shape.heads_removed / top
        return cache[(*key, low)] + share * (cache[(*key, high)] - cache[(*key, low)])

    def predict_bytes(self, shape: Shape, recipe: Recipe) -> int:
        low, high, top = self._ends(shape)
        for end in (low, high):
            if end not in self._layouts:
                self._layouts[end] = ParameterLayout.of(self.pruned(end))
        payload = (self._interpolated(self._payload, (recipe.name,), shape,
                                      lambda end: payload_bytes(self._layouts[end], recipe)))
        return int(payload) + self.size_model.overhead(recipe)

    def core_parameters(self, shape: Shape) -> int:
        """Parameters outside the embedding tables: how much of the network itself a shape keeps."""
        self.predict_bytes(shape, RECIPES.get(FP32_RECIPE[self.runtime]))  # measures the layouts of the line's ends
        return int(self._interpolated(self._core, (), shape, lambda end: self._layouts[end].core_parameters))

    def flops(self, shape: Shape) -> int:
        inputs = dict(zip(self.task.input_names, self.example[:len(self.task.input_names)], strict=True))
        return int(self._interpolated(self._flops, (), shape.structure,
                                      lambda end: measure_flops(self.pruned(end), inputs)))

    def predict_latency(self, shape: Shape, recipe: Recipe) -> float | None:
        return self.latency_model.predict(recipe.name, self.flops(shape), self.predict_bytes(shape, recipe))

    def size_slack(self, recipe: Recipe) -> float:
        """How far over the size budget a predicted size may be and still be built: wide until a file of the
        recipe has taught the size model its overhead, narrow after."""
        return OBSERVED_SIZE_SLACK if self.size_model.observed(recipe) else SIZE_MODEL_SLACK

    def latency_slack(self, recipe: Recipe) -> float:
        """How far over the budget a predicted latency may be and still be built: widest on the measurements of a
        recipe with more bits, wide while the model scales one recipe's measurements through the origin or borrows
        another's, narrow once a line is fitted to this recipe's measurements (`LatencyModel.basis`)."""
        basis = self.latency_model.basis(recipe.name)
        lender = self.latency_model.lender(recipe.name) if basis == "borrowed" else None
        if lender is not None and fidelity_rank(RECIPES.get(lender))[0] < fidelity_rank(recipe)[0]:
            return BORROWED_LATENCY_SLACK
        return FITTED_LATENCY_SLACK if basis == "fitted" else LATENCY_MODEL_SLACK

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
            quality = self.task.batched_quality(self.pruned(shape.structure), "validation")
            self.journal.record_proxy(key, to_jsonable(quality))
            self.progress.note(f"  PyTorch estimate for {shape.structure.describe()}: validation {quality.metric} "
                               f"{quality.value:.4f} ({time.perf_counter() - mark:.0f} s)")
        self.shared.proxies[key] = proxies[key]
        return from_jsonable(Quality, proxies[key])

    def tolerance(self) -> float:
        """Validation qualities this close are a tie (`choice.quality_tolerance` of the teacher's PyTorch estimate)."""
        return quality_tolerance(self.options, self.unrecovered_proxy(Shape()))

    def remap(self, inputs: tuple[torch.Tensor, ...], trimmed: bool) -> tuple[torch.Tensor, ...]:
        """Inputs as the artifact takes them: token ids through the vocabulary map when it was trimmed."""
        if not trimmed or self.vocabulary is None:
            return inputs
        return (self.vocabulary.apply(inputs[0]), *inputs[1:])

    def candidate(self, recipe: Recipe, shape: Shape, budget: Budget, reference: Quality,
                  best: float | None = None, probe: bool = True) -> BuiltArtifact:
        """Build one candidate (or take it from the journal); measure its validation quality through the runtime
        when its file fits, and benchmark it on the device only when its quality (signed so higher is better)
        exceeds `best`, what it takes to replace the best candidate so far (None: there is none). `probe`: a
        candidate still to be recovered that the models put near the size budget or over the latency budget is
        measured unrecovered first (`budget_probe`)."""
        key = f"{recipe.name}:{shape.key}"
        saved = journaled_artifact(self.journal, key)
        if saved is not None and (self.work / saved.path).is_file():
            self.progress.note(f"candidate {recipe.name}, {shape.describe()}: finished before (resumed)")
        else:
            name = f"candidate-{recipe.name}-{shape.key}{RUNTIMES.get(recipe.runtime).suffix}"
            probed = self.budget_probe(shape, recipe, budget, name) if probe else None
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

    def budget_probe(self, shape: Shape, recipe: Recipe, budget: Budget, name: str) -> BuiltArtifact | None:
        """The unrecovered structure's artifact when it shows the candidate over a budget, else None: for a
        candidate still to be recovered (minutes; an export takes seconds) that the size or latency model puts
        within its slack of that budget, either side (docs/FINDINGS.md: five of ten candidates of a 5 MB fit were
        recovered, then found 0.1-4 % too large; in a 2.5 ms fit, two predicted 7-3 % under measured 12-21 % over
        after their recovery). It holds for the recovered one: the shapes and the recipe set the file size
        (the exporters store bitwise-equal tensors once, and distillation only parts such tensors, so the
        recovered file is never smaller) and the kernels' work, not the weights' values."""
        if not needs_recovery(self, shape) or shape.structure in self.shared.recovered:
            return None
        margin = self.size_slack(recipe) - 1  # the slack is a factor (1.01: within 1 % over)
        size_near = budget.max_mb is not None and self.predict_bytes(shape, recipe) > budget.max_mb * 1e6 * (1 - margin)
        predicted_ms = self.predict_latency(shape, recipe) if budget.max_latency_ms is not None else None
        latency_near = predicted_ms is not None and predicted_ms > budget.max_latency_ms / self.latency_slack(recipe)
        if not size_near and not latency_near:
            return None
        probe = self.build(shape, recipe, name, "candidate", recover=False)
        if budget.size_fits(probe.file_bytes) and budget.needs_benchmark():
            self.benchmark(probe)
        over = [c.name for c in budget.check(probe.file_bytes, probe.benchmark, None, None)
                if not c.passed and c.value is not None]
        if not over:
            return None
        probe.note = (f"over the {', '.join(over)} budget, measured on the unrecovered structure (its shapes set the "
                      "file size and the kernels' work): not recovered or evaluated")
        self.progress.note(f"  {probe.note}")
        return probe

    def observe(self, recipe: str, shape: Shape, artifact: BuiltArtifact) -> None:
        """Teach the size and latency models what a built candidate measured (the searcher tells it, so a search
        replayed from its state learns exactly what the original did)."""
        if (recipe, shape) not in self._size_observed:
            self._size_observed.add((recipe, shape))
            self.size_model.observe(self.pruned(shape), RECIPES.get(recipe), artifact.file_bytes)
        if artifact.benchmark is not None:
            self.latency_model.observe(recipe, self.flops(shape), artifact.benchmark.p50_ms)

    def build_job(self, shape: Shape, recipe: Recipe, recovering: tuple[Shape, ...] = ()) -> BuildJob | None:
        """The candidate's build as a function of its inputs, to start early elsewhere (`edgeprune.cluster.ahead`);
        None when its export is cached already, or when it is to be recovered and one of `recovering` (structures
        recovered before it) may become the recovered weights it starts from (it would start from other weights
        than the search here would give it)."""
        trimmed = shape.trim_vocabulary
        example = self.remap(self.example, trimmed)
        suffix = RUNTIMES.get(recipe.runtime).suffix
        exports = self.task.cache_dir / "exports"
        verify_on = [self.remap(i, trimmed) for i in self.verify_inputs]
        name = f"candidate ({recipe.name})"
        vocabulary = self.vocabulary if trimmed else None
        if needs_recovery(self, shape) and shape.structure not in self.shared.recovered:
            structure = shape.structure
            if any(may_start_from(structure, other) for other in recovering):
                return None
            student, parent = recovery_start(self, structure)
            return BuildJob(ExportJob(student, example, recipe, self.calibration(recipe, trimmed),
                                      exports / f"recovered{suffix}"),  # named after recovery, by its weights
                            verify_on, vocabulary, name, RecoverySpec(self.options, parent, torch.get_num_threads()))
        model = self.candidate_model(shape)
        target = exports / f"{content_key(model, recipe, example)}{suffix}"
        if target.exists():
            return None
        return BuildJob(ExportJob(model, example, recipe, self.calibration(recipe, trimmed), target), verify_on,
                        vocabulary, name)

    def calibration(self, recipe: Recipe, trimmed: bool) -> list[tuple[torch.Tensor, ...]] | None:
        """Real calibration inputs, as the artifact takes them, for a calibrated recipe; None otherwise."""
        if not recipe.calibrated:
            return None
        return [self.remap(i, trimmed) for i in self.task.example_inputs("calibration", CALIBRATION_EXAMPLES)]

    def build(self, shape: Shape, recipe: Recipe, file_name: str, label: str,
              baseline: bool = False, recover: bool = True) -> BuiltArtifact:
        recovery = ""
        if baseline:
            model = copy.deepcopy(self.teacher)
        elif not recover:
            model = self.pruned(shape)
        else:
            model = self.candidate_model(shape)
            if needs_recovery(self, shape):
                recovery = self.shared.recovered[shape.structure].description
        predicted = self.size_model.predict(model, recipe)
        trimmed = shape.trim_vocabulary and not baseline
        example = self.remap(self.example, trimmed)
        key = content_key(model, recipe, example)
        self.progress.note(f"{label}: {recipe.name}, {shape.describe()}: quantize, export, verify "
                           f"({elapsed_text(self.started)} into the search)")
        exported = export(model, example, self.work / file_name, recipe, self.task.cache_dir / "exports", key,
                          self.calibration(recipe, trimmed), name=f"{label} ({recipe.name})",
                          verify_on=[self.remap(i, trimmed) for i in self.verify_inputs])
        if not baseline:  # the baseline's full vocabulary would miscalibrate the candidates' overhead
            self.size_model.observe(model, recipe, exported.size_bytes)
            self._size_observed.add((recipe.name, shape))
        verification = exported.verification
        self.progress.note(
            f"  {exported.size_bytes / 1e6:.2f} MB (predicted {predicted / 1e6:.2f}), "
            f"{'cached' if exported.cached else f'exported in {exported.export_seconds:.0f} s'}, "
            f"cosine to PyTorch {verification.min_cosine:.5f}"
        )
        return BuiltArtifact(
            label=label, recipe=recipe, path=file_name, plan=self.structure(shape),
            parameters=sum(p.numel() for p in model.parameters()), file_bytes=exported.size_bytes,
            predicted_bytes=predicted, verification=verification,
            vocabulary_size=len(self.vocabulary.kept_ids) if trimmed and self.vocabulary else None,
            export_seconds=round(exported.export_seconds, 2), cached_export=exported.cached,
            ffn_fraction=shape.ffn_fraction, layers_removed=self.removed_layers(shape.layers_removed),
            core_parameters=ParameterLayout.of(model).core_parameters, recovery=recovery,
        )

    def evaluate(self, artifact: BuiltArtifact) -> None:
        """Validation quality through the runtime: what the search decides on."""
        artifact.validation_quality = self.runtime_quality(artifact, "validation")
        self.progress.note(f"  validation {artifact.validation_quality.metric} "
                           f"{artifact.validation_quality.value:.4f} through {artifact.recipe.runtime}")

    def runtime_quality(self, artifact: BuiltArtifact, split: Split) -> Quality:
        """The artifact's quality on `split` through the runtime; the same file (by content) measured for another
        device of the fleet is not measured again."""
        with open(self.work / artifact.path, "rb") as file:
            key = (hashlib.file_digest(file, "sha256").hexdigest(), split)
        if key in self.shared.runtime_qualities:
            self.shared.count(f"{split} qualities through the runtime")
            return self.shared.runtime_qualities[key]
        if key in self.measured_ahead:  # the same file measured by a build that ran ahead elsewhere
            self.shared.runtime_qualities[key] = self.measured_ahead.pop(key)
            return self.shared.runtime_qualities[key]
        run = load_artifact(self.work / artifact.path)
        trimmed = artifact.vocabulary_size is not None
        quality = self.task.runtime_quality(run, split, (lambda inputs: self.remap(inputs, True)) if trimmed
                                            else None)
        self.shared.runtime_qualities[key] = quality
        return quality

    def benchmark(self, artifact: BuiltArtifact) -> None:
        """On the profile's device, or estimated from a run here when it is not connected."""
        inputs = self.remap(self.example, artifact.vocabulary_size is not None)
        where = f"estimated for {self.profile.name}" if self.estimator else f"on {self.profile.name}" + (
            " (a board of the pool)" if self.boards else "")
        window = f" and {self.options.bench_min_seconds:g} s" if self.options.bench_min_seconds else ""
        self.progress.note(f"  benchmarking {where} (at least {self.options.bench_runs} runs{window}, "
                           f"{self.profile.threads} threads)")
        if self.before_benchmark is not None:
            self.before_benchmark()
        # the latency model's figure before it sees this measurement: result.json keeps both (its error, measured)
        artifact.predicted_latency_ms = self.predict_latency(artifact.shape, artifact.recipe)
        artifact.latency_basis = self.latency_model.basis(artifact.recipe.name)
        if self.estimator is not None:
            artifact.benchmark = self.estimator.benchmark(self.work / artifact.path, inputs, artifact.recipe.runtime,
                                                          *self.options.bench_settings)
        elif self.boards is not None:
            artifact.benchmark = self.boards.benchmark(self.profile.name, self.work / artifact.path, inputs,
                                                       artifact.recipe.runtime, *self.options.bench_settings)
        else:
            warmup, runs, min_seconds = self.options.bench_settings
            artifact.benchmark = benchmark_on(self.device_link, self.work / artifact.path, inputs,
                                              artifact.recipe.runtime, self.profile.threads, warmup, runs,
                                              device=self.profile.name, profile=self.profile, min_seconds=min_seconds)
        peak, board = artifact.benchmark.peak_rss_mb, artifact.benchmark.board
        self.progress.note(f"  p50 {artifact.benchmark.p50_ms:.2f} ms{'' if self.estimator is None else ' (estimated)'}"
                           f", peak {'?' if peak is None else f'{peak:.0f}'} MB{f' (board {board})' if board else ''}")

    def measure(self, artifact: BuiltArtifact) -> None:
        self.evaluate(artifact)
        self.benchmark(artifact)


def can_win(quality: Quality | None, best: float | None, budget: Budget, reference: Quality) -> bool:
    """Whether a candidate of this validation quality could still become the result."""
    if quality is None:
        return False
    floor = budget.quality_floor(reference)
    if floor is not None and not (quality.value >= floor if reference.higher_is_better else quality.value <= floor):
        return False
    return best is None or signed_value(quality) > best


def elapsed_text(started: float) -> str:
    seconds = int(time.perf_counter() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def journaled_artifact(journal: Journal, key: str) -> BuiltArtifact | None:
    saved = journal.candidates.get(key)
    return None if saved is None else from_jsonable(BuiltArtifact, saved)
