"""How fit chooses among the candidates it built: best validation quality within every budget, the Pareto
front, and what it says when nothing fits."""

import pytest

from edgeprune.export.verify import Verification
from edgeprune.pruning.plan import PruningPlan
from edgeprune.pruning.structure import StructurePlan
from edgeprune.quantize import RECIPES
from edgeprune.search.budget import Budget
from edgeprune.search.choice import choose, format_against, pareto_front
from edgeprune.search.result import BuiltArtifact
from edgeprune.tasks.base import Quality
from tests.test_budget import bench

REFERENCE = Quality("accuracy", 0.96, split="validation")


def candidate(path, mb, p50, accuracy, heads_removed=0, recipe="int8"):
    artifact = BuiltArtifact(label="candidate", recipe=RECIPES.get(recipe), path=path,
                             plan=StructurePlan(PruningPlan([heads_removed + 1], [[0]])), parameters=1,
                             file_bytes=int(mb * 1e6), predicted_bytes=int(mb * 1e6),
                             verification=Verification(1, 1.0, 0.0, 0.99), benchmark=bench(p50=p50, p90=p50, p99=p50),
                             validation_quality=Quality("accuracy", accuracy, split="validation"))
    return artifact


def checked(budget, *candidates):
    for c in candidates:
        c.checks = budget.check(c.file_bytes, c.benchmark, c.validation_quality, REFERENCE)
    return list(candidates)


def test_the_best_quality_within_every_budget_wins_not_the_smallest():
    budget = Budget(max_mb=20, max_latency_ms=10)
    big_slow = candidate("a", 25, 12, 0.97)
    good = candidate("b", 19, 9, 0.95, heads_removed=4)
    small = candidate("c", 12, 6, 0.90, heads_removed=12, recipe="int4")
    fitted, binding, suggestions = choose(checked(budget, big_slow, good, small), budget, REFERENCE)
    assert fitted is good and fitted.label == "fitted" and binding == [] and suggestions == []


def test_a_quality_floor_rules_out_candidates_that_meet_the_resources():
    budget = Budget(max_mb=20, min_quality="-2%")
    fitted, binding, _ = choose(checked(budget, candidate("a", 19, 9, 0.90), candidate("b", 15, 8, 0.80)),
                                 budget, REFERENCE)
    assert binding == ["min accuracy (validation)"] and fitted.label == "closest"


def test_nothing_fits_names_the_binding_budget_and_what_would_fit():
    budget = Budget(max_mb=10, max_latency_ms=5)
    fitted, binding, suggestions = choose(checked(budget, candidate("a", 12, 8, 0.9), candidate("b", 11, 7, 0.8)),
                                           budget, REFERENCE)
    assert fitted.path == "b" and fitted.label == "closest"  # same number of failed budgets: the smaller file
    assert binding == ["latency p50", "size"]
    assert suggestions == ["raise --max-latency-ms to 7.0 (the fastest candidate measured)",
                           "needs a smaller recipe (e.g. 4-bit weights: --recipe int4) or raise --max-mb to 11.0"]


def test_the_smaller_recipe_suggested_is_one_of_the_runtime_the_fit_built_for():
    budget = Budget(max_mb=10)
    litert = [candidate("a", 12, 8, 0.9, recipe="litert-int8"), candidate("b", 24, 7, 0.9, recipe="litert-fp16")]
    _, _, suggestions = choose(checked(budget, *litert), budget, REFERENCE)
    assert suggestions == ["needs a smaller recipe (e.g. 4-bit weights: --recipe litert-int4) or raise --max-mb to "
                           "12.0"]
    tried = [*litert, candidate("c", 11, 9, 0.7, recipe="litert-int4")]
    _, _, suggestions = choose(checked(budget, *tried), budget, REFERENCE)
    assert suggestions == ["raise --max-mb to 11.0"]


def test_pareto_front_keeps_only_candidates_nothing_beats_on_every_axis():
    budget = Budget()
    best_quality = candidate("q", 20, 10, 0.97)
    smallest = candidate("s", 5, 9, 0.80)
    fastest = candidate("f", 15, 3, 0.85)
    dominated = candidate("d", 21, 11, 0.96)  # worse than "q" on all three
    assert pareto_front([best_quality, smallest, fastest, dominated], budget) == ["q", "s", "f"]
    unmeasured = candidate("u", 1, 1, 0.99)
    unmeasured.benchmark = None
    assert "u" not in pareto_front([best_quality, unmeasured], budget)


def test_qualities_within_the_tolerance_tie_and_the_least_compressed_wins():
    from edgeprune.search.choice import quality_tolerance
    from edgeprune.search.options import FitOptions

    budget = Budget(max_mb=20)
    pruned = candidate("pruned", 15, 8, 0.973, heads_removed=8)
    pruned.core_parameters = 8_000_000
    whole = candidate("whole", 18, 9, 0.970)
    whole.core_parameters = 10_000_000
    assert choose(checked(budget, pruned, whole), budget, REFERENCE)[0] is pruned  # no tolerance: the best value
    assert choose(checked(budget, pruned, whole), budget, REFERENCE, 0.005)[0] is whole
    assert choose(checked(budget, pruned, whole), budget, REFERENCE, 0.002)[0] is pruned  # 0.003 apart: no tie
    # the default: one standard error of the teacher's validation accuracy; none for other metrics
    reference = Quality("accuracy", 0.97, split="validation", examples=335)
    assert quality_tolerance(FitOptions(), reference) == pytest.approx((0.97 * 0.03 / 335) ** 0.5)
    assert quality_tolerance(FitOptions(quality_tolerance=0.0), reference) == 0.0
    assert quality_tolerance(FitOptions(), Quality("cosine", 0.97, split="validation", examples=335)) == 0.0


def test_suggestions_followed_literally_fit_and_never_offer_a_recipe_already_tried():
    budget = Budget(max_mb=1, max_latency_ms=0.8)
    closest = candidate("a", 4.0801, 0.8049, 0.9, recipe="int4")
    fitted, binding, suggestions = choose(checked(budget, closest), budget, REFERENCE)
    assert suggestions == ["raise --max-latency-ms to 0.81 (the fastest candidate measured)", "raise --max-mb to 4.09"]
    relaxed = Budget(max_mb=4.09, max_latency_ms=0.81)  # what the suggestions say
    assert all(check.passed for check in relaxed.check(closest.file_bytes, closest.benchmark, None, None))


def test_budget_checks_carry_their_kind_and_flag_and_old_results_infer_them():
    from edgeprune.search.budget import BudgetCheck

    budget = Budget(max_mb=5, max_memory_mb=100, max_latency_ms=3, latency_percentile=90, max_energy_mj=9,
                    min_quality=0.9)
    checks = budget.check(1_000_000, bench(p50=1, p90=2, p99=3), REFERENCE, REFERENCE)
    assert [(c.kind, c.flag) for c in checks] == [
        ("size", "--max-mb"), ("latency", "--max-latency-ms"), ("memory", "--max-memory-mb"),
        ("energy", "--max-energy-mj"), ("quality", "--min-quality")]
    for check in checks:  # a result.json written before checks had kinds
        old = BudgetCheck(check.name, check.limit, check.value, check.unit, check.passed, check.source)
        assert old.kind == check.kind
    with pytest.raises(ValueError, match="kind must be one of"):
        BudgetCheck("size", 1, 1, "MB", True, "measured", kind="weight")


@pytest.mark.parametrize(("value", "limit", "shown"), [
    (5.00354, 5.0, ("5.004", "5.000")),  # a file 3.5 kB over a 5 MB budget: never "5.00 > 5.00"
    (5.15, 5.0, ("5.15", "5.00")),
    (0.8104, 0.8, ("0.81", "0.80")),
    (5.0, 5.0, ("5.00", "5.00")),
    (None, 5.0, ("unknown", "5.00")),
])
def test_a_value_and_its_limit_print_differently_when_they_differ(value, limit, shown):
    assert format_against(value, limit) == shown
