"""Budgets: validation of every limit, defaults from the device profile, and the check of one candidate."""

import pytest

from edgeprune.bench.benchmark import BenchmarkResult
from edgeprune.devices import load_profile
from edgeprune.errors import UserInputError
from edgeprune.search.budget import Budget
from edgeprune.tasks.base import Quality


def bench(p50=10.0, p90=12.0, p99=15.0, peak=300.0, **extra):
    result = BenchmarkResult(device="host", runtime="executorch", threads=2, warmup_runs=1, timed_runs=3,
                             latency_ms=[p50, p90, p99], p50_ms=p50, p90_ms=p90, p99_ms=p99, mean_ms=p50, cv=0.1,
                             first_run_ms=p99, load_ms=5.0, rss_before_load_mb=100.0, peak_rss_mb=peak,
                             file_bytes=1000)
    for key, value in extra.items():
        setattr(result, key, value)
    return result


@pytest.mark.parametrize("field,value", [("max_mb", 0), ("max_memory_mb", -1), ("max_latency_ms", float("nan")),
                                         ("max_energy_mj", "a lot"), ("max_mb", True)])
def test_limits_must_be_positive_numbers(field, value):
    with pytest.raises(UserInputError, match=field):
        Budget(**{field: value})


@pytest.mark.parametrize("value", ["1%", "-x%", "minus one", [0.9]])
def test_min_quality_is_a_number_or_a_relative_drop(value):
    with pytest.raises(UserInputError, match="min quality"):
        Budget(min_quality=value)


def test_latency_percentile_is_50_90_or_99():
    with pytest.raises(UserInputError, match="percentile"):
        Budget(latency_percentile=95)


def test_profile_defaults_with_flags_overriding():
    pi5 = load_profile("pi5")
    budget = Budget.for_device(pi5, max_mb=25.0, max_latency_ms=None)
    assert budget.max_mb == 25.0 and budget.max_latency_ms == pi5.max_latency_ms == 100.0
    assert budget.max_memory_mb == pi5.max_memory_mb and budget.max_energy_mj == pi5.max_energy_mj
    assert budget.set_limits() == ["max_mb", "max_memory_mb", "max_latency_ms", "max_energy_mj"]


def test_relative_quality_floor_follows_the_metric_direction():
    assert Budget(min_quality="-1%").quality_floor(Quality("accuracy", 0.9)) == pytest.approx(0.891)
    ceiling = Budget(min_quality="-10%").quality_floor(Quality("perplexity", 20.0, higher_is_better=False))
    assert ceiling == pytest.approx(22.0)
    assert Budget(min_quality=0.8).quality_floor(Quality("accuracy", 0.9)) == 0.8


def test_check_reports_every_set_budget_with_its_value_and_source():
    budget = Budget(max_mb=10, max_latency_ms=11, latency_percentile=90, max_memory_mb=400, max_energy_mj=5,
                    min_quality="-1%")
    checks = budget.check(9_000_000, bench(energy_mj_per_inference=6.0, energy_source="estimated:power-model"),
                          Quality("accuracy", 0.95), Quality("accuracy", 0.96))
    by_name = {c.name: c for c in checks}
    assert by_name["size"].passed and by_name["size"].value == 9.0
    assert not by_name["latency p90"].passed and by_name["latency p90"].value == 12.0
    assert by_name["memory the artifact adds"].passed and by_name["memory the artifact adds"].source == "measured"
    assert not by_name["energy per inference"].passed
    assert by_name["energy per inference"].source == "estimated:power-model"
    floor = by_name["min accuracy (validation)"]
    assert floor.limit == pytest.approx(0.9504) and not floor.passed  # 1 % below 0.96 is 0.9504 > 0.95
    better = budget.check(9_000_000, None, Quality("accuracy", 0.951), Quality("accuracy", 0.96))[-1]
    assert better.passed


def test_memory_is_what_the_artifact_adds_unless_the_process_is_asked_for():
    python_runner = bench(peak=420.0, rss_before_load_mb=357.0)  # the interpreter and torch before the program
    artifact, process = Budget(max_memory_mb=100), Budget(max_memory_mb=100, memory_measure="process")
    assert artifact.memory(python_runner) == pytest.approx(63.0) and process.memory(python_runner) == 420.0
    [added], [peak] = artifact.check(1, python_runner, None, None), process.check(1, python_runner, None, None)
    assert (added.name, added.value, added.passed, added.flag) == ("memory the artifact adds", 63.0, True,
                                                                   "--max-memory-mb")
    assert (peak.name, peak.value, peak.passed) == ("peak memory of the process", 420.0, False)
    native_tool = bench(peak=80.0, rss_before_load_mb=None)  # benchmark_model: no interpreter to leave out
    assert artifact.memory(native_tool) == process.memory(native_tool) == 80.0
    assert artifact.describe() == "artifact memory under 100 MB"
    with pytest.raises(UserInputError, match="memory measure must be one of artifact, process"):
        Budget(memory_measure="rss")


def test_unknown_values_never_pass():
    checks = Budget(max_latency_ms=100, max_energy_mj=1).check(1, None, None, None)
    assert [c.passed for c in checks] == [False, False] and all(c.source == "unknown" for c in checks)


@pytest.mark.parametrize("floor", [float("nan"), float("inf"), float("-inf")])
def test_a_quality_floor_from_the_api_is_finite(floor):
    with pytest.raises(UserInputError, match="finite"):
        Budget(min_quality=floor)
