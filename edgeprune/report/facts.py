"""The figures both reports show, each with where it came from: budgets against measured values, quality, latency.

report.md and report.html format these the same way, so the two never disagree.
"""

import math
from dataclasses import dataclass

from edgeprune.bench.benchmark import BenchmarkResult
from edgeprune.search.budget import Budget, BudgetCheck
from edgeprune.search.result import BuiltArtifact, FitResult
from edgeprune.tasks.base import Quality

MEASURED = "measured"
ESTIMATED = "estimated"
NOT_MEASURED = "not measured"
PERCENT_METRICS = ("accuracy", "top1")


def search_quality(artifact: BuiltArtifact) -> Quality | None:
    """The quality the search decides on and the Pareto front is drawn over (validation split, through the runtime;
    a generator's dense baseline: the teacher's in PyTorch, `BuiltArtifact.quality_source`)."""
    return artifact.validation_quality


def test_quality(artifact: BuiltArtifact) -> Quality | None:
    """Quality on the held-out test split, through the runtime (measured for the dense baseline and the winner; a
    generator's dense baseline: the teacher's in PyTorch, `BuiltArtifact.quality_source`)."""
    return artifact.quality


def teacher_quality(result: FitResult) -> Quality | None:
    """The dense teacher's test quality in PyTorch."""
    return result.teacher_quality


def metric_name(result: FitResult) -> str:
    """The task's quality metric, e.g. "accuracy" or "perplexity"."""
    measured = [q for q in (test_quality(result.fitted), teacher_quality(result), search_quality(result.fitted))
                if q is not None]
    return measured[0].metric if measured else str(result.task.get("metric", "quality"))


def format_metric(value: float | None, metric: str) -> str:
    if value is None:
        return NOT_MEASURED
    return f"{100 * value:.2f} %" if metric in PERCENT_METRICS else f"{value:.4g}"


def format_quality(quality: Quality | None) -> str:
    return NOT_MEASURED if quality is None else format_metric(quality.value, quality.metric)


def format_mb(byte_count: int) -> str:
    return f"{byte_count / 1e6:.2f} MB"


def quantile(samples: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on a sorted copy."""
    ordered = sorted(samples)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_at(benchmark: BenchmarkResult, percentile: int) -> float | None:
    """The percentile the benchmark reported, else computed from its samples; None when it has neither."""
    reported = getattr(benchmark, f"p{percentile}_ms", None)
    if reported is not None:
        return reported
    return quantile(benchmark.latency_ms, percentile / 100) if benchmark.latency_ms else None


def benchmark_source(benchmark: BenchmarkResult | None) -> str:
    if benchmark is None:
        return NOT_MEASURED
    if benchmark.measured and benchmark.emulated:
        return f"{MEASURED} on {benchmark.device}, {benchmark.emulated}"
    return f"{MEASURED} on {benchmark.device}" if benchmark.measured else ESTIMATED


def emulation_note(result: FitResult) -> str | None:
    """The reports' banner when any figure was measured on an emulated board, else None."""
    labels = sorted({b.emulated for b in (a.benchmark for a in (result.dense, result.fitted, *result.candidates))
                     if b is not None and b.emulated})
    if not labels:
        return None
    return (f"the timings were measured on {result.device}, {' and '.join(labels)}. Timings under emulation are "
            "the emulator's translation of arm64 code and say nothing about a real Pi or any real board; they are "
            "not compared with, or scaled into, real-board figures.")


def energy_source(benchmark: BenchmarkResult | None) -> str:
    """"measured on pi5 (vcgencmd)", "estimated (power-model)" or "not measured"."""
    if benchmark is None or benchmark.energy_mj_per_inference is None:
        return NOT_MEASURED
    kind, _, how = benchmark.energy_source.partition(":")
    if kind == "measured" and benchmark.measured:
        return f"{MEASURED} on {benchmark.device} ({how})" if how else f"{MEASURED} on {benchmark.device}"
    return f"{ESTIMATED} ({how})" if how else ESTIMATED


@dataclass(frozen=True)
class BudgetRow:
    """One budget of the fit against one artifact, formatted for a report."""

    name: str
    flag: str
    limit: str
    value: str
    source: str  # measured (on which device), estimated, or not measured
    passed: bool  # a value that was not measured fails: nothing passes unmeasured


def budget_rows(result: FitResult, artifact: BuiltArtifact | None = None) -> list[BudgetRow]:
    """Every budget that is set, checked against `artifact` (the fitted one by default) as the search checked it."""
    artifact = artifact or result.fitted
    checks = artifact.checks or result.budget.check(artifact.file_bytes, artifact.benchmark,
                                                    search_quality(artifact), None)
    metric = metric_name(result)
    return [_row(check, result.budget, artifact, metric) for check in checks]


def quality_budget(result: FitResult) -> float | None:
    """The quality the fitted artifact had to reach (a ceiling when lower is better), in the task's metric."""
    check = next((c for c in result.fitted.checks if c.kind == "quality"), None)
    return None if check is None else check.limit


def _row(check: BudgetCheck, budget: Budget, artifact: BuiltArtifact, metric: str) -> BudgetRow:
    bench = artifact.benchmark
    if check.kind == "quality":  # the quality budget, in the task's metric
        limit = format_metric(check.limit, metric)
        if isinstance(budget.min_quality, str):
            limit = f"{budget.min_quality} of the dense teacher: {limit}"
        source = f"{MEASURED} through the runtime on the validation split" if check.value is not None else NOT_MEASURED
        return BudgetRow(check.name, check.flag, limit, format_metric(check.value, metric), source, check.passed)
    if check.kind == "size":
        source = f"{MEASURED} (the exported file)"
    elif check.kind == "energy":
        source = energy_source(bench)
    else:
        source = benchmark_source(bench) if check.value is not None else NOT_MEASURED
    decimals = 2 if check.unit in ("MB", "ms", "mJ") else 4
    value = NOT_MEASURED if check.value is None else f"{check.value:.{decimals}f} {check.unit}".strip()
    return BudgetRow(check.name, check.flag, f"{check.limit:g} {check.unit}".strip(), value, source, check.passed)


def verdict(row: BudgetRow) -> str:
    return "pass" if row.passed else "fail"


def runtime_summary(result: FitResult) -> str | None:
    """Which runtime won and by how much, from the benchmarks of this fit (one run, same threads); None when the
    fit searched one runtime."""
    bests = result.runtime_comparison()
    if not bests:
        return None
    winner, others = bests[0], bests[1:]
    source = MEASURED if winner.benchmark.measured else ESTIMATED

    def describe(artifact: BuiltArtifact) -> str:
        quality = artifact.validation_quality
        return (f"{artifact.recipe.runtime} ({artifact.recipe.name}, {artifact.describe()}: p50 "
                f"{artifact.benchmark.p50_ms:.2f} ms, {format_mb(artifact.file_bytes)}, validation {quality.metric} "
                f"{quality.value:.4f}{'' if artifact.meets_budget else ', over budget'})")

    versus = "; ".join(f"best of {describe(other)}, p50 {other.benchmark.p50_ms / winner.benchmark.p50_ms:.2f}× "
                       "the winner's" for other in others)
    won = "won" if winner is result.fitted else "had the best candidate"
    return f"Runtimes searched ({source}): {describe(winner)} {won}; {versus}."
