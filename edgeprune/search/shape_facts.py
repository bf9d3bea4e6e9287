"""What a search `Shape` is, without building anything: the structure it keeps of the teacher, the pruned float
model, and the cheap figures the search decides on (exact sizes, parameters, FLOPs, predicted latency, and how
far each prediction may be trusted). The builder (`edgeprune.search.builder`) turns shapes into artifacts; this
answers the questions asked of thousands of shapes before a few are built.
"""

import copy
import dataclasses
from collections.abc import Callable, Hashable
from typing import Any

from torch import nn

from edgeprune.devices import DeviceProfile
from edgeprune.errors import UserInputError
from edgeprune.importance import HeadScores
from edgeprune.pruning import PruningPlan, measure_flops
from edgeprune.pruning.compensation import HeadOutputMeans
from edgeprune.pruning.ffn import NeuronStatistics, intermediate_sizes, plan_neurons
from edgeprune.pruning.structure import StructureCompensation, StructurePlan, apply_structure, ffn_kept_from_removal
from edgeprune.quantize import FP32_RECIPE, RECIPES, Recipe, SizeModel, fidelity_rank
from edgeprune.quantize.recipes import INT4_GROUP
from edgeprune.quantize.size_model import ParameterLayout, payload_bytes
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from edgeprune.search.head_plans import HeadPlanner
from edgeprune.search.latency import LatencyModel
from edgeprune.search.options import FitOptions
from edgeprune.search.shared import SharedWork, calibration_inputs
from edgeprune.search.space import Shape
from edgeprune.tasks.base import Task

SIZE_MODEL_SLACK = 1.05  # export anyway when the predicted size is within 5 % over the budget ...
# ... and within 1 % once a file of the recipe has been measured: the payload is exact and the measured overhead moves
# little between structures (SmolLM2 `litert-int4-all`: 0.13 MB less with a layer removed, of 89.55 predicted) ...
OBSERVED_SIZE_SLACK = 1.01
# ... and within 0.05 % (or 4 KiB, whichever is more) once a file of the recipe was measured at the same number of
# layers: the overhead (the program's records, delegate headers) is per layer, so heads and FFN neurons change only
# the exact payload, up to the tensors' alignment (docs/FINDINGS.md: SmolLM2 `int4-decoder-all` 30 heads removed
# predicted 98,101,888 bytes, measured 98,104,960; LiteRT's 90.15 MB measured 90.17; MiniLM int4 116,056 bytes of
# overhead dense and with half the heads; tiny test models up to 1.7 KB apart). A 1 % slack here cost the SmolLM2
# ExecuTorch fit an 8-minute export 0.1 % over its budget and another to learn a size it already knew.
SAME_DEPTH_SIZE_SLACK = 1.0005
SAME_DEPTH_SLACK_BYTES = 4096
# how far a file may overrun a prediction extrapolated along a calibrated line of overhead per layer
# (`edgeprune.search.size_calibration`): from SmolLM2's 1- and 3-layer cuts, ExecuTorch's dense file was 448 bytes
# over, LiteRT's 0.08 %
CALIBRATED_OVERRUN = 0.0025
LATENCY_MODEL_SLACK = 1.15  # benchmark anyway when the latency model predicts within 15 % of the budget
FITTED_LATENCY_SLACK = 1.05  # the same once the recipe's own line is fitted to two measurements
# ... and while a recipe borrows the measurements of a recipe of its runtime that keeps its linears in more bits:
# int8 ran 2.2× (ExecuTorch) and 2.8× (LiteRT) faster than fp32 on MiniLM at one thread (docs/FINDINGS.md, export
# matrix), so such a figure may be that far too slow; skip on it only beyond what that gap explains.
BORROWED_LATENCY_SLACK = 3.0
# ... and on the measurements of a recipe with fewer bits: ExecuTorch's 4-bit linears run slower than its int8 ones
# (dense MiniLM, 2 threads, this machine 2026-12-04: int8 p50 9.8-10.0 ms, int4 11.24 ms, int4-linear 11.3-11.4 ms,
# up to 16 % more), past the 15 % of LATENCY_MODEL_SLACK: an int8 candidate skipped on an int4 figure 16 % over the
# budget would have fitted (found by tests/test_fit_search.py's two-runtime property, max_mb 12, latency 6.25)
NARROWER_LENDER_LATENCY_SLACK = 1.25


class ShapeFacts:
    """The structures, pruned models and predicted figures of the shapes of one teacher, one ranking and one
    device; device-independent parts kept in `shared` for the other devices of a fleet."""

    def __init__(self, teacher: nn.Module, scores: HeadScores, task: Task, options: FitOptions, runtime: str,
                 profile: DeviceProfile, shared: SharedWork, vocabulary: VocabularyMap | None = None,
                 means: HeadOutputMeans | None = None) -> None:
        self.teacher, self.task, self.options, self.shared = teacher, task, options, shared
        self.runtime = runtime  # the dense baseline's: core parameters are counted on its fp32 layout
        self.vocabulary = vocabulary  # the trimmed vocabulary shapes with trim_vocabulary use
        self.means = means  # the dense teacher's head means (None: compensation is off)
        self.size_model = SizeModel()
        self.latency_model = LatencyModel(profile.peak_gflops, profile.mem_bandwidth_gbs)
        self.example = task.example_inputs("validation", 1)[0]
        self.planner = HeadPlanner(teacher, scores, task, options, shared)
        self.layers = self.planner.layers
        # layer counts the model allows (a 2-layer model can lose 1); the defaults are for 6+ layers
        self.layer_counts = tuple(c for c in options.layer_removals if c < self.layers) or (0,)
        self.size_observed: set[tuple[str, Shape]] = set()  # candidates the size model has learnt from
        # recipe → (layers removed, vocabulary trimmed) of the file its overhead was last measured on
        self.overhead_depth: dict[str, tuple[int, bool]] = {}
        # recipe → its overhead's bytes per layer, calibrated on cuts of the teacher (`size_calibration`)
        self.layer_overhead: dict[str, float] = {}
        self.calibration_failed: set[str] = set()  # recipes whose cuts could not be exported

    def removed_layers(self, count: int) -> list[int]:
        return self.planner.removed_layers(count)

    def head_counts(self, layers_removed: int = 0) -> list[int]:
        return self.planner.head_counts(layers_removed)

    def plan(self, heads_removed: int, layers_removed: int = 0) -> PruningPlan:
        return self.planner.plan(heads_removed, layers_removed)

    def neuron_statistics(self) -> NeuronStatistics:
        if self.shared.neurons is None:
            from edgeprune.pruning.ffn import neuron_statistics

            self.shared.neurons = neuron_statistics(self.teacher, calibration_inputs(self.task, self.options))
        return self.shared.neurons

    def structure(self, shape: Shape) -> StructurePlan:
        """What `shape` keeps of the teacher, on the teacher's indices: the global top-k heads of the layers that
        stay, the FFN neurons of highest fluctuation, the most redundant layers removed, the trimmed vocabulary."""
        ffn_kept = None
        if shape.ffn_fraction:
            # widths on the 4-bit groups, so that no down projection of an int4 candidate stays at 8 bits
            removal = plan_neurons(self.neuron_statistics().fluctuation, shape.ffn_fraction,
                                   per_layer=self.options.ffn_allocation == "uniform", multiple=INT4_GROUP)
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

    def predict_bytes(self, shape: Shape, recipe: Recipe) -> int:
        """The file size of `shape` in `recipe`: the exact payload (linear between the ends of the shape's line)
        plus the recipe's overhead (`overhead`: measured on a file of the recipe, moved along its calibrated
        overhead per layer)."""
        for end in line_ends(self.head_counts, shape)[:2]:
            if end not in self.shared.layouts:
                self.shared.layouts[end] = ParameterLayout.of(self.pruned(end))
        payload = interpolated(self.shared.payload, (recipe.name,), shape, self.head_counts,
                               lambda end: payload_bytes(self.shared.layouts[end], recipe))
        return int(payload) + self.overhead(recipe, shape)

    def overhead(self, recipe: Recipe, shape: Shape) -> int:
        """What a file of `recipe` adds to the payload: the size model's, measured on a file of the recipe (or
        assumed), moved along the recipe's calibrated overhead per layer to `shape`'s depth."""
        measured = self.size_model.overhead(recipe)
        if recipe.name not in self.layer_overhead or recipe.name not in self.overhead_depth:
            return measured
        layers_removed = self.overhead_depth[recipe.name][0]
        return max(0, int(measured + (layers_removed - shape.layers_removed) * self.layer_overhead[recipe.name]))

    def core_parameters(self, shape: Shape) -> int:
        """Parameters outside the embedding tables: how much of the network itself a shape keeps."""
        self.predict_bytes(shape, RECIPES.get(FP32_RECIPE[self.runtime]))  # measures the layouts of the line's ends
        return int(interpolated(self.shared.core, (), shape, self.head_counts,
                                lambda end: self.shared.layouts[end].core_parameters))

    def flops(self, shape: Shape) -> int:
        inputs = dict(zip(self.task.input_names, self.example[:len(self.task.input_names)], strict=True))
        return int(interpolated(self.shared.flops, (), shape.structure, self.head_counts,
                                lambda end: measure_flops(self.pruned(end), inputs)))

    def predict_latency(self, shape: Shape, recipe: Recipe) -> float | None:
        return self.latency_model.predict(recipe.name, self.flops(shape), self.predict_bytes(shape, recipe))

    def size_slack(self, recipe: Recipe, shape: Shape) -> float:
        """How far over the size budget `shape`'s predicted size in `recipe` may be and still be built (a factor):
        wide until a file of the recipe has taught the size model its overhead, narrow after, narrowest when that
        file had as many layers as `shape` or the overhead per layer is calibrated (and the same vocabulary): a
        model with fewer layers has fewer records, so its file may come in under a prediction from a deeper one."""
        if not self.size_model.observed(recipe) or recipe.name not in self.overhead_depth:
            return SIZE_MODEL_SLACK
        layers_removed, trimmed = self.overhead_depth[recipe.name]
        if trimmed != shape.trim_vocabulary:
            return OBSERVED_SIZE_SLACK
        # along a calibrated line the files came in over their predictions, never under (448 bytes, 0.08 %): a
        # candidate predicted over by more than the narrow slack is over
        if layers_removed == shape.layers_removed or recipe.name in self.layer_overhead:
            return self.narrow_slack(recipe, shape)
        return OBSERVED_SIZE_SLACK

    def size_overrun(self, recipe: Recipe, shape: Shape) -> float:
        """How far over its predicted size `shape`'s file in `recipe` may come (a fraction): what a candidate to be
        recovered is probed within. Narrow once the overhead was measured on as many layers or more (the same
        vocabulary): the records of a layer removed only take from it; a little wider along a calibrated line."""
        if not self.size_model.observed(recipe) or recipe.name not in self.overhead_depth:
            return SIZE_MODEL_SLACK - 1
        layers_removed, trimmed = self.overhead_depth[recipe.name]
        if trimmed != shape.trim_vocabulary:
            return OBSERVED_SIZE_SLACK - 1
        if layers_removed == shape.layers_removed:
            return self.narrow_slack(recipe, shape) - 1
        if recipe.name in self.layer_overhead:
            return max(CALIBRATED_OVERRUN, self.narrow_slack(recipe, shape) - 1)
        if layers_removed < shape.layers_removed:
            return self.narrow_slack(recipe, shape) - 1
        return OBSERVED_SIZE_SLACK - 1

    def narrow_slack(self, recipe: Recipe, shape: Shape) -> float:
        return min(OBSERVED_SIZE_SLACK, max(SAME_DEPTH_SIZE_SLACK,
                                            1 + SAME_DEPTH_SLACK_BYTES / max(1, self.predict_bytes(shape, recipe))))

    def latency_slack(self, recipe: Recipe) -> float:
        """How far over the budget a predicted latency may be and still be built: widest on the measurements of a
        recipe with more bits, wider on those of a recipe with fewer, wide while the model scales one recipe's
        measurements through the origin or borrows another's of the same bits, narrow once a line is fitted to this
        recipe's measurements (`LatencyModel.basis`)."""
        basis = self.latency_model.basis(recipe.name)
        lender = self.latency_model.lender(recipe.name) if basis == "borrowed" else None
        if lender is not None and fidelity_rank(RECIPES.get(lender))[0] < fidelity_rank(recipe)[0]:
            return BORROWED_LATENCY_SLACK
        if lender is not None and fidelity_rank(RECIPES.get(lender))[0] > fidelity_rank(recipe)[0]:
            return NARROWER_LENDER_LATENCY_SLACK
        return FITTED_LATENCY_SLACK if basis == "fitted" else LATENCY_MODEL_SLACK

    def learn_size(self, recipe: Recipe, shape: Shape, file_bytes: int, model: nn.Module) -> None:
        """Teach the size model what a file of `recipe` at `shape`, exported from the float `model`, measured."""
        self.size_observed.add((recipe.name, shape))
        self.learn_overhead(recipe, shape, file_bytes, model)

    def learn_overhead(self, recipe: Recipe, shape: Shape, file_bytes: int, model: nn.Module) -> None:
        """The size model's overhead of `recipe` from a file of `model` (of `shape`'s depth and vocabulary)."""
        self.size_model.observe(model, recipe, file_bytes)
        self.overhead_depth[recipe.name] = (shape.layers_removed, shape.trim_vocabulary)

    def observe_size(self, recipe: Recipe, shape: Shape, file_bytes: int) -> None:
        """`learn_size` once per recipe and shape, from the teacher pruned to `shape` (the layout of a recovered
        model too): what the searcher tells, so that a replayed search learns what the original did."""
        if (recipe.name, shape) not in self.size_observed:
            self.learn_size(recipe, shape, file_bytes, self.pruned(shape))


def line_ends(head_counts: Callable[[int], list[int]], shape: Shape) -> tuple[Shape, Shape, int]:
    """The shapes of `shape`'s line at no head and at every removable head removed, and that number of heads."""
    top = head_counts(shape.layers_removed)[-1]
    return dataclasses.replace(shape, heads_removed=0), dataclasses.replace(shape, heads_removed=top), top


def interpolated(cache: dict[tuple[Hashable, ...], Any], key: tuple[Hashable, ...], shape: Shape,
                 head_counts: Callable[[int], list[int]], exact: Callable[[Shape], float]) -> float:
    """`exact(shape)` at no head and at every removable head removed, linear in between: exact when every head owns
    the same parameters and FLOPs (true of MHA models); the real file settles what is built. The ends are kept in
    `cache` under `(*key, end)`."""
    low, high, top = line_ends(head_counts, shape)
    for end in (low, high):
        if (*key, end) not in cache:
            cache[(*key, end)] = exact(end)
    if top == 0:
        return cache[(*key, low)]
    share = shape.heads_removed / top
    return cache[(*key, low)] + share * (cache[(*key, high)] - cache[(*key, low)])
