"""The best-first search over the space of candidates: which candidate to build next, and when to stop."""

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from edgeprune.errors import VerificationError
from edgeprune.progress import Progress, elapsed_text
from edgeprune.quantize import RECIPES, Recipe
from edgeprune.search.budget import Budget
from edgeprune.search.choice import best_meeting_budget, format_against, quality_tolerance
from edgeprune.search.options import FitOptions
from edgeprune.search.ranking import at_least_as_faithful, ceiling, largest_gain, quantization_loss
from edgeprune.search.recovering import signed_value as signed
from edgeprune.search.result import BuiltArtifact, Trial
from edgeprune.search.space import Line, Shape, lines
from edgeprune.tasks.base import Quality


@dataclass(frozen=True)
class Proposal:
    """The next candidate to build, and the signed validation quality it must exceed to replace the best so far
    (None: there is none), which tells the builder whether benchmarking it is worth the device's time."""

    recipe: str
    shape: Shape
    threshold: float | None = None
    closest: bool = False  # nothing met every budget: the most compressed candidate, measured in full
    # False: ranked by the most its PyTorch estimate can be, not measured yet (only `upcoming` and `stop` see these)
    estimated: bool = True


@dataclass
class SearchOutcome:
    """What a search built and considered, and why it stopped early when it did (None: it ran until nothing left
    could beat the best candidate)."""

    candidates: list[BuiltArtifact]
    trials: list[Trial]
    stopped_early: str | None = None


class SearchSpace(Protocol):
    """What the searcher asks of the space it searches: cheap questions about shapes (head counts, exact sizes,
    predicted latency and how far to trust it, PyTorch estimates) and, for the candidates it chooses, a measured
    artifact. `edgeprune.search.builder.CandidateBuilder` is the real one; `tests/test_fit_search.py` has a model
    of the world."""

    options: FitOptions
    vocabulary: object | None  # None: no shape trims the vocabulary
    layer_counts: tuple[int, ...]  # how many layers a shape may remove
    started: float  # `time.perf_counter()` when the space was made (progress lines say how long the search took)

    def head_counts(self, layers_removed: int = 0) -> list[int]: ...

    def core_parameters(self, shape: Shape) -> int: ...

    def predict_bytes(self, shape: Shape, recipe: Recipe) -> int: ...

    def predict_latency(self, shape: Shape, recipe: Recipe) -> float | None: ...

    def size_slack(self, recipe: Recipe, shape: Shape) -> float: ...

    def latency_slack(self, recipe: Recipe) -> float: ...

    def proxy(self, shape: Shape) -> Quality: ...

    def measured_estimates(self) -> dict[Shape, Quality]: ...

    def recipe_estimate(self, recipe: Recipe) -> Quality | None: ...

    def calibrate_size(self, recipe: Recipe, shape: Shape, budget: Budget) -> bool: ...

    def bound(self, shape: Shape) -> Quality: ...

    def candidate(self, recipe: Recipe, shape: Shape, budget: Budget, reference: Quality,
                  best: float | None = None, probe: bool = True) -> BuiltArtifact: ...

    def observe(self, recipe: str, shape: Shape, artifact: BuiltArtifact) -> None: ...

    def evaluate(self, artifact: BuiltArtifact) -> None: ...

    def benchmark(self, artifact: BuiltArtifact) -> None: ...


class BuildsAhead(Protocol):
    """Builds started early elsewhere, knowing what the searcher ranks next (e.g. on Ray workers:
    `edgeprune.cluster.ahead.RayBuildsAhead`); they must not change what the searcher decides."""

    depth: int  # how many candidates after the one being built may be building meanwhile

    def before_build(self, proposal: Proposal, upcoming: list[Proposal]) -> None: ...


class BestFirstSearcher:
    """Best-first over the space's lines (recipe × FFN fraction × layers removed × vocabulary), cheap first.

    Per line only its *frontier* matters: the fewest heads removed that the size model (exact) and the latency
    model predict to meet the budgets, since more removal only lowers quality. Frontiers more compressed than
    another frontier or a measured candidate of an equal or higher-fidelity recipe cannot beat it and are
    skipped. The rest are bounded by the structure's PyTorch validation quality (plus the largest gain any
    artifact showed over its estimate) and built in order of that estimate less the quantization loss
    measured for the recipe (until an artifact of it measures one: its loss on the dense model in PyTorch, asked
    once the recipe's line would rank first, `edgeprune.search.recipe_estimates`). A built candidate over a
    resource budget moves its line's frontier (and teaches the latency model); the search ends when no frontier's
    bound beats the best candidate meeting every budget.
    Estimates are measured lazily (13-19 s each on SmolLM2-135M): a frontier not estimated yet ranks by the most
    its estimate can be (the least estimate measured for a structure it is at least as compressed as) and is
    measured once that could put it first or tie the first, so the candidates built are those all estimates would
    give (but for a rare order: a line the eager search would close on an estimate not measured here still
    dominates others), and a search stopped by a time limit leaves the frontiers it never reached unmeasured.

    The interface is ask-and-tell, in the spirit of ModelOpt's searchers: `propose()` names the next candidate
    (None when nothing left can win), `tell()` / `reject()` report what building it gave. It keeps no checkpoint of
    its own: a resumed fit runs a fresh searcher over the same space, whose builder hands back the journaled
    candidates (edgeprune.search.journal, the one owner of resume) instead of building them again.
    `space` answers the cheap questions (sizes, latency predictions, PyTorch estimates, head counts) and builds
    what is chosen (`SearchSpace`).
    """

    def __init__(self, space: SearchSpace, budget: Budget, recipes: tuple[str, ...], reference: Quality,
                 progress: Progress) -> None:
        self.space, self.budget, self.recipes, self.reference, self.progress = space, budget, recipes, reference, \
            progress
        self.order = {name: index for index, name in enumerate(recipes)}
        self.lines = lines(recipes, space.options.ffn_fractions, space.layer_counts, _vocabulary_choices(space))
        self.built: dict[tuple[str, Shape], BuiltArtifact] = {}
        self.over: list[tuple[str, Shape]] = []  # measured over a resource budget
        self.anchors: list[tuple[str, Shape, BuiltArtifact]] = []  # measured, not over: nothing more compressed wins
        self.closed: dict[Line, str] = {}  # lines with nothing left to try, and why
        self.frontier: dict[Line, Shape] = {}
        self.tolerance = quality_tolerance(space.options, reference)
        self.incumbent: BuiltArtifact | None = None
        self.trials: list[Trial] = []
        self.rejected: set[str] = set()
        self.done = False
        self.stopped_early: str | None = None  # why `stop` ended the search, with what it left unbuilt
        # what each recipe was estimated in PyTorch to cost the dense model (asked when its line would rank first
        # while no artifact of it has measured its loss: `recipe_estimates`)
        self.estimated_losses: dict[str, float] = {}
        self.estimates_asked: set[str] = set()  # None for a recipe no PyTorch module can estimate
        floor = budget.quality_floor(reference)
        self.floor = -floor if floor is not None and not reference.higher_is_better else floor

    def _dominated(self, recipe: str, shape: Shape, others: list[tuple[str, Shape]]) -> bool:
        return any(at_least_as_faithful(r, recipe, self.order) and shape.at_least_as_compressed_as(s)
                   and (r, s) != (recipe, shape) for r, s in others)

    def propose(self) -> Proposal | None:
        """The most promising candidate that can still win; once none can, the closest candidate to measure when
        nothing met every budget; then None."""
        if self.done:
            return None
        ranked = self._ranked()
        if ranked:
            return ranked[0]
        self.done = True
        self._note_lines_not_built()
        return self._closest()

    def propose_batch(self, size: int) -> list[Proposal]:
        """The `size` most promising candidates that can still win, most promising first ([] when none is left):
        the first is what `propose` returns; the rest are what comes after it unless what is told meanwhile closes
        their lines. Builds of the rest may start at once; they are told in this order, as `propose` asks."""
        first = self.propose()
        return [] if first is None else [first, *self.upcoming(size - 1)]

    def upcoming(self, count: int) -> list[Proposal]:
        """The candidates ranked after the one `propose` returns: a guess at what comes next (what is told
        meanwhile may close their lines), for work that can start early, such as exports on other machines."""
        return [] if self.done else self._ranked()[1:1 + count]

    def _ranked(self, measure: bool = True) -> list[Proposal]:
        """Every candidate that can still win, most promising first (closing the lines that cannot). `measure`:
        measure estimates until none not measured could rank first or tie the first; else the frontiers not
        estimated yet are left so (`Proposal.estimated` False), ranked by the most their estimates can be."""
        space = self.space
        self.frontier = {}
        for line in self.lines:
            if line in self.closed or line.recipe in self.rejected:
                continue
            shape = _frontier(space, line, self.budget, self.over)
            if shape is not None:
                self.frontier[line] = shape
        contenders = []
        settled = [(r, s) for r, s, _ in self.anchors]
        for line, shape in self.frontier.items():
            others = settled + [(other.recipe, s) for other, s in self.frontier.items()]
            if self._dominated(line.recipe, shape, settled):
                self.closed[line] = "cannot beat a measured candidate that is less compressed"
            elif not self._dominated(line.recipe, shape, others) and (line.recipe, shape) not in self.built:
                contenders.append((line, shape))
        gain = largest_gain(self.anchors, space.proxy)
        asked: dict[Shape, float] = {}  # measured here: known even to a space that does not list it
        while True:
            ranked = []
            measured = asked | {other: signed(quality) for other, quality in space.measured_estimates().items()}
            for line, shape in contenders:
                if line in self.closed:
                    continue
                loss = quantization_loss(line.recipe, self.anchors, self.order, space.proxy, self.estimated_losses)
                if shape.structure not in measured:  # ranked by the most its estimate can be, not closed
                    ranked.append((loss - ceiling(shape, measured), self.order[line.recipe], shape, line, False))
                    continue
                proxy = space.proxy(shape)
                bound = space.bound(shape)  # = the estimate, except before recovery when fit recovers
                named = "PyTorch estimate" if bound == proxy else "Bound (recovered, less compressed)"
                threshold = _threshold(self.incumbent, shape, space, self.tolerance)
                if threshold is not None and signed(bound) + gain <= threshold:
                    self.closed[line] = f"{named} {bound.value:.4f} cannot beat the best so far"
                elif self.floor is not None and signed(bound) + gain < self.floor:
                    self.closed[line] = f"{named} {bound.value:.4f} is under the quality floor"
                else:  # most promising first: the estimate less what this recipe was seen to lose
                    ranked.append((loss - signed(proxy), self.order[line.recipe], shape, line, True))
            ranked.sort(key=lambda item: item[:3])
            first_estimated = next((item[0] for item in ranked if item[4]), float("inf"))
            # one not estimated yet that could rank first, or tie the first (ties go by recipe and shape): measure it
            unsettled = [item for item in ranked if not item[4] and item[0] <= first_estimated]
            if measure and unsettled:
                structure = unsettled[0][2].structure
                asked[structure] = signed(space.proxy(structure))
                continue
            # the first has a recipe no artifact has measured the loss of: estimate that loss, then rank again
            first_recipe = ranked[0][3].recipe if ranked else None
            if measure and first_recipe is not None and self._loss_unknown(first_recipe):
                self.estimates_asked.add(first_recipe)
                estimate = space.recipe_estimate(RECIPES.get(first_recipe))
                if estimate is not None:
                    self.estimated_losses[first_recipe] = signed(space.proxy(Shape())) - signed(estimate)
                continue
            # then the first may be a recipe's first file, near the size budget: the space may learn its size first
            if measure and ranked and space.calibrate_size(RECIPES.get(ranked[0][3].recipe), ranked[0][2], self.budget):
                return self._ranked(measure)  # the frontiers move with the predictions
            return [Proposal(line.recipe, shape, _threshold(self.incumbent, shape, space, self.tolerance),
                             estimated=estimated) for _, _, shape, line, estimated in ranked]

    def _loss_unknown(self, recipe: str) -> bool:
        """Whether neither an artifact of `recipe` nor its PyTorch estimate has said what it loses."""
        measured = any(name == recipe and artifact.validation_quality is not None for name, _, artifact in self.anchors)
        return not measured and recipe not in self.estimates_asked

    def tell(self, proposal: Proposal, artifact: BuiltArtifact) -> None:
        """What building `proposal` gave (benchmarked or not, checked against the budget)."""
        shape = proposal.shape
        self.built[(proposal.recipe, shape)] = artifact
        self.space.observe(proposal.recipe, shape, artifact)
        if proposal.closest:
            self.trials.append(Trial(proposal.recipe, shape.heads_removed, artifact.predicted_bytes,
                                     artifact.file_bytes, artifact.meets_budget,
                                     note="closest: the most compressed candidate", ffn_fraction=shape.ffn_fraction,
                                     layers_removed=shape.layers_removed, trim_vocabulary=shape.trim_vocabulary))
            return
        over_budget = [c for c in artifact.checks if c.kind != "quality" and not c.passed and c.value is not None]
        self.trials.append(Trial(proposal.recipe, shape.heads_removed, artifact.predicted_bytes, artifact.file_bytes,
                                 not over_budget and artifact.benchmark is not None, artifact.export_seconds,
                                 artifact.cached_export, artifact.note, shape.ffn_fraction, shape.layers_removed,
                                 shape.trim_vocabulary, self.space.proxy(shape).value))
        if over_budget:
            # trimming the vocabulary changes only the size: over on anything else is over with either vocabulary
            size_only = all(c.kind == "size" for c in over_budget)
            self.over.append((proposal.recipe, shape if size_only else dataclasses.replace(shape,
                                                                                         trim_vocabulary=True)))
            failed = ", ".join(f"{c.name} {' > '.join(format_against(c.value, c.limit))} {c.unit}".strip()
                               for c in over_budget)
            self.progress.note(f"  over budget ({failed}): compressing further")
        else:
            self.anchors.append((proposal.recipe, shape, artifact))
            self.incumbent = best_meeting_budget(self.built.values(), self.tolerance)
        _note_best(self.progress, self.incumbent, self.space.started)

    def reject(self, proposal: Proposal, error: VerificationError) -> None:
        """The recipe does not hold on this model (its artifact disagreed with PyTorch): drop it, keep searching."""
        self.progress.warn(f"{proposal.recipe} rejected: {error}")
        for other in self.lines:
            if other.recipe == proposal.recipe:
                self.closed[other] = f"{proposal.recipe} rejected by verification"
        shape = proposal.shape
        self.trials.append(Trial(proposal.recipe, shape.heads_removed,
                                 self.space.predict_bytes(shape, RECIPES.get(proposal.recipe)),
                                 note=f"rejected by verification: {error}", ffn_fraction=shape.ffn_fraction,
                                 layers_removed=shape.layers_removed, trim_vocabulary=shape.trim_vocabulary))
        self.rejected.add(proposal.recipe)

    def stop(self, reason: str) -> bool:
        """End the search before nothing left can win (a time limit): each candidate that could still have won is
        recorded as a trial not built, with its bound, and `stopped_early` says how many were left. False, and
        nothing done, when nothing left could win: the search ends on its own at the next `propose`."""
        if self.done:
            return False
        contenders = self._ranked(measure=False)  # what was never estimated stays so: stopping measures nothing
        if not contenders:
            return False
        self.done = True
        space = self.space
        for proposal in contenders:
            shape = proposal.shape
            could = (f"its bound {space.bound(shape).value:.4f} could still beat the best" if proposal.estimated
                     else "not estimated; the estimates of less compressed structures could still beat the best")
            self.trials.append(Trial(proposal.recipe, shape.heads_removed,
                                     space.predict_bytes(shape, RECIPES.get(proposal.recipe)),
                                     note=f"not built: {reason}; {could}", ffn_fraction=shape.ffn_fraction,
                                     layers_removed=shape.layers_removed, trim_vocabulary=shape.trim_vocabulary,
                                     estimated_quality=space.proxy(shape).value if proposal.estimated else None))
            for line, frontier in self.frontier.items():
                if line.recipe == proposal.recipe and frontier == shape:
                    self.closed[line] = reason
        self._note_lines_not_built(skip={reason})
        left = len(contenders)
        self.stopped_early = (f"{reason}, with {left} candidate{'s' if left != 1 else ''} that could still beat the "
                              "best not built")
        self.progress.note(f"search stopped: {self.stopped_early}")
        return True

    def result(self) -> tuple[list[BuiltArtifact], list[Trial]]:
        """Every candidate built and every trial, the lines never built included."""
        return list(self.built.values()), self.trials

    def _note_lines_not_built(self, skip: set[str] = frozenset()) -> None:
        """A trial for each line that never built a candidate, saying what stopped it (lines closed for a reason
        in `skip` are recorded elsewhere)."""
        for line in self.lines:
            if self.closed.get(line) in skip:
                continue
            reason = self.closed.get(line) or ("a less compressed candidate of an equal or higher-fidelity recipe "
                                               "was preferred" if line in self.frontier else
                                               "the size or latency model predicts every head count over budget")
            if not any(r == line.recipe and _on_line(s, line) for r, s in self.built):
                shape = line.shape(self.space.head_counts(line.layers_removed)[-1])
                self.trials.append(Trial(line.recipe, shape.heads_removed, self.space.predict_bytes(
                    shape, RECIPES.get(line.recipe)), note=f"not built: {reason}", ffn_fraction=line.ffn_fraction,
                    layers_removed=line.layers_removed, trim_vocabulary=line.trim_vocabulary))

    def _closest(self) -> Proposal | None:
        """Nothing meets every budget: the most compressed candidate — of the recipe measured fastest when latency
        binds, else the smallest recipe — to be measured in full, to show how close it gets."""
        if any(a.meets_budget for a in self.built.values()):
            return None
        usable = [line for line in self.lines if line.recipe not in self.rejected]
        if not usable:
            raise VerificationError(f"every recipe tried ({', '.join(self.recipes)}) was rejected by verification "
                                    "on this model; try another --recipe (e.g. int8)")
        benchmarked = [a for a in self.built.values() if a.benchmark is not None]
        recipe = usable[-1].recipe
        if self.budget.max_latency_ms is not None and benchmarked:
            recipe = min(benchmarked, key=lambda a: a.benchmark.p50_ms).recipe.name
        layers = max(self.space.layer_counts)
        shape = Shape(self.space.head_counts(layers)[-1], max(self.space.options.ffn_fractions), layers,
                      usable[-1].trim_vocabulary)
        if (recipe, shape) in self.built:
            return None
        self.progress.note(f"nothing meets every budget; building the most compressed candidate ({recipe}, "
                           f"{shape.describe()}) to show how close it gets")
        return Proposal(recipe, shape, closest=True)


def best_first_search(builder: SearchSpace, budget: Budget, recipes: tuple[str, ...], reference: Quality,
                      progress: Progress, ahead: BuildsAhead | None = None, time_limit_s: float | None = None,
                      clock: Callable[[], float] | None = None) -> SearchOutcome:
    """Build what the searcher proposes until it proposes nothing; every candidate built and every trial.
    With `ahead`, the searcher proposes a batch (the next `ahead.depth` candidates after the one built here) and
    `ahead` builds those elsewhere meanwhile; results are still told one at a time, in the searcher's order, so
    it decides exactly what it decides without them.

    `time_limit_s`: once `clock()` (seconds; default: since this call) reaches it and a candidate meets every
    budget, no further candidate is started and the best so far is kept; the candidate being built finishes. Until
    one meets every budget the search goes on, since stopping then would leave nothing to ship."""
    searcher = BestFirstSearcher(builder, budget, recipes, reference, progress)
    started = time.perf_counter()

    def since_started() -> float:
        return time.perf_counter() - started

    clock = clock or since_started
    waiting_said = False
    while True:
        # checked before the next proposal: ranking may measure an estimate, which a stopped search does not need
        limit_reached = time_limit_s is not None and clock() >= time_limit_s
        limit = f"the time limit ({time_limit_s / 60:g} min) was reached" if limit_reached else ""
        if limit_reached and searcher.incumbent is not None and searcher.stop(limit):
            break
        batch = searcher.propose_batch(1 + (ahead.depth if ahead is not None else 0))
        if not batch:
            break
        proposal = batch[0]
        if limit_reached and not proposal.closest and not waiting_said:
            progress.note(f"{limit}; searching on until a candidate meets every budget")
            waiting_said = True
        if ahead is not None:
            ahead.before_build(proposal, batch[1:])
        try:
            # the closest candidate is measured in full, recovered: no probe stands in for it
            artifact = builder.candidate(RECIPES.get(proposal.recipe), proposal.shape, budget, reference,
                                         proposal.threshold, probe=not proposal.closest)
        except VerificationError as error:
            if proposal.closest:
                raise
            searcher.reject(proposal, error)
            continue
        if proposal.closest:  # measured in full, whatever it can win
            if artifact.validation_quality is None:
                builder.evaluate(artifact)
            if artifact.benchmark is None:
                builder.benchmark(artifact)
            artifact.checks = budget.check(artifact.file_bytes, artifact.benchmark, artifact.validation_quality,
                                           reference)
        searcher.tell(proposal, artifact)
    candidates, trials = searcher.result()
    return SearchOutcome(candidates, trials, searcher.stopped_early)


def _threshold(incumbent: BuiltArtifact | None, shape: Shape, builder: SearchSpace,
               tolerance: float) -> float | None:
    """The signed validation quality a candidate must exceed to replace the incumbent: a tie is enough for a
    less compressed one (the order `incumbent` breaks ties in), a more compressed one must be better by more
    than the tolerance."""
    if incumbent is None:
        return None
    quality = signed(incumbent.validation_quality)
    less_compressed = ((builder.core_parameters(shape), not shape.trim_vocabulary)
                       > (incumbent.core_parameters, incumbent.vocabulary_size is None))
    # exceeding the threshold is what wins: for a less compressed candidate it lies just below the tie
    return math.nextafter(quality - tolerance, -math.inf) if less_compressed else quality + tolerance


def _vocabulary_choices(builder: SearchSpace) -> tuple[bool, ...]:
    if builder.vocabulary is None:
        return (False,)
    choice = builder.options.trim_vocabulary
    return (False, True) if choice is None else (bool(choice),)


def _on_line(shape: Shape, line: Line) -> bool:
    return (shape.ffn_fraction, shape.layers_removed, shape.trim_vocabulary) == (
        line.ffn_fraction, line.layers_removed, line.trim_vocabulary)


def _frontier(builder: SearchSpace, line: Line, budget: Budget, over: list[tuple[str, Shape]]) -> Shape | None:
    """The fewest heads removed on `line` not known to be over budget and predicted to fit (within the models'
    slack: a real file and a real benchmark settle what the models cannot)."""
    recipe = RECIPES.get(line.recipe)
    for count in builder.head_counts(line.layers_removed):
        shape = line.shape(count)
        if any(r == line.recipe and s.at_least_as_compressed_as(shape) for r, s in over):
            continue
        if not budget.size_fits(int(builder.predict_bytes(shape, recipe) / builder.size_slack(recipe, shape))):
            continue
        if budget.max_latency_ms is not None:
            predicted = builder.predict_latency(shape, recipe)
            if predicted is not None and predicted > budget.max_latency_ms * builder.latency_slack(recipe):
                continue
        return shape
    return None


def _note_best(progress: Progress, best: BuiltArtifact | None, started: float) -> None:
    if best is not None:
        quality = best.validation_quality
        progress.note(f"  best so far: {best.recipe.name}, {best.describe()}, {best.file_bytes / 1e6:.2f} MB, "
                      f"validation {quality.metric} {quality.value:.4f} ({elapsed_text(started)})")
    else:
        progress.note(f"  nothing meets every budget yet ({elapsed_text(started)})")


