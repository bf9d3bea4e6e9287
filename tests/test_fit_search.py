"""The fit search against an exhaustive grid over the same space, on a model of the world where size, latency and
quality are known functions of the structure: the search must find the grid's best candidate for every budget
while building far fewer candidates, and never build one the size model already rules out."""

import io
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeprune.bench.benchmark import BenchmarkResult
from edgeprune.errors import VerificationError
from edgeprune.export.verify import Verification
from edgeprune.progress import Progress
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.structure import StructurePlan
from edgeprune.quantize import RECIPES as RECIPE_REGISTRY
from edgeprune.quantize import fidelity_rank, fit_ladder
from edgeprune.search import Budget
from edgeprune.search.choice import choose
from edgeprune.search.options import FitOptions
from edgeprune.search.result import BuiltArtifact
from edgeprune.search.searcher import best_first_search
from edgeprune.search.space import Shape, lines
from edgeprune.tasks import Quality

RECIPES = ("int8", "int8-emb4", "int4")  # highest fidelity first
# two runtimes searched at once: the ladders merged as fit merges them (fit_ladder), LiteRT faster per FLOP
TWO_RUNTIMES = fit_ladder(("executorch", "litert"), ("litert-fp16", "int8", "litert-int8", "int8-emb4", "int4"))
# what quantization takes from the PyTorch quality
LOSS = {"int8": 0.002, "int8-emb4": 0.004, "int4": 0.010, "litert-fp16": 0.0005, "litert-int8": 0.003}
WEIGHT_MB = {"int8": 23.0, "int8-emb4": 17.0, "int4": 12.3, "litert-fp16": 45.0, "litert-int8": 23.4}
EMBEDDING_MB = {"int8": 11.7, "int8-emb4": 5.9, "int4": 5.9, "litert-fp16": 23.4, "litert-int8": 11.7}
REFERENCE = Quality("accuracy", 0.95, True, "validation", 100)


def proxy(shape: Shape) -> float:
    return 0.95 - 0.002 * shape.heads_removed - 0.06 * shape.ffn_fraction - 0.03 * shape.layers_removed


def head_counts(layers_removed: int) -> list[int]:
    return list(range(0, 2 * (6 - layers_removed) + 1, 2))  # 6 layers of 2 heads, every head removable


def kept_head_share(shape: Shape) -> float:
    return 1 - shape.heads_removed / (2 * (6 - shape.layers_removed))


def size_mb(recipe: str, shape: Shape) -> float:
    encoder = WEIGHT_MB[recipe] - EMBEDDING_MB[recipe]
    layers = (6 - shape.layers_removed) / 6 * 0.9 * encoder * (kept_head_share(shape) / 3
                                                                + 2 * (1 - shape.ffn_fraction) / 3)
    embedding = EMBEDDING_MB[recipe] * (0.4 if shape.trim_vocabulary else 1.0)
    return embedding + 0.1 * encoder + layers


def core_parameters(shape: Shape) -> int:
    return int(1e6 * (6 - shape.layers_removed) / 6 * (kept_head_share(shape) / 3 + 2 * (1 - shape.ffn_fraction) / 3))


def latency_ms(recipe: str, shape: Shape) -> float:
    scale = {"int8": 10.0, "int8-emb4": 10.5, "int4": 12.0, "litert-fp16": 9.0, "litert-int8": 5.5}[recipe]
    work = (6 - shape.layers_removed) / 6 * (0.4 * kept_head_share(shape) + 0.6 * (1 - shape.ffn_fraction))
    return scale * work + 1.0


def bench(p50: float) -> BenchmarkResult:
    return BenchmarkResult("host", "executorch", 2, 1, 20, [p50] * 20, p50, p50, p50, p50, 0.0, p50, 1.0, 100.0, 200.0,
                           0)


class WorldBuilder:
    """The builder interface `best_first_search` uses, answering from the functions above; counts what it is asked."""

    def __init__(self, options: FitOptions, trimmable: bool = True, rejected: tuple[str, ...] = (),
                 quality=proxy, losses: dict[str, float] = LOSS) -> None:
        self.options = options
        self.losses = losses  # what each recipe's quantization takes from the PyTorch quality
        self.recipe_estimates: list[str] = []  # recipes whose loss was estimated, in the order asked
        self.quality = quality  # the fp32 model's validation quality at a shape (what artifacts measure, less LOSS)
        self.rejected = rejected  # recipes whose artifacts fail verification on this model
        self.vocabulary = object() if trimmable else None
        self.started = time.perf_counter()
        self.built: list[tuple[str, Shape]] = []
        self.proxies: set[Shape] = set()
        self.measured: set[str] = set()
        self.sized: set[str] = set()  # recipes whose file size was observed
        self.layer_counts = options.layer_removals

    def head_counts(self, layers_removed: int = 0) -> list[int]:
        return head_counts(layers_removed)

    def core_parameters(self, shape: Shape) -> int:
        return core_parameters(shape)

    def predict_bytes(self, shape: Shape, recipe) -> int:
        return int(size_mb(recipe.name, shape) * 1e6)

    def predict_latency(self, shape: Shape, recipe) -> float | None:
        """Exact for a measured recipe; another measured recipe's figure of the same runtime until then (as the
        latency model borrows); nothing known for a runtime not measured yet."""
        same_runtime = sorted(r for r in self.measured if RECIPE_REGISTRY.get(r).runtime == recipe.runtime)
        known = recipe.name if recipe.name in self.measured else next(iter(same_runtime), None)
        return None if known is None else latency_ms(known, shape)

    def size_slack(self, recipe, shape) -> float:  # as CandidateBuilder.size_slack: narrow once a file was measured
        return 1.01 if recipe.name in self.sized else 1.05

    def latency_slack(self, recipe) -> float:  # as ShapeFacts.latency_slack: 3 on a wider recipe's, 1.25 a narrower's
        if recipe.name in self.measured:
            return 1.05
        lender = next(iter(sorted(r for r in self.measured if RECIPE_REGISTRY.get(r).runtime == recipe.runtime)), None)
        ranks = None if lender is None else (fidelity_rank(RECIPE_REGISTRY.get(lender))[0], fidelity_rank(recipe)[0])
        return 3.0 if ranks and ranks[0] < ranks[1] else 1.25 if ranks and ranks[0] > ranks[1] else 1.15

    def proxy(self, shape: Shape) -> Quality:
        self.proxies.add(shape.structure)
        return Quality("accuracy", proxy(shape), True, "validation", 100)

    def bound(self, shape: Shape) -> Quality:
        return self.proxy(shape)

    def calibrate_size(self, recipe, shape, budget) -> bool:  # this world's sizes are known: nothing to learn
        return False

    def recipe_estimate(self, recipe) -> Quality:  # as CandidateBuilder.recipe_estimate: the recipe on the dense model
        self.recipe_estimates.append(recipe.name)
        return Quality("accuracy", self.quality(Shape()) - self.losses[recipe.name], True, "validation", 100)

    def measured_estimates(self) -> dict[Shape, Quality]:  # the unrecovered estimates asked for so far
        return {s: Quality("accuracy", proxy(s), True, "validation", 100) for s in self.proxies}

    def candidate(self, recipe, shape, budget, reference, best=None, probe=True) -> BuiltArtifact:
        # `probe` spares the real builder a recovery (CandidateBuilder.budget_probe); this world has none to spare
        self.built.append((recipe.name, shape))
        if recipe.name in self.rejected:
            raise VerificationError(f"candidate ({recipe.name}) disagrees with its PyTorch source: cosine 0.96 < 0.99")
        artifact = artifact_for(recipe.name, shape, self.quality, self.losses)
        if not budget.size_fits(artifact.file_bytes):
            artifact.validation_quality = None
        elif best is None or artifact.validation_quality.value > best:
            artifact.benchmark = bench(latency_ms(recipe.name, shape))
        artifact.checks = budget.check(artifact.file_bytes, artifact.benchmark, artifact.validation_quality,
                                       reference)
        return artifact

    def observe(self, recipe: str, shape: Shape, artifact: BuiltArtifact) -> None:
        self.sized.add(recipe)
        if artifact.benchmark is not None:  # the latency model has a measurement of this recipe
            self.measured.add(recipe)

    def benchmark(self, artifact: BuiltArtifact) -> None:
        artifact.benchmark = bench(latency_ms(artifact.recipe.name, shape_of(artifact)))

    def evaluate(self, artifact: BuiltArtifact) -> None:
        shape = shape_of(artifact)
        artifact.validation_quality = Quality("accuracy", self.quality(shape) - self.losses[artifact.recipe.name],
                                              True, "validation", 100)


def shape_of(artifact: BuiltArtifact) -> Shape:
    return Shape(artifact.heads_removed, artifact.ffn_fraction, len(artifact.layers_removed),
                 artifact.vocabulary_size is not None)


def artifact_for(recipe: str, shape: Shape, quality=proxy, losses: dict[str, float] = LOSS) -> BuiltArtifact:
    """The artifact of `recipe` at `shape`: its fp32 model measures `quality(shape)`, less what the recipe loses."""
    size = int(size_mb(recipe, shape) * 1e6)
    return BuiltArtifact(
        "candidate", RECIPE_REGISTRY.get(recipe), f"{recipe}-{shape.key}.pte",
        StructurePlan(PruningPlan([shape.heads_removed + 1], [[0]])), 1, size, size,
        Verification(1, 1.0, 0.0, 0.99), vocabulary_size=100 if shape.trim_vocabulary else None,
        ffn_fraction=shape.ffn_fraction, layers_removed=list(range(shape.layers_removed)),
        core_parameters=core_parameters(shape),
        validation_quality=Quality("accuracy", quality(shape) - losses[recipe], True, "validation", 100))


def grid_best(options: FitOptions, budget: Budget, recipes: tuple[str, ...] = RECIPES) -> float | None:
    """The best validation quality over every point of the space that meets the budget."""
    best = None
    for line in lines(recipes, options.ffn_fractions, options.layer_removals, (False, True)):
        for heads in head_counts(line.layers_removed):
            shape = line.shape(heads)
            artifact = artifact_for(line.recipe, shape)
            artifact.benchmark = bench(latency_ms(line.recipe, shape))
            checks = budget.check(artifact.file_bytes, artifact.benchmark, artifact.validation_quality, REFERENCE)
            if all(c.passed for c in checks):
                best = max(best or 0.0, artifact.validation_quality.value)
    return best


def grid_choice(budget: Budget, tolerance: float, recipes: tuple[str, ...] = RECIPES,
                quality=proxy, losses: dict[str, float] = LOSS) -> BuiltArtifact | None:
    """What `fit` would choose with every candidate of the space built and benchmarked."""
    everything = []
    for line in lines(recipes, (0.0, 0.25, 0.5), (0, 1, 2), (False, True)):
        for heads in head_counts(line.layers_removed):
            artifact = artifact_for(line.recipe, line.shape(heads), quality, losses)
            artifact.benchmark = bench(latency_ms(line.recipe, line.shape(heads)))
            artifact.checks = budget.check(artifact.file_bytes, artifact.benchmark, artifact.validation_quality,
                                           REFERENCE)
            everything.append(artifact)
    fitted, binding, _ = choose(everything, budget, REFERENCE, tolerance)
    return None if binding else fitted


def run(budget: Budget, rejected: tuple[str, ...] = (), tolerance: float = 0.0, recipes: tuple[str, ...] = RECIPES,
        world: type[WorldBuilder] | None = None, ahead=None) -> tuple[WorldBuilder, list[BuiltArtifact]]:
    builder = (world or WorldBuilder)(FitOptions(recipes=recipes, quality_tolerance=tolerance), rejected=rejected)
    quiet = Progress(enabled=False, stream=io.StringIO())
    searched = best_first_search(builder, budget, recipes, REFERENCE, quiet, ahead)
    assert searched.stopped_early is None
    builder.trials = searched.trials
    return builder, searched.candidates


def recovered_quality(shape: Shape) -> float:
    """After recovery: distillation wins back most of what pruning took, most where most was removed."""
    return 0.95 - 0.0004 * shape.heads_removed - 0.01 * shape.ffn_fraction - 0.004 * shape.layers_removed


class RecoveringWorld(WorldBuilder):
    """Fit with recovery: a structure's estimate is the unrecovered model's (far lower) until a candidate of that
    structure is built (recovered), then the recovered model's, which bounds its artifacts; before, the bound is
    the worst recovered quality of a less compressed structure (the dense one's at first)."""

    def __init__(self, options: FitOptions, **kwargs) -> None:
        super().__init__(options, quality=recovered_quality, **kwargs)
        self.recovered: set[Shape] = {Shape()}  # the dense structure needs no recovery

    def proxy(self, shape: Shape) -> Quality:
        self.proxies.add(shape.structure)
        value = recovered_quality(shape) if shape.structure in self.recovered else proxy(shape)
        return Quality("accuracy", value, True, "validation", 100)

    def bound(self, shape: Shape) -> Quality:
        value = min(recovered_quality(s) for s in self.recovered if shape.structure.at_least_as_compressed_as(s))
        return Quality("accuracy", value, True, "validation", 100)

    def candidate(self, recipe, shape, budget, reference, best=None, probe=True) -> BuiltArtifact:
        self.recovered.add(shape.structure)
        return super().candidate(recipe, shape, budget, reference, best, probe)


class TrustingWorld(RecoveringWorld):
    """The mistake the bound prevents: unrecovered estimates taken as bounds."""

    def bound(self, shape: Shape) -> Quality:
        return self.proxy(shape)


@settings(max_examples=60, deadline=None)
@given(max_mb=st.floats(6.0, 30.0), latency=st.one_of(st.none(), st.floats(3.0, 12.0)),
       floor=st.sampled_from([None, 0.93, 0.94]), tolerance=st.sampled_from([0.0, 0.005]))
def test_with_recovery_the_search_chooses_what_the_grid_of_recovered_candidates_would(max_mb, latency, floor,
                                                                                       tolerance):
    """Recovery lifts a structure far above its unrecovered estimate; the search must still find the grid's
    choice of the recovered world, so it closes lines only on bounds: recovered qualities."""
    budget = Budget(max_mb=max_mb, max_latency_ms=latency, min_quality=floor)
    builder, candidates = run(budget, tolerance=tolerance, world=RecoveringWorld)
    fitted, binding, _ = choose(candidates, budget, REFERENCE, tolerance)
    best = grid_choice(budget, tolerance, quality=recovered_quality)
    if best is None:
        assert binding
    else:
        assert not binding and (fitted.recipe, shape_of(fitted)) == (best.recipe, shape_of(best))
    assert len(set(builder.built)) == len(builder.built)
    # of 324 (every one built is recovered, none unbuilt): at most 40 over 300 random budgets, 10 on average
    assert len(builder.built) <= 48


def test_unrecovered_estimates_taken_as_bounds_would_miss_the_best_recovered_candidate():
    budget = Budget(max_mb=20.0, max_latency_ms=5.0, min_quality=0.93)
    best = grid_choice(budget, 0.0, quality=recovered_quality)
    assert (best.recipe.name, shape_of(best)) == ("int8", Shape(10, 0.5, 0))
    for world, finds in ((RecoveringWorld, True), (TrustingWorld, False)):
        _, candidates = run(budget, world=world)
        fitted, binding, _ = choose(candidates, budget, REFERENCE)
        assert (not binding and (fitted.recipe.name, shape_of(fitted)) == ("int8", Shape(10, 0.5, 0))) is finds


def test_a_roomy_budget_builds_one_candidate_and_stops():
    builder, candidates = run(Budget(max_mb=30))
    assert builder.built == [("int8", Shape())]
    assert len(builder.proxies) == 1  # every other line is more compressed than the one built


def test_a_tight_size_budget_trims_the_vocabulary_before_pruning_and_matches_the_grid():
    budget = Budget(max_mb=12)
    builder, candidates = run(budget)
    fitted, binding, _ = choose(candidates, budget, REFERENCE)
    assert not binding
    assert fitted.validation_quality.value == pytest.approx(grid_best(FitOptions(recipes=RECIPES), budget))
    assert len(builder.built) <= 4  # of 3 recipes × 3 FFN × 3 layer counts × 2 vocabularies × 5–7 head counts
    for recipe, shape in builder.built:  # the size model rules out what cannot fit, before any export
        assert size_mb(recipe, shape) <= 12 * 1.05


@settings(max_examples=80, deadline=None)
@given(max_mb=st.one_of(st.none(), st.floats(6.0, 30.0)), latency=st.one_of(st.none(), st.floats(3.0, 12.0)),
       tolerance=st.sampled_from([0.0, 0.005, 0.02]))
def test_the_search_chooses_what_the_grid_would_for_any_budget(max_mb, latency, tolerance):
    if max_mb is None and latency is None:
        max_mb = 100.0
    budget = Budget(max_mb=max_mb, max_latency_ms=latency)
    builder, candidates = run(budget, tolerance=tolerance)
    fitted, binding, _ = choose(candidates, budget, REFERENCE, tolerance)
    best = grid_choice(budget, tolerance)
    if best is None:
        assert binding  # nothing meets: the closest is reported with what binds
    else:
        assert not binding and (fitted.recipe, shape_of(fitted)) == (best.recipe, shape_of(best))
    assert len(set(builder.built)) == len(builder.built)  # never built twice
    assert len(builder.built) <= 14  # the grid is 324 candidates


@settings(max_examples=80, deadline=None)
@given(max_mb=st.one_of(st.none(), st.floats(6.0, 50.0)), latency=st.one_of(st.none(), st.floats(2.0, 12.0)),
       tolerance=st.sampled_from([0.0, 0.005, 0.02]))
def test_searching_two_runtimes_chooses_what_the_grid_of_both_would(max_mb, latency, tolerance):
    """The runtime is a dimension of the space: the search over both ladders finds the grid's choice over both,
    whichever runtime it is in, though neither runtime's recipes close the other's lines at equal bit widths."""
    if max_mb is None and latency is None:
        max_mb = 100.0
    budget = Budget(max_mb=max_mb, max_latency_ms=latency)
    builder, candidates = run(budget, tolerance=tolerance, recipes=TWO_RUNTIMES)
    fitted, binding, _ = choose(candidates, budget, REFERENCE, tolerance)
    best = grid_choice(budget, tolerance, TWO_RUNTIMES)
    if best is None:
        assert binding
    else:
        assert not binding and (fitted.recipe, shape_of(fitted)) == (best.recipe, shape_of(best))
    assert len(set(builder.built)) == len(builder.built)
    assert len(builder.built) <= 20  # the grid is 540 candidates


def test_a_latency_budget_only_litert_meets_is_met_by_litert():
    budget = Budget(max_latency_ms=5.0)  # ExecuTorch's fastest candidate here runs 10 × 0.4 × ... + 1 > 5 ms dense
    builder, candidates = run(budget, recipes=TWO_RUNTIMES)
    fitted, binding, _ = choose(candidates, budget, REFERENCE)
    assert not binding and fitted.recipe.runtime == "litert"
    assert fitted.recipe.name == grid_choice(budget, 0.0, TWO_RUNTIMES).recipe.name


def time_limited(budget: Budget, minutes_per_build: float, limit_minutes: float):
    """A search whose every build takes `minutes_per_build` on its clock, stopped at `limit_minutes`."""
    builder = WorldBuilder(FitOptions(recipes=RECIPES, quality_tolerance=0.0))  # as `run`
    progress = Progress(enabled=False, stream=io.StringIO())
    clock = lambda: len(builder.built) * minutes_per_build * 60  # noqa: E731 - the world's own time
    return builder, best_first_search(builder, budget, RECIPES, REFERENCE, progress, time_limit_s=limit_minutes * 60,
                                      clock=clock)


def test_a_time_limit_ships_the_best_so_far_and_lists_what_could_still_have_won():
    budget = Budget(max_mb=12.0, max_latency_ms=7.0)
    unlimited, everything = run(budget)
    assert len(unlimited.built) == 9  # unlimited, the search builds nine candidates, in this order
    first_fit = next(index for index, artifact in enumerate(everything) if artifact.meets_budget) + 1
    assert first_fit >= 3
    # the limit passes during the second build; nothing meets the budget by then, so the search goes on to the first
    # candidate that does, and stops before the next
    builder, searched = time_limited(budget, minutes_per_build=2.0, limit_minutes=3.0)
    assert builder.built == unlimited.built[:first_fit]
    assert searched.stopped_early.startswith("the time limit (3 min) was reached, with ")
    unbuilt = [t for t in searched.trials if t.note.startswith("not built: the time limit (3 min) was reached")]
    assert unbuilt and all(t.file_bytes is None and "could still beat the best" in t.note for t in unbuilt)
    assert str(len(unbuilt)) in searched.stopped_early
    fitted, binding, _ = choose(searched.candidates, budget, REFERENCE)
    assert not binding and fitted is searched.candidates[-1]  # the best so far ships
    # a limit the search never reaches changes nothing
    builder, searched = time_limited(budget, minutes_per_build=2.0, limit_minutes=600)
    assert builder.built == unlimited.built and searched.stopped_early is None


def test_nothing_fits_builds_only_the_smallest_candidate():
    budget = Budget(max_mb=1.0)
    builder, candidates = run(budget)
    assert len(candidates) == 1 and not candidates[0].meets_budget
    assert builder.built == [("int4", Shape(8, 0.5, 2, True))]
    fitted, binding, suggestions = choose(candidates, budget, REFERENCE)
    assert binding == ["size"] and "raise --max-mb" in suggestions[0]


def test_a_quality_floor_stops_the_search_at_the_first_candidate_under_it():
    budget = Budget(max_mb=11.0, min_quality=0.945)
    builder, candidates = run(budget)
    fitted, binding, _ = choose(candidates, budget, REFERENCE)
    assert binding == ["min accuracy (validation)"]
    assert len(builder.built) <= 3


def test_a_recipe_rejected_by_verification_is_dropped_and_the_search_goes_on():
    budget = Budget(max_mb=30)
    builder, candidates = run(budget, rejected=("int8",))
    assert builder.built[0] == ("int8", Shape()) and all(recipe != "int8" for recipe, _ in builder.built[1:])
    fitted, binding, _ = choose(candidates, budget, REFERENCE)
    assert not binding and fitted.recipe.name == "int8-emb4" and fitted.heads_removed == 0
    assert any(t.note.startswith("rejected by verification: candidate (int8)") for t in builder.trials)
    with pytest.raises(VerificationError, match="every recipe tried .* was rejected by verification"):
        run(budget, rejected=RECIPES)


@pytest.mark.parametrize("stop_after", [1, 2, 3])
def test_a_fresh_searcher_over_what_was_built_before_goes_on_as_the_original(stop_after):
    """Resume has one owner, the fit's journal: a resumed fit runs a fresh searcher whose builder hands back the
    candidates built before. Over a world that does so, the fresh searcher proposes them again first, builds none of
    them twice, and ends where an uninterrupted search ends."""
    from edgeprune.search.searcher import BestFirstSearcher

    budget = Budget(max_mb=9.0, max_latency_ms=8.0)
    quiet = Progress(enabled=False, stream=io.StringIO())

    def run(journal: dict, steps: int | None = None) -> tuple[BestFirstSearcher, int]:
        world, search, built = WorldBuilder(FitOptions(recipes=RECIPES)), None, 0
        search = BestFirstSearcher(world, budget, RECIPES, REFERENCE, quiet)
        while steps is None or steps > 0:
            proposal = search.propose()
            if proposal is None:
                break
            key = (proposal.recipe, proposal.shape)
            if key not in journal:
                built += 1
                artifact = world.candidate(RECIPE_REGISTRY.get(proposal.recipe), proposal.shape, budget, REFERENCE,
                                           proposal.threshold)
                if proposal.closest:
                    world.evaluate(artifact)
                    world.benchmark(artifact)
                    artifact.checks = budget.check(artifact.file_bytes, artifact.benchmark,
                                                   artifact.validation_quality, REFERENCE)
                journal[key] = artifact
            search.tell(proposal, journal[key])
            steps = None if steps is None else steps - 1
        return search, built

    uninterrupted, everything = run({})
    journal: dict = {}
    run(journal, stop_after)
    resumed, built_after = run(journal)
    assert built_after == everything - stop_after  # nothing journaled is built again
    key = [(a.recipe, shape_of(a)) for a in uninterrupted.result()[0]]
    assert key == [(a.recipe, shape_of(a)) for a in resumed.result()[0]]
    assert [t.note for t in uninterrupted.result()[1]] == [t.note for t in resumed.result()[1]]


class RecordingAhead:
    """Builds ahead as the search sees them: what it asked to start, batch by batch (nothing is built)."""

    def __init__(self, depth: int) -> None:
        self.depth, self.batches = depth, []

    def before_build(self, proposal, upcoming) -> None:
        self.batches.append(((proposal.recipe, proposal.shape), [(p.recipe, p.shape) for p in upcoming]))


@settings(max_examples=60, deadline=None)
@given(max_mb=st.one_of(st.none(), st.floats(6.0, 30.0)), latency=st.one_of(st.none(), st.floats(3.0, 12.0)),
       depth=st.integers(1, 3), recovering=st.booleans())
def test_a_search_that_asks_for_batches_builds_what_it_builds_one_at_a_time(max_mb, latency, depth, recovering):
    """Builds ahead (on Ray) must change no decision: the candidates built, their order and the trials are the
    same; each batch starts with what is built next and holds at most `depth` others, none built already."""
    if max_mb is None and latency is None:
        max_mb = 100.0
    budget = Budget(max_mb=max_mb, max_latency_ms=latency)
    world = RecoveringWorld if recovering else WorldBuilder
    alone, _ = run(budget, world=world)
    ahead = RecordingAhead(depth)
    batched, _ = run(budget, world=world, ahead=ahead)
    assert batched.built == alone.built
    assert [t.note for t in batched.trials] == [t.note for t in alone.trials]
    assert [first for first, _ in ahead.batches] == batched.built
    for index, (first, rest) in enumerate(ahead.batches):
        assert len(rest) <= depth and first not in rest and len(set(rest)) == len(rest)
        assert not set(rest) & set(batched.built[:index + 1])
