"""The best-first search over the space of candidates: which candidate to build next, and when to stop."""

import dataclasses

from edgeprune.errors import VerificationError
from edgeprune.progress import Progress
from edgeprune.quantize import RECIPES
from edgeprune.search.budget import Budget
from edgeprune.search.builder import CandidateBuilder, elapsed_text, signed
from edgeprune.search.choice import best_meeting_budget, format_value, quality_tolerance
from edgeprune.search.result import BuiltArtifact, Trial
from edgeprune.search.space import Line, Shape, lines
from edgeprune.tasks.base import Quality

SIZE_MODEL_SLACK = 1.05  # export anyway when the prediction is within 5 % of the budget


def best_first_search(builder: CandidateBuilder, budget: Budget, recipes: tuple[str, ...], reference: Quality,
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
            estimate = signed(builder.proxy(shape))
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
            failed = ", ".join(f"{c.name} {format_value(c.value)} > {format_value(c.limit)} {c.unit}".strip()
                               for c in over_budget)
            progress.note(f"  over budget ({failed}): compressing further")
        else:
            anchors.append((line.recipe, shape, artifact))
            incumbent = best_meeting_budget(built.values(), tolerance)
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


def _build_closest(builder: CandidateBuilder, budget: Budget, reference: Quality, progress: Progress, space: list[Line],
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


def _threshold(incumbent: BuiltArtifact | None, shape: Shape, builder: CandidateBuilder,
               tolerance: float) -> float | None:
    """The signed validation quality a candidate must exceed to replace the incumbent: a tie is enough for a
    less compressed one (the order `incumbent` breaks ties in), a more compressed one must be better by more
    than the tolerance."""
    if incumbent is None:
        return None
    quality = signed(incumbent.validation_quality)
    less_compressed = ((builder.core_parameters(shape), not shape.trim_vocabulary)
                       > (incumbent.core_parameters, incumbent.vocabulary_size is None))
    return quality - tolerance if less_compressed else quality + tolerance


def _vocabulary_choices(builder: CandidateBuilder) -> tuple[bool, ...]:
    if builder.vocabulary is None:
        return (False,)
    choice = builder.options.trim_vocabulary
    return (False, True) if choice is None else (bool(choice),)


def _on_line(shape: Shape, line: Line) -> bool:
    return (shape.ffn_fraction, shape.layers_removed, shape.trim_vocabulary) == (
        line.ffn_fraction, line.layers_removed, line.trim_vocabulary)


def _frontier(builder: CandidateBuilder, line: Line, budget: Budget, over: list[tuple[str, Shape]]) -> Shape | None:
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


def _largest_gain(anchors: list[tuple[str, Shape, BuiltArtifact]], builder: CandidateBuilder) -> float:
    """How far above its PyTorch estimate any artifact measured (0 when none did): the bound's margin. Losses
    are not subtracted from the bound, since they depend on the structure (int4 loses more on a narrower
    FFN); they only order the contenders."""
    gains = [signed(artifact.validation_quality) - signed(builder.proxy(shape))
             for _, shape, artifact in anchors if artifact.validation_quality is not None]
    return max([0.0, *gains])


def _quantization_loss(recipe: str, anchors: list[tuple[str, Shape, BuiltArtifact]], order: dict[str, int],
                       builder: CandidateBuilder) -> float:
    """The least validation quality a recipe was measured to lose against the PyTorch estimate of the same
    structure; a recipe not measured yet borrows the largest loss of a higher-fidelity recipe (lower fidelity
    loses at least as much), else 0."""
    losses: dict[str, list[float]] = {}
    for name, shape, artifact in anchors:
        if artifact.validation_quality is not None:
            losses.setdefault(name, []).append(signed(builder.proxy(shape)) - signed(artifact.validation_quality))
    if recipe in losses:
        return min(losses[recipe])
    higher = [min(values) for name, values in losses.items() if order[name] < order[recipe]]
    return max(higher, default=0.0)



def _note_best(progress: Progress, best: BuiltArtifact | None, started: float) -> None:
    if best is not None:
        progress.note(f"  best so far: {best.recipe}, {best.describe()}, {best.file_bytes / 1e6:.2f} MB, validation "
                      f"{best.validation_quality.metric} {best.validation_quality.value:.4f} ({elapsed_text(started)})")
    else:
        progress.note(f"  nothing meets every budget yet ({elapsed_text(started)})")


