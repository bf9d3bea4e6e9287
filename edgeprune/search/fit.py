"""`fit`: search the space of compressed candidates for the best validation quality that meets every budget.

A candidate is a recipe (quantization + runtime) applied to a structure: heads removed, FFN neurons removed,
layers removed, vocabulary trimmed (`edgeprune.search.space`). Cheap first: the exact size model and a
latency model fitted to the device's measurements say which structures can fit; the PyTorch validation
quality of a structure (seconds) bounds what its artifacts can reach; only candidates that can still win
are exported, verified and evaluated through the runtime, and only those that can still win after that are
benchmarked on the device. Validation qualities within a tolerance (one standard error by default) are a
tie, which the least compressed candidate wins. The test split only measures the winner and the dense
baseline; it never takes part in a decision.

Each finished candidate is journaled in the hidden work folder, so `resume=True` continues an
interrupted fit without redoing anything finished; the output folder appears only when complete.
"""

import copy
import dataclasses
import hashlib
import json
import math
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgeprune.bench.benchmark import benchmark_on
from edgeprune.devices import DeviceProfile, load_profile
from edgeprune.devices.transports.base import Transport, open_transport
from edgeprune.errors import DeviceUnreachableError, UserInputError, VerificationError
from edgeprune.export import RUNTIMES, content_key, export_prepared, load_artifact, verify_artifact
from edgeprune.importance import HeadScores, score_heads
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import PruningPlan, apply_plan, measure_flops, plan_global_topk
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.quantize import (
    CALIBRATION_EXAMPLES,
    FIT_LADDERS,
    FP32_RECIPE,
    RECIPES,
    Recipe,
    SizeModel,
    recipe_for_runtime,
)
from edgeprune.quantize.size_model import ParameterLayout, payload_bytes
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.report import render_html, render_markdown
from edgeprune.search.budget import Budget
from edgeprune.search.estimate import HostEstimator
from edgeprune.search.latency import LatencyModel
from edgeprune.search.result import BuiltArtifact, FitResult, Trial
from edgeprune.search.space import Line, Shape, lines, parse_fractions, parse_layer_counts
from edgeprune.serialization import from_jsonable, to_jsonable, write_json_atomic, write_text_atomic
from edgeprune.tasks.base import Quality, Task
from edgeprune.tasks.metrics import per_class_regressions

ARTIFACT_STEM = "model"  # the fitted artifact: model.pte or model.tflite
BASELINE_STEM = "dense-fp32"
VOCABULARY_NAME = "vocabulary.json"  # written when the vocabulary was trimmed: original ids → artifact ids
SIGNATURE_NAME = "model.json"  # inputs, outputs and files the app needs
JOURNAL_NAME = "journal.json"
SIZE_MODEL_SLACK = 1.05  # export anyway when the prediction is within 5 % of the budget
LATENCY_MODEL_SLACK = 1.15  # benchmark anyway when the latency model predicts within 15 % of the budget
FITTED_LATENCY_SLACK = 1.05  # the same once the recipe's own line is fitted to two measurements
ACCURACY_METRICS = ("accuracy", "top1")


@dataclass
class FitOptions:
    criterion: str = "fluctuation"  # best one-shot embedding cosine and accuracy at 25–75 % (benchmarks/criteria.py)
    normalize: str = "none"  # per-layer score normalization: "none" (raw fluctuation ranks best), "l2", "zscore"
    compensate: bool = True  # fold removed heads' mean outputs into the output-projection bias (FLAP)
    scoring_examples: int = 256  # calibration examples used to score heads
    scoring_batch_size: int = 16
    min_heads_per_layer: int = 1
    runtime: str | None = None  # None: the device profile's runtime
    recipes: tuple[str, ...] | None = None  # None: the runtime's ladder, highest fidelity first
    verify_examples: int = 8  # real validation inputs each export is checked on
    # keep only embedding rows of tokens in the calibration and validation data: None searches both ways
    trim_vocabulary: bool | None = None
    ffn_fractions: tuple[float, ...] = (0.0, 0.25, 0.5)  # of each kept layer's FFN neurons removed
    layer_removals: tuple[int, ...] = (0, 1, 2)  # whole layers removed (the most redundant consecutive block)
    head_step: int | None = None  # heads removed go in multiples of this; None: the number of layers
    require_device: bool = False  # fail when the device is unreachable instead of estimating its figures
    # validation qualities this close count as equal, and the less compressed candidate wins; None: one standard
    # error of the dense teacher's validation accuracy (accuracy-like metrics), else 0
    quality_tolerance: float | None = None
    bench_warmup: int = 5
    bench_runs: int = 30
    recover_steps: int = 0  # > 0: distil each pruned candidate from the dense teacher for this many steps
    recovery_batch_size: int = 16

    def __post_init__(self) -> None:
        if self.runtime is not None:
            RUNTIMES.get(self.runtime)
        if self.recipes is not None and not self.recipes:
            raise UserInputError(f"name at least one recipe; choose from: {', '.join(RECIPES.names())}")
        for recipe in self.recipes or ():
            RECIPES.get(recipe)
        if self.scoring_examples < 1 or self.verify_examples < 1 or self.bench_runs < 20:
            raise UserInputError("need scoring_examples >= 1, verify_examples >= 1 and bench_runs >= 20")
        if self.normalize not in ("none", "l2", "zscore"):
            raise UserInputError(f"normalize must be none, l2 or zscore, got {self.normalize!r}")
        if self.recover_steps < 0 or self.recovery_batch_size < 1:
            raise UserInputError("recover_steps must be >= 0 (0: no recovery) and recovery_batch_size >= 1")
        self.ffn_fractions = parse_fractions(self.ffn_fractions)
        self.layer_removals = parse_layer_counts(self.layer_removals)
        if self.quality_tolerance is not None and not 0 <= self.quality_tolerance < 1:
            raise UserInputError(f"quality_tolerance must be >= 0 (in the task metric's units), got "
                                 f"{self.quality_tolerance}")
        if self.head_step is not None and self.head_step < 1:
            raise UserInputError(f"head_step must be >= 1, got {self.head_step}")
        if self.recover_steps and self.trim_vocabulary:
            raise UserInputError("recovery with a trimmed vocabulary is not supported yet; drop --trim-vocab or "
                                 "--recover-steps")
        if self.recover_steps and (self.ffn_fractions != (0.0,) or self.layer_removals != (0,)):
            if self.ffn_fractions == FitOptions.ffn_fractions and self.layer_removals == FitOptions.layer_removals:
                # recovery inside fit searches heads only; FFN and layer removal recover through `distill`
                self.ffn_fractions, self.layer_removals = (0.0,), (0,)
            else:
                raise UserInputError("recovery inside fit searches heads only; with --recover-steps drop "
                                     "--ffn-fractions/--layer-removals (edgeprune distill recovers FFN and layer "
                                     "removal)")
        if self.recover_steps and self.trim_vocabulary is None:
            self.trim_vocabulary = False


def default_out_dir() -> Path:
    return Path("runs") / datetime.now().strftime("fit-%Y%m%d-%H%M%S")


def work_dir_for(out: Path) -> Path:
    return out.parent / f".{out.name}.partial"


def prepare_out_dir(out: Path, resume: bool = False) -> Path:
    """Refuse a non-empty target; work in a hidden sibling that is renamed into place at the end."""
    work = work_dir_for(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if resume and (out / "result.json").exists():
            raise UserInputError(f"{out} holds a finished fit (result.json); nothing to resume")
        raise UserInputError(f"output folder {out} already exists and is not empty; choose another --out")
    if resume:
        if not (work / JOURNAL_NAME).is_file():
            raise UserInputError(f"nothing to resume for {out}: no interrupted fit in {work}")
        return work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


class _Journal:
    """Finished work of this fit, saved after each step so an interrupted fit resumes where it stopped."""

    def __init__(self, path: Path, fingerprint: str, resume: bool) -> None:
        self.path = path
        self.data: dict[str, Any] = {"fingerprint": fingerprint, "scores": None, "candidates": {}}
        if resume:
            saved = json.loads(path.read_text())
            if saved.get("fingerprint") != fingerprint:
                raise UserInputError(f"{path.parent} was started with another model, data or options; resume it "
                                     "with the same command, or start a new fit")
            self.data = saved

    def save(self) -> None:
        write_json_atomic(self.path, self.data)

    def artifact(self, key: str) -> BuiltArtifact | None:
        saved = self.data["candidates"].get(key)
        return None if saved is None else from_jsonable(BuiltArtifact, saved)

    def record(self, key: str, artifact: BuiltArtifact) -> None:
        self.data["candidates"][key] = to_jsonable(artifact)
        self.save()


class _Builder:
    """Prunes, quantizes, exports, verifies, evaluates and benchmarks candidates; each one once."""

    def __init__(self, teacher: nn.Module, scores: HeadScores, task: Task, options: FitOptions, work: Path,
                 progress: Progress, runtime: str, profile: DeviceProfile, device_link: Transport | None,
                 journal: _Journal, vocabulary: VocabularyMap | None = None,
                 estimator: HostEstimator | None = None) -> None:
        self.teacher = teacher
        self.vocabulary = vocabulary  # the trimmed vocabulary shapes with trim_vocabulary use
        self._trimmed: nn.Module | None = None
        self.scores = scores
        self.task = task
        self.options = options
        self.work = work
        self.progress = progress
        self.runtime = runtime
        self.profile = profile
        self.device_link = device_link
        self.estimator = estimator  # set when the device is not connected: figures are estimated
        self.journal = journal
        self.size_model = SizeModel()
        self.latency_model = LatencyModel(profile.peak_gflops, profile.mem_bandwidth_gbs)
        self.example = task.example_inputs("validation", 1)[0]
        self.verify_inputs = task.example_inputs("validation", options.verify_examples)
        self.suffix = RUNTIMES.get(runtime).suffix
        self.layers = len(adapter_for(teacher).attention_blocks(teacher))
        # layer counts the model allows (a 2-layer model can lose 1); the defaults are for 6+ layers
        self.layer_counts = tuple(c for c in options.layer_removals if c < self.layers) or (0,)
        self._removed_layers: dict[int, list[int]] = {}
        self._neurons: Any = None  # NeuronStatistics of the dense teacher, measured when first needed
        self._layouts: dict[Shape, ParameterLayout] = {}  # shapes at 0 and at all removable heads removed
        self._payload: dict[tuple, int] = {}  # (recipe, such a shape) → payload bytes
        self._flops: dict[tuple, int] = {}
        self._core: dict[tuple, int] = {}  # shapes at the ends of a line → parameters outside the embeddings
        self._recovered: dict[int, nn.Module] = {}  # heads removed → recovered model, reused by later candidates
        self.means = self._head_means() if options.compensate else None
        self.started = time.perf_counter()

    def _input_batches(self) -> list[dict[str, torch.Tensor]]:
        """Calibration batches holding only the model's inputs (what head means are measured on)."""
        return [{name: batch[name] for name in self.task.input_names}
                for batch in self.task.batches("calibration", self.options.scoring_batch_size,
                                               limit=self.options.scoring_examples)]

    def _head_means(self) -> HeadOutputMeans:
        """Each head's mean output on calibration data, measured once on the dense teacher."""
        from edgeprune.pruning.compensation import measure_head_means

        return measure_head_means(self.teacher, self._input_batches())

    def removed_layers(self, count: int) -> list[int]:
        """The `count` consecutive layers of the teacher that change its hidden states least (angular distance)."""
        if count == 0:
            return []
        if count not in self._removed_layers:
            from edgeprune.importance import score_layers

            scores = score_layers(self.teacher, self._input_batches(), "angular-distance", block_size=count)
            start = int(np.argmin(scores.scores))
            self._removed_layers[count] = list(range(start, start + count))
        return self._removed_layers[count]

    def head_counts(self, layers_removed: int = 0) -> list[int]:
        """Heads-removed counts the search tries: multiples of the step up to all removable in the kept layers."""
        gone = set(self.removed_layers(layers_removed))
        blocks = adapter_for(self.teacher).attention_blocks(self.teacher)
        removable = sum(max(0, b.num_heads - self.options.min_heads_per_layer)
                        for i, b in enumerate(blocks) if i not in gone)
        step = self.options.head_step or max(1, self.layers)
        return sorted(set(range(0, removable + 1, step)) | {removable})

    def plan(self, heads_removed: int, layers_removed: int = 0) -> PruningPlan:
        """Global top-k over the layers that stay (a removed layer's heads go with it)."""
        scores = self.scores
        gone = self.removed_layers(layers_removed)
        if gone:
            values = scores.scores.copy()
            values[gone] = np.where(np.isnan(values[gone]), np.nan, np.inf)
            scores = dataclasses.replace(scores, scores=values)
        return plan_global_topk(scores, heads_removed, self.options.min_heads_per_layer)

    def neuron_statistics(self) -> Any:
        if self._neurons is None:
            from edgeprune.pruning.ffn import neuron_statistics

            self._neurons = neuron_statistics(self.teacher, self._input_batches())
        return self._neurons

    def pruned(self, shape: Shape) -> nn.Module:
        """The teacher cut to `shape`: heads (bias-compensated), FFN neurons (mean-folded), layers, vocabulary."""
        from edgeprune.pruning.ffn import plan_neurons, remove_neurons

        if shape.trim_vocabulary and self._trimmed is None:
            if self.vocabulary is None:
                raise UserInputError("this task has no vocabulary to trim")
            self._trimmed = trim_vocabulary(copy.deepcopy(self.teacher), self.vocabulary)
        model = copy.deepcopy(self._trimmed if shape.trim_vocabulary else self.teacher)
        apply_plan(model, self.plan(shape.heads_removed, shape.layers_removed), compensation=self.means)
        if shape.ffn_fraction:
            statistics = self.neuron_statistics()
            removal = plan_neurons(statistics.fluctuation, shape.ffn_fraction)
            remove_neurons(model, removal, means=statistics.means if self.options.compensate else None)
        if shape.layers_removed:
            adapter_for(model).remove_layers(model, self.removed_layers(shape.layers_removed))
        return model

    def recovered(self, plan: PruningPlan) -> nn.Module:
        """The pruned model distilled from the dense teacher; starts from the closest recovered candidate with
        fewer heads removed whose kept heads include this plan's (global top-k plans nest), not from scratch."""
        from edgeprune.pruning import prune_heads
        from edgeprune.recovery import DistillConfig, DistillData, distill

        kept = [set(layer) for layer in plan.kept_heads]
        parents = [count for count, model in self._recovered.items() if count < plan.heads_removed and all(
            mine <= theirs for mine, theirs in zip(kept, map(set, self.plan(count).kept_heads), strict=True))]
        if parents:
            parent = max(parents)
            student = copy.deepcopy(self._recovered[parent])
            parent_kept = self.plan(parent).kept_heads
            removal = {layer: sorted(set(before) - kept[layer])
                       for layer, before in enumerate(parent_kept) if set(before) - kept[layer]}
            # the recovered parent's own head means: its heads no longer output what the teacher's did
            prune_heads(student, removal, compensate=self._input_batches() if self.means is not None else None)
            self.progress.note(f"  recovering from the recovered {parent}-heads-removed candidate")
        else:
            student = self.pruned(Shape(plan.heads_removed))
        config = DistillConfig(max_steps=self.options.recover_steps,
                               eval_every=max(1, self.options.recover_steps // 3), warmup_steps=min(
                                   20, self.options.recover_steps // 5), seed=self.task.seed)
        data = DistillData.from_task(self.task, self.options.recovery_batch_size, self.task.seed)
        result = distill(student, self.teacher, data, config, self.progress)
        self.progress.note(f"  recovered in {result.seconds:.0f} s: validation {result.metric} "
                           f"{result.initial_metric:.4f} → {result.best_metric:.4f}")
        self._recovered[plan.heads_removed] = student
        return student.eval()

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
        inputs = dict(zip(self.task.input_names, self.example, strict=True))
        return int(self._interpolated(self._flops, (), shape.structure,
                                      lambda end: measure_flops(self.pruned(end), inputs)))

    def predict_latency(self, shape: Shape, recipe: Recipe) -> float | None:
        return self.latency_model.predict(recipe.name, self.flops(shape), self.predict_bytes(shape, recipe))

    def latency_slack(self, recipe: Recipe) -> float:
        """How far over the budget a predicted latency may be and still be built: wide while the model extrapolates
        from one point or another recipe, narrow once a line is fitted to two of this recipe's measurements."""
        points = {flops for flops, _ in self.latency_model.observations.get(recipe.name, [])}
        return LATENCY_MODEL_SLACK if len(points) < 2 else FITTED_LATENCY_SLACK

    def proxy(self, shape: Shape) -> Quality:
        """Validation quality of the pruned fp32 model in PyTorch: a cheap upper estimate of what an artifact of
        this structure reaches (quantization only takes away); the structure's, whatever the vocabulary."""
        key = shape.structure.key
        proxies = self.journal.data.setdefault("proxies", {})
        if key not in proxies:
            mark = time.perf_counter()
            quality = self.task.batched_quality(self.pruned(shape.structure), "validation")
            proxies[key] = to_jsonable(quality)
            self.journal.save()
            self.progress.note(f"  PyTorch estimate for {shape.structure.describe()}: validation {quality.metric} "
                               f"{quality.value:.4f} ({time.perf_counter() - mark:.0f} s)")
        return from_jsonable(Quality, proxies[key])

    def remap(self, inputs: tuple[torch.Tensor, ...], trimmed: bool) -> tuple[torch.Tensor, ...]:
        """Inputs as the artifact takes them: token ids through the vocabulary map when it was trimmed."""
        if not trimmed or self.vocabulary is None:
            return inputs
        return (self.vocabulary.apply(inputs[0]), *inputs[1:])

    def candidate(self, recipe: Recipe, shape: Shape, budget: Budget, reference: Quality,
                  best: float | None = None) -> BuiltArtifact:
        """Build one candidate (or take it from the journal); measure its validation quality through the runtime
        when its file fits, and benchmark it on the device only when its quality (signed so higher is better)
        exceeds `best`, what it takes to replace the best candidate so far (None: there is none)."""
        key = f"{recipe.name}:{shape.key}"
        saved = self.journal.artifact(key)
        if saved is not None and (self.work / saved.path).is_file():
            self.progress.note(f"candidate {recipe.name}, {shape.describe()}: finished before (resumed)")
            self.size_model.observe(self.pruned(shape), recipe, saved.file_bytes)
        else:
            saved = self.build(shape, recipe, f"candidate-{recipe.name}-{shape.key}{self.suffix}", "candidate")
            if not budget.size_fits(saved.file_bytes):
                saved.note = "over the size budget: not evaluated or benchmarked"
            else:
                self.evaluate(saved)
                if _can_win(saved.validation_quality, best, budget, reference):
                    self.benchmark(saved)
                else:
                    saved.note = "not benchmarked: its validation quality cannot beat the best candidate so far"
                    self.progress.note(f"  {saved.note}")
            self.journal.record(key, saved)
        if saved.benchmark is not None:
            self.latency_model.observe(recipe.name, self.flops(shape), saved.benchmark.p50_ms)
        saved.checks = budget.check(saved.file_bytes, saved.benchmark, saved.validation_quality, reference)
        return saved

    def build(self, shape: Shape, recipe: Recipe, file_name: str, label: str,
              baseline: bool = False) -> BuiltArtifact:
        recover = not baseline and self.options.recover_steps > 0 and shape.heads_removed > 0
        plan = self.plan(shape.heads_removed, shape.layers_removed)
        if recover and shape.heads_removed in self._recovered:
            model = copy.deepcopy(self._recovered[shape.heads_removed]).eval()
        elif recover:
            model = copy.deepcopy(self.recovered(plan))  # quantization must not touch the kept recovered weights
        elif baseline:
            model = copy.deepcopy(self.teacher)
        else:
            model = self.pruned(shape)
        predicted = self.size_model.predict(model, recipe)
        trimmed = shape.trim_vocabulary and not baseline
        example = self.remap(self.example, trimmed)
        key = content_key(model, recipe.name, example)
        self.progress.note(f"{label}: {recipe.name}, {shape.describe()}: quantize, export, verify "
                           f"({_elapsed(self.started)} into the search)")
        calibration = None
        if recipe.calibrated:  # real calibration inputs, as the artifact takes them
            calibration = [self.remap(i, trimmed) for i in self.task.example_inputs("calibration",
                                                                                    CALIBRATION_EXAMPLES)]
        quantized = recipe.apply(model, calibration)
        exported = export_prepared(quantized, example, self.work / file_name, recipe,
                                   cache_dir=self.task.cache_dir / "exports", cache_key=key)
        if not baseline:  # the baseline's full vocabulary would miscalibrate the candidates' overhead
            self.size_model.observe(model, recipe, exported.size_bytes)
        program = load_artifact(exported.path)
        verification = verify_artifact(quantized, program, [self.remap(i, trimmed) for i in self.verify_inputs],
                                       recipe.min_cosine, name=f"{label} ({recipe.name})")
        self.progress.note(
            f"  {exported.size_bytes / 1e6:.2f} MB (predicted {predicted / 1e6:.2f}), "
            f"{'cached' if exported.cached else f'exported in {exported.export_seconds:.0f} s'}, "
            f"cosine to PyTorch {verification.min_cosine:.5f}"
        )
        return BuiltArtifact(
            label=label, recipe=recipe.name, path=file_name, plan=plan.to_dict(),
            parameters=sum(p.numel() for p in model.parameters()), file_bytes=exported.size_bytes,
            predicted_bytes=predicted, verification=verification,
            vocabulary_size=len(self.vocabulary.kept_ids) if trimmed and self.vocabulary else None,
            export_seconds=round(exported.export_seconds, 2), cached_export=exported.cached,
            ffn_fraction=shape.ffn_fraction, layers_removed=self.removed_layers(shape.layers_removed),
            core_parameters=ParameterLayout.of(model).core_parameters,
        )

    def evaluate(self, artifact: BuiltArtifact) -> None:
        """Validation quality through the runtime: what the search decides on."""
        run = load_artifact(self.work / artifact.path)
        trimmed = artifact.vocabulary_size is not None
        artifact.validation_quality = self.task.runtime_quality(
            run, "validation", (lambda inputs: self.remap(inputs, True)) if trimmed else None)
        self.progress.note(f"  validation {artifact.validation_quality.metric} "
                           f"{artifact.validation_quality.value:.4f} through {self.runtime}")

    def benchmark(self, artifact: BuiltArtifact) -> None:
        """On the profile's device, or estimated from a run here when it is not connected."""
        inputs = self.remap(self.example, artifact.vocabulary_size is not None)
        where = f"estimated for {self.profile.name}" if self.estimator else f"on {self.profile.name}"
        self.progress.note(f"  benchmarking {where} ({self.options.bench_runs} runs, {self.profile.threads} threads)")
        if self.estimator is not None:
            artifact.benchmark = self.estimator.benchmark(self.work / artifact.path, inputs, self.runtime,
                                                          self.options.bench_warmup, self.options.bench_runs)
        else:
            artifact.benchmark = benchmark_on(self.device_link, self.work / artifact.path, inputs, self.runtime,
                                              self.profile.threads, self.options.bench_warmup,
                                              self.options.bench_runs, device=self.profile.name,
                                              profile=self.profile)
        peak = artifact.benchmark.peak_rss_mb
        self.progress.note(f"  p50 {artifact.benchmark.p50_ms:.2f} ms{'' if self.estimator is None else ' (estimated)'}"
                           f", peak {'?' if peak is None else f'{peak:.0f}'} MB")

    def measure(self, artifact: BuiltArtifact) -> None:
        self.evaluate(artifact)
        self.benchmark(artifact)


def _can_win(quality: Quality | None, best: float | None, budget: Budget, reference: Quality) -> bool:
    """Whether a candidate of this validation quality could still become the result."""
    if quality is None:
        return False
    floor = budget.quality_floor(reference)
    if floor is not None and not (quality.value >= floor if reference.higher_is_better else quality.value <= floor):
        return False
    return best is None or _signed(quality) > best


def _signed(quality: Quality) -> float:
    return quality.value if quality.higher_is_better else -quality.value


def _elapsed(started: float) -> str:
    seconds = int(time.perf_counter() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def fit(
    model: "Task | str | Path",
    task: str | None = None,
    data: str | Path | None = None,
    *,
    device: str | DeviceProfile = "host",
    budget: Budget | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    **task_options: Any,
) -> FitResult:
    """Fit a model to a device: `fit("my-model/", "classification", "reviews.csv", device="pi5",
    budget=Budget(max_mb=25))`, or `fit(task)` with a Task built in Python (e.g. `bundled_task("minilm-bbc")`).

    `task_options` go to the task (text_column, label_column, max_length, ratios, seed, head, ...).
    """
    from edgeprune.tasks import make_task

    if isinstance(model, Task):
        if task is not None or data is not None or task_options:
            raise UserInputError("pass either a Task, or a model folder with a task kind and data, not both")
        the_task = model
    else:
        if task is None or data is None:
            raise UserInputError("fit(model_folder, task, data): name the task kind (classification, embedding, "
                                 "causal-lm, image-classification) and the data file or folder")
        the_task = make_task(task, model, data, **task_options)
    return fit_task(the_task, device, budget, out, options, progress, resume)


def fit_task(
    task: Task,
    device: str | DeviceProfile = "host",
    budget: Budget | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    resume: bool = False,
) -> FitResult:
    """Fit `task`'s model to `device` within `budget`; write the artifact, result.json and the reports to `out`.

    Returns the FitResult; when nothing fits, its status is "budget_not_met", `fitted` is the closest
    candidate and `binding_budgets` / `suggestions` say what stood in the way.
    """
    started = time.perf_counter()
    profile = device if isinstance(device, DeviceProfile) else load_profile(device)
    budget = budget or Budget.for_device(profile)
    options = options or FitOptions()
    runtime = options.runtime or profile.runtime
    RUNTIMES.get(runtime)
    recipes = tuple(recipe_for_runtime(name, runtime).name for name in (options.recipes or FIT_LADDERS[runtime]))
    progress = progress or task.progress
    out = Path(out) if out is not None else default_out_dir()
    work = prepare_out_dir(out, resume)
    timings: dict[str, float] = {}
    journal: _Journal | None = None
    try:
        fingerprint = _fingerprint(task, options, runtime, recipes, profile)
        journal = _Journal(work / JOURNAL_NAME, fingerprint, resume)
        mark = time.perf_counter()
        teacher = task.teacher()
        timings["teacher"] = time.perf_counter() - mark
        progress.note(f"dense teacher: test {teacher.test.metric} {teacher.test.value:.4f} (PyTorch)")
        progress.note(f"data split (seed {task.seed}): {_split_summary(task)}")

        mark = time.perf_counter()
        raw_scores = _scores(task, teacher.model, options, progress, journal)
        scores = raw_scores.normalize_per_layer(options.normalize)
        timings["scoring"] = time.perf_counter() - mark

        vocabulary = _vocabulary(task, options, progress)
        with open_transport(profile.endpoint, profile.python) as device_link:
            estimator = _estimator_if_unreachable(device_link, profile, options, progress)
            builder = _Builder(teacher.model, scores, task, options, work, progress, runtime, profile,
                               None if estimator else device_link, journal, vocabulary, estimator)
            mark = time.perf_counter()
            dense = _dense_baseline(builder, runtime, journal)
            candidates, trials = _search(builder, budget, recipes, teacher.validation, progress)
            timings["search"] = time.perf_counter() - mark

        mark = time.perf_counter()
        tolerance = quality_tolerance(options, teacher.validation)
        fitted, binding, suggestions = _choose(candidates, budget, teacher.validation, tolerance)
        _keep_only(fitted, candidates, work)
        for artifact in (dense, fitted):
            run = load_artifact(work / artifact.path)
            trimmed = artifact.vocabulary_size is not None
            artifact.quality = task.runtime_quality(run, "test", (lambda i: builder.remap(i, True)) if trimmed
                                                    else None)
            if artifact.quality.metric in ACCURACY_METRICS:
                artifact.test_accuracy = artifact.quality.value
        timings["evaluation"] = time.perf_counter() - mark

        shipped = _ship(task, work, fitted, vocabulary if fitted.vocabulary_size is not None else None)
        fits = not binding
        message = _summary(fits, fitted, budget, binding, suggestions)
        result = FitResult(
            status="fit" if fits else "budget_not_met", message=message, device=profile.name, budget=budget,
            task=task.describe(),
            teacher_test_accuracy=teacher.test.value if teacher.test.metric in ACCURACY_METRICS else None,
            head_scores=raw_scores.to_dict(), dense=dense, fitted=fitted, trials=trials,
            reproduce=_reproduce(task, profile, budget, options, fitted, runtime), out_dir=str(out),
            elapsed_s=round(time.perf_counter() - started, 1), timings_s={k: round(v, 1) for k, v in timings.items()},
            candidates=candidates, pareto=pareto_front(candidates, budget), teacher_quality=teacher.test,
            binding_budgets=binding, suggestions=suggestions,
            per_class_regressions=per_class_regressions(dense.quality.details, fitted.quality.details),
            shipped_files=shipped, device_profile=_profile_facts(profile), quality_tolerance=round(tolerance, 6),
        )
        write_json_atomic(work / "result.json", to_jsonable(result))
        write_text_atomic(work / "report.md", render_markdown(result))
        write_text_atomic(work / "report.html", render_html(result))
        (work / JOURNAL_NAME).unlink()
        if out.exists():
            out.rmdir()  # empty: prepare_out_dir refused anything else
        os.replace(work, out)
        progress.note(message)
        return result
    except BaseException:
        if journal is None or not journal.data["candidates"]:
            shutil.rmtree(work, ignore_errors=True)
        else:
            progress.note(f"stopped; finished candidates are kept in {work}: continue with --resume {out}")
        raise


def _estimator_if_unreachable(device_link: Transport, profile: DeviceProfile, options: FitOptions,
                              progress: Progress) -> HostEstimator | None:
    """None when the device answers; else an estimator from runs here (or DeviceUnreachableError when
    `require_device`). The local machine is always reachable."""
    if profile.endpoint.kind == "local":
        return None
    try:
        done = device_link.run(["true"], timeout_s=60)
        if done.exit_code == 0:
            return None
        reason = f"`true` exited {done.exit_code} there"
    except DeviceUnreachableError as error:
        reason = str(error)
    if options.require_device:
        raise DeviceUnreachableError(f"device {profile.name} is not usable ({reason}); fix the connection, or "
                                     "drop --require-device to fit on estimated figures")
    estimator = HostEstimator.for_profile(profile)
    progress.warn(f"{profile.name} is not reachable ({reason}); latency, memory and energy are ESTIMATED, not "
                  f"measured: {estimator.describe()}")
    return estimator


def _split_summary(task: Task) -> str:
    from edgeprune.data import describe_split

    if not any(task.splits.sizes().values()):  # tensors given directly (module tasks)
        return "; ".join(f"{name} {task.count(name)}" for name in ("calibration", "validation", "test"))
    split = describe_split(task.splits)
    parts = []
    for name, size in split["sizes"].items():
        balance = split["class_balance"].get(name) or {}
        parts.append(f"{name} {size}" + (f" ({', '.join(f'{k}: {v}' for k, v in balance.items())})" if balance
                                         else ""))
    return "; ".join(parts)


def _profile_facts(profile: DeviceProfile) -> dict[str, Any]:
    facts = to_jsonable(profile)
    return {k: v for k, v in facts.items() if k not in ("endpoint", "source", "python")} if isinstance(facts, dict) \
        else {}


def _fingerprint(task: Task, options: FitOptions, runtime: str, recipes: tuple[str, ...],
                 profile: DeviceProfile) -> str:
    payload = json.dumps([task.cache_key(), to_jsonable(options), runtime, recipes, profile.name], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _scores(task: Task, model: nn.Module, options: FitOptions, progress: Progress, journal: _Journal) -> HeadScores:
    if journal.data["scores"] is not None:
        progress.note("head scores: finished before (resumed)")
        return HeadScores.from_dict(journal.data["scores"])
    batches = task.batches("calibration", options.scoring_batch_size, limit=options.scoring_examples)
    with progress.task(f"scoring heads ({options.criterion})", min(options.scoring_examples,
                                                                   task.count("calibration"))) as bar:
        scores = score_heads(model, bar.track(batches), options.criterion, loss_fn=task.loss)
    journal.data["scores"] = scores.to_dict()
    journal.save()
    return scores


def _vocabulary(task: Task, options: FitOptions, progress: Progress) -> VocabularyMap | None:
    """The trimmed vocabulary when the search may trim (None: the task has none, or trimming is off)."""
    if options.trim_vocabulary is False:
        return None
    vocabulary = task.vocabulary()
    if vocabulary is None and options.trim_vocabulary is None:
        return None
    if vocabulary is None:
        raise UserInputError(f"vocabulary trimming applies to text encoders; the {task.kind} task has no trimmable "
                             "vocabulary; drop --trim-vocab")
    progress.note(f"vocabulary {'trimmed' if options.trim_vocabulary else 'may be trimmed'} to the "
                  f"{len(vocabulary.kept_ids)} of {vocabulary.original_size} tokens seen in the calibration and "
                  "validation data (others become the unknown token)")
    return vocabulary


def _dense_baseline(builder: _Builder, runtime: str, journal: _Journal) -> BuiltArtifact:
    saved = journal.artifact("dense")
    if saved is not None and (builder.work / saved.path).is_file():
        return saved
    dense = builder.build(Shape(), RECIPES.get(FP32_RECIPE[runtime]), BASELINE_STEM + builder.suffix,
                          "dense baseline", baseline=True)
    builder.measure(dense)
    journal.record("dense", dense)
    return dense


def _search(builder: _Builder, budget: Budget, recipes: tuple[str, ...], reference: Quality,
            progress: Progress) -> tuple[list[BuiltArtifact], list[Trial]]:
    """Best-first over the space's lines (recipe × FFN fraction × layers removed × vocabulary), cheap first.

    Per line only its *frontier* matters: the fewest heads removed that the size model (exact) and the latency
    model predict to meet the budgets, since more removal only lowers quality. Frontiers more compressed than
    another frontier or a measured candidate of an equal or higher-fidelity recipe cannot beat it and are
    skipped. The rest are bounded by the structure's PyTorch validation quality (plus the largest gain any
    artifact showed over its estimate) and built in order of that estimate less the quantization loss
    measured for the recipe. A built candidate over a resource budget moves its line's frontier (and teaches
    the latency model); the search ends when no frontier's bound beats the best candidate meeting every budget.
    """
    order = {name: index for index, name in enumerate(recipes)}
    space = lines(recipes, builder.options.ffn_fractions, builder.layer_counts, _vocabulary_choices(builder))
    built: dict[tuple[str, Shape], BuiltArtifact] = {}
    over: list[tuple[str, Shape]] = []  # measured over a resource budget
    anchors: list[tuple[str, Shape, BuiltArtifact]] = []  # measured, not over: nothing more compressed beats them
    closed: dict[Line, str] = {}  # lines with nothing left to try, and why
    tolerance = quality_tolerance(builder.options, reference)
    incumbent: BuiltArtifact | None = None
    trials: list[Trial] = []
    rejected: set[str] = set()
    floor = budget.quality_floor(reference)
    if floor is not None and not reference.higher_is_better:
        floor = -floor

    def dominated(recipe: str, shape: Shape, others: list[tuple[str, Shape]]) -> bool:
        return any(order[r] <= order[recipe] and shape.at_least_as_compressed_as(s) and (r, s) != (recipe, shape)
                   for r, s in others)

    while True:
        frontier: dict[Line, Shape] = {}
        for line in space:
            if line in closed or line.recipe in rejected:
                continue
            shape = _frontier(builder, line, budget, over)
            if shape is not None:
                frontier[line] = shape
        contenders = []
        settled = [(r, s) for r, s, _ in anchors]
        for line, shape in frontier.items():
            others = settled + [(other.recipe, s) for other, s in frontier.items()]
            if dominated(line.recipe, shape, settled):
                closed[line] = "cannot beat a measured candidate that is less compressed"
            elif not dominated(line.recipe, shape, others) and (line.recipe, shape) not in built:
                contenders.append((line, shape))
        ranked = []
        gain = _largest_gain(anchors, builder)
        for line, shape in contenders:
            estimate = _signed(builder.proxy(shape))
            threshold = _threshold(incumbent, shape, builder, tolerance)
            if threshold is not None and estimate + gain <= threshold:
                closed[line] = f"PyTorch estimate {builder.proxy(shape).value:.4f} cannot beat the best so far"
            elif floor is not None and estimate + gain < floor:
                closed[line] = f"PyTorch estimate {builder.proxy(shape).value:.4f} is under the quality floor"
            else:  # most promising first: the estimate less what this recipe was seen to lose
                expected = estimate - _quantization_loss(line.recipe, anchors, order, builder)
                ranked.append((-expected, order[line.recipe], shape, line))
        if not ranked:
            break
        _, _, shape, line = min(ranked)
        recipe = RECIPES.get(line.recipe)
        try:
            artifact = builder.candidate(recipe, shape, budget, reference,
                                         _threshold(incumbent, shape, builder, tolerance))
        except VerificationError as error:  # the recipe does not hold on this model: drop it, keep searching
            progress.warn(f"{recipe.name} rejected: {error}")
            for other in space:
                if other.recipe == recipe.name:
                    closed[other] = f"{recipe.name} rejected by verification"
            trials.append(Trial(line.recipe, shape.heads_removed, builder.predict_bytes(shape, recipe),
                                note=f"rejected by verification: {error}", ffn_fraction=shape.ffn_fraction,
                                layers_removed=shape.layers_removed, trim_vocabulary=shape.trim_vocabulary))
            rejected.add(recipe.name)
            continue
        built[(line.recipe, shape)] = artifact
        resources = [c for c in artifact.checks if not c.name.endswith("(validation)")]
        over_budget = [c for c in resources if not c.passed and c.value is not None]
        trials.append(Trial(line.recipe, shape.heads_removed, artifact.predicted_bytes, artifact.file_bytes,
                            not over_budget and artifact.benchmark is not None, artifact.export_seconds,
                            artifact.cached_export, artifact.note, shape.ffn_fraction, shape.layers_removed,
                            shape.trim_vocabulary, builder.proxy(shape).value))
        if over_budget:
            # trimming the vocabulary changes only the size: over on anything else is over with either vocabulary
            size_only = all(c.name == "size" for c in over_budget)
            over.append((line.recipe, shape if size_only else dataclasses.replace(shape, trim_vocabulary=True)))
            failed = ", ".join(f"{c.name} {_fmt(c.value)} > {_fmt(c.limit)} {c.unit}".strip() for c in over_budget)
            progress.note(f"  over budget ({failed}): compressing further")
        else:
            anchors.append((line.recipe, shape, artifact))
            incumbent = _incumbent(built.values(), tolerance)
        _note_best(progress, incumbent, builder.started)
    for line in space:  # what stopped each line that never built a candidate
        reason = closed.get(line) or ("a less compressed candidate of an equal or higher-fidelity recipe was "
                                      "preferred" if line in frontier else
                                      "the size or latency model predicts every head count over budget")
        if not any(r == line.recipe and _on_line(s, line) for r, s in built):
            shape = line.shape(builder.head_counts(line.layers_removed)[-1])
            trials.append(Trial(line.recipe, shape.heads_removed, builder.predict_bytes(shape, RECIPES.get(
                line.recipe)), note=f"not built: {reason}", ffn_fraction=line.ffn_fraction,
                layers_removed=line.layers_removed, trim_vocabulary=line.trim_vocabulary))
    if not any(a.meets_budget for a in built.values()):
        usable = [line for line in space if line.recipe not in rejected]
        if not usable:
            raise VerificationError(f"every recipe tried ({', '.join(recipes)}) was rejected by verification on "
                                    "this model; try another --recipe (e.g. int8)")
        _build_closest(builder, budget, reference, progress, usable, built, trials)
    return list(built.values()), trials


def _build_closest(builder: _Builder, budget: Budget, reference: Quality, progress: Progress, space: list[Line],
                   built: dict[tuple[str, Shape], BuiltArtifact], trials: list[Trial]) -> None:
    """Nothing meets every budget: build (if not yet) the most compressed candidate — of the recipe measured
    fastest when latency binds, else the smallest recipe — and measure it fully, to show how close it gets."""
    benchmarked = [a for a in built.values() if a.benchmark is not None]
    recipe = space[-1].recipe
    if budget.max_latency_ms is not None and benchmarked:
        recipe = min(benchmarked, key=lambda a: a.benchmark.p50_ms).recipe
    layers = max(builder.layer_counts)
    shape = Shape(builder.head_counts(layers)[-1], max(builder.options.ffn_fractions), layers,
                  space[-1].trim_vocabulary)
    if (recipe, shape) in built:
        return
    progress.note(f"nothing meets every budget; building the most compressed candidate ({recipe}, "
                  f"{shape.describe()}) to show how close it gets")
    artifact = builder.candidate(RECIPES.get(recipe), shape, budget, reference)
    if artifact.validation_quality is None:
        builder.evaluate(artifact)
    if artifact.benchmark is None:
        builder.benchmark(artifact)
    artifact.checks = budget.check(artifact.file_bytes, artifact.benchmark, artifact.validation_quality, reference)
    trials.append(Trial(recipe, shape.heads_removed, artifact.predicted_bytes, artifact.file_bytes,
                        artifact.meets_budget, note="closest: the most compressed candidate",
                        ffn_fraction=shape.ffn_fraction, layers_removed=shape.layers_removed,
                        trim_vocabulary=shape.trim_vocabulary))
    built[(recipe, shape)] = artifact


def _threshold(incumbent: BuiltArtifact | None, shape: Shape, builder: _Builder, tolerance: float) -> float | None:
    """The signed validation quality a candidate must exceed to replace the incumbent: a tie is enough for a
    less compressed one (the order `_incumbent` breaks ties in), a more compressed one must be better by more
    than the tolerance."""
    if incumbent is None:
        return None
    quality = _signed(incumbent.validation_quality)
    less_compressed = ((builder.core_parameters(shape), not shape.trim_vocabulary)
                       > (incumbent.core_parameters, incumbent.vocabulary_size is None))
    return quality - tolerance if less_compressed else quality + tolerance


def _vocabulary_choices(builder: _Builder) -> tuple[bool, ...]:
    if builder.vocabulary is None:
        return (False,)
    choice = builder.options.trim_vocabulary
    return (False, True) if choice is None else (bool(choice),)


def _on_line(shape: Shape, line: Line) -> bool:
    return (shape.ffn_fraction, shape.layers_removed, shape.trim_vocabulary) == (
        line.ffn_fraction, line.layers_removed, line.trim_vocabulary)


def _frontier(builder: _Builder, line: Line, budget: Budget, over: list[tuple[str, Shape]]) -> Shape | None:
    """The fewest heads removed on `line` not known to be over budget and predicted to fit (within the models'
    slack: a real file and a real benchmark settle what the models cannot)."""
    recipe = RECIPES.get(line.recipe)
    for count in builder.head_counts(line.layers_removed):
        shape = line.shape(count)
        if any(r == line.recipe and s.at_least_as_compressed_as(shape) for r, s in over):
            continue
        if not budget.size_fits(int(builder.predict_bytes(shape, recipe) / SIZE_MODEL_SLACK)):
            continue
        if budget.max_latency_ms is not None:
            predicted = builder.predict_latency(shape, recipe)
            if predicted is not None and predicted > budget.max_latency_ms * builder.latency_slack(recipe):
                continue
        return shape
    return None


def _largest_gain(anchors: list[tuple[str, Shape, BuiltArtifact]], builder: _Builder) -> float:
    """How far above its PyTorch estimate any artifact measured (0 when none did): the bound's margin. Losses
    are not subtracted from the bound, since they depend on the structure (int4 loses more on a narrower
    FFN); they only order the contenders."""
    gains = [_signed(artifact.validation_quality) - _signed(builder.proxy(shape))
             for _, shape, artifact in anchors if artifact.validation_quality is not None]
    return max([0.0, *gains])


def _quantization_loss(recipe: str, anchors: list[tuple[str, Shape, BuiltArtifact]], order: dict[str, int],
                       builder: _Builder) -> float:
    """The least validation quality a recipe was measured to lose against the PyTorch estimate of the same
    structure; a recipe not measured yet borrows the largest loss of a higher-fidelity recipe (lower fidelity
    loses at least as much), else 0."""
    losses: dict[str, list[float]] = {}
    for name, shape, artifact in anchors:
        if artifact.validation_quality is not None:
            losses.setdefault(name, []).append(_signed(builder.proxy(shape)) - _signed(artifact.validation_quality))
    if recipe in losses:
        return min(losses[recipe])
    higher = [min(values) for name, values in losses.items() if order[name] < order[recipe]]
    return max(higher, default=0.0)


def quality_tolerance(options: FitOptions, reference: Quality) -> float:
    """Validation qualities closer than this are a tie: one standard error of the dense teacher's validation
    accuracy (sqrt(p(1 - p) / n), about 3 of 335 documents on minilm-bbc) unless set."""
    if options.quality_tolerance is not None:
        return options.quality_tolerance
    if reference.metric in ACCURACY_METRICS and reference.examples:
        p = min(max(reference.value, 0.0), 1.0)
        return math.sqrt(p * (1 - p) / reference.examples)
    return 0.0


def _incumbent(candidates: Any, tolerance: float) -> BuiltArtifact | None:
    """The candidate `fit` would choose now: among those meeting every budget, the ones within `tolerance` of
    the best validation quality are tied, and the least compressed of them (most parameters outside the
    embedding tables, then the full vocabulary) wins."""
    meeting = [c for c in candidates if c.meets_budget and c.validation_quality is not None]
    if not meeting:
        return None
    top = max(_signed(c.validation_quality) for c in meeting)
    tied = [c for c in meeting if _signed(c.validation_quality) >= top - tolerance]
    # a candidate left unbenchmarked could not beat the benchmarked one it ties with
    return max(tied, key=lambda c: (c.core_parameters, c.vocabulary_size is None, _signed(c.validation_quality),
                                    c.benchmark is not None, -c.file_bytes))


def _choose(candidates: list[BuiltArtifact], budget: Budget, reference: Quality,
            tolerance: float = 0.0) -> tuple[BuiltArtifact, list[str], list[str]]:
    """The best validation quality among candidates meeting every budget (ties within `tolerance` go to the
    least compressed); else the closest, with what binds."""
    best = _incumbent(candidates, tolerance)
    if best is not None:
        best.label = "fitted"
        return best, [], []
    closest = min(candidates, key=lambda c: (sum(not check.passed for check in c.checks), c.file_bytes))
    closest.label = "closest"
    binding = sorted({check.name for check in closest.checks if not check.passed})
    return closest, binding, _suggestions(candidates, budget, binding)


def _suggestions(candidates: list[BuiltArtifact], budget: Budget, binding: list[str]) -> list[str]:
    """What would make it fit, from the values measured: the least each binding budget would need."""
    suggestions = []
    values: dict[str, list[float]] = {}
    for candidate in candidates:
        for check in candidate.checks:
            if check.value is not None:
                values.setdefault(check.name, []).append(check.value)
    for name in binding:
        seen = values.get(name)
        if name == "size":
            smallest = min(seen) if seen else None
            suggestions.append("needs a smaller recipe (e.g. 4-bit weights: --recipe int4) or "
                               + (f"raise --max-mb to {smallest:.1f}" if smallest else "raise --max-mb"))
        elif name.startswith("latency") and seen:
            suggestions.append(f"raise --max-latency-ms to {min(seen):.1f} (the fastest candidate measured)")
        elif name == "peak memory" and seen:
            suggestions.append(f"raise --max-memory-mb to {min(seen):.0f}")
        elif name == "energy per inference" and seen:
            suggestions.append(f"raise --max-energy-mj to {min(seen):.1f}")
        elif name.endswith("(validation)") and seen:
            best = max(seen) if name.startswith("min") else min(seen)
            suggestions.append(f"relax --min-quality to {best:.4f} (the best candidate measured)")
        else:
            suggestions.append(f"{name}: no measured value; connect the device or drop the budget")
    return suggestions


def pareto_front(candidates: list[BuiltArtifact], budget: Budget) -> list[str]:
    """Paths of candidates no other candidate beats on validation quality, size and latency at once."""
    def axes(c: BuiltArtifact) -> tuple[float, float, float] | None:
        if c.validation_quality is None or c.benchmark is None:
            return None
        sign = 1 if c.validation_quality.higher_is_better else -1
        return sign * c.validation_quality.value, -c.file_bytes, -budget.latency(c.benchmark)

    scored = [(c, axes(c)) for c in candidates if axes(c) is not None]
    front = []
    for candidate, mine in scored:
        dominated = any(all(o >= m for o, m in zip(other, mine, strict=True)) and other != mine
                        for _, other in scored)
        if not dominated:
            front.append(candidate.path)
    return front


def _keep_only(fitted: BuiltArtifact, candidates: list[BuiltArtifact], work: Path) -> None:
    """Keep the chosen candidate as model.pte / model.tflite; drop the other candidates' files."""
    name = ARTIFACT_STEM + Path(fitted.path).suffix
    os.replace(work / fitted.path, work / name)
    for leftover in work.glob("candidate-*"):
        leftover.unlink()
    for candidate in candidates:
        if candidate is not fitted:
            candidate.path = f"(not kept) {candidate.path}"
    fitted.path = name


def _ship(task: Task, work: Path, fitted: BuiltArtifact, vocabulary: VocabularyMap | None) -> list[str]:
    """What the app needs: tokenizer or preprocessing, labels, the vocabulary map, the input signature."""
    shipped = task.ship(work)
    if vocabulary is not None:
        vocabulary.save(work / VOCABULARY_NAME)
        shipped.append(VOCABULARY_NAME)
    signature = {
        "artifact": fitted.path, "runtime_recipe": fitted.recipe,
        "inputs": to_jsonable(task.input_signature()),
        "outputs": _outputs(task), "metric": task.metric,
        "vocabulary_map": VOCABULARY_NAME if vocabulary is not None else None,
        "files": sorted(shipped),
    }
    write_json_atomic(work / SIGNATURE_NAME, signature)
    return [*sorted(shipped), SIGNATURE_NAME]


def _outputs(task: Task) -> list[dict[str, str]]:
    if task.kind == "causal-lm":
        return [{"name": "logits", "meaning": "next-token logits for every position"}]
    if task.kind == "embedding":
        return [{"name": "embedding", "meaning": "the sentence embedding"}]
    if task.kind == "module":
        return [{"name": "output", "meaning": "the module's outputs, first one scored by the task's metric"}]
    outputs = [{"name": "logits", "meaning": "one per label, in labels.json order"}]
    if task.kind == "classification" and not getattr(task, "uses_own_head", False):
        outputs.append({"name": "embedding", "meaning": "the mean-pooled sentence embedding"})
    return outputs


def _note_best(progress: Progress, best: BuiltArtifact | None, started: float) -> None:
    if best is not None:
        progress.note(f"  best so far: {best.recipe}, {best.describe()}, {best.file_bytes / 1e6:.2f} MB, validation "
                      f"{best.validation_quality.metric} {best.validation_quality.value:.4f} ({_elapsed(started)})")
    else:
        progress.note(f"  nothing meets every budget yet ({_elapsed(started)})")


def _fmt(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def _summary(fits: bool, fitted: BuiltArtifact, budget: Budget, binding: list[str], suggestions: list[str]) -> str:
    size = f"{fitted.file_bytes / 1e6:.2f} MB"
    heads = f"{fitted.describe()} (of {sum(fitted.plan['num_heads'])} heads)"
    measured = "; ".join(f"{c.name} {_fmt(c.value)}{(' ' + c.unit) if c.unit else ''} (limit {_fmt(c.limit)})"
                         for c in fitted.checks)
    if fits:
        return f"fits every budget with {fitted.recipe}, {heads}: {measured or size}"
    return (f"cannot meet {', '.join(binding)}: the closest candidate is {size} ({fitted.recipe}, {heads}; "
            f"{measured}); {'; '.join(suggestions)}")


def _reproduce(task: Task, profile: DeviceProfile, budget: Budget, options: FitOptions,
               fitted: BuiltArtifact, runtime: str) -> dict[str, object]:
    import transformers

    from edgeprune import __version__

    return {
        "command": shlex.join(["edgeprune", *sys.argv[1:]]) if Path(sys.argv[0]).name == "edgeprune" else None,
        "task": task.describe(), "model_path": str(task.model_path), "seed": task.seed,
        "device": profile.name, "budget": to_jsonable(budget), "options": to_jsonable(options),
        "criterion": options.criterion, "strategy": fitted.plan["strategy"], "normalize": options.normalize,
        "compensation": "mean head outputs folded into the output-projection bias" if options.compensate else None,
        "heads_removed": fitted.plan["heads_removed"], "kept_heads": fitted.plan["kept_heads"],
        "quantization": fitted.recipe, "runtime": runtime,
        "versions": {"edgeprune": __version__, "torch": torch.__version__, "executorch": _version("executorch"),
                     "litert-torch": _version("litert-torch"), "ai-edge-litert": _version("ai-edge-litert"),
                     "transformers": transformers.__version__},
    }


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
