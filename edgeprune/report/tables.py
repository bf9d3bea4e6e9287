"""The tables of report.html as rows of cells; the template renders them, escaping every value.

A cell is a plain value (a number is right-aligned) or a Span: a badge, a verdict or a warning.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeprune.report.artifacts import candidates, display_name, heads_removed, on_front
from edgeprune.report.facts import (
    ESTIMATED,
    MEASURED,
    NOT_MEASURED,
    benchmark_source,
    budget_rows,
    energy_source,
    format_mb,
    format_quality,
    latency_at,
    metric_name,
    search_quality,
    teacher_quality,
    test_quality,
    verdict,
)
from edgeprune.search.result import BuiltArtifact, FitResult
from edgeprune.search.scoring import scoring_decision

HIDDEN_PROFILE_KEYS = ("name", "source", "endpoint", "python")  # how to reach the device is not a fact about it


@dataclass(frozen=True)
class Span:
    """Text in a styled span, then plain text after it."""

    text: str
    css_class: str
    after: str = ""


@dataclass(frozen=True)
class Table:
    element_id: str
    headers: list[str]
    rows: list[list[object]]


def badge(source: str) -> Span:
    """Where a figure came from: blue when measured, orange when estimated, grey when missing."""
    kind = "measured" if source.startswith(MEASURED) else "estimated" if source.startswith(ESTIMATED) else "missing"
    return Span(source, f"badge {kind}")


def or_missing(value: float | None, fmt: str) -> str:
    return NOT_MEASURED if value is None else fmt.format(value)


def summary_table(result: FitResult) -> Table:
    dense, fitted = result.dense, result.fitted
    percentile = result.budget.latency_percentile

    def bench(artifact: BuiltArtifact, field: str, fmt: str) -> str:
        return or_missing(None if artifact.benchmark is None else getattr(artifact.benchmark, field), fmt)

    def latency(artifact: BuiltArtifact) -> str:
        return or_missing(None if artifact.benchmark is None else latency_at(artifact.benchmark, percentile),
                          "{:.2f} ms")

    bench_source = badge(benchmark_source(fitted.benchmark))
    test = test_quality(fitted) or test_quality(dense)
    # a generator's dense baseline takes the teacher's quality in PyTorch (its fp32 program verified the same)
    dense_source = f"; the dense baseline's in {dense.quality_source}" if dense.quality_source else ""
    metric = metric_name(result)
    rows: list[list[object]] = [
        ["recipe", dense.recipe.name, fitted.recipe.name, ""],
        ["heads removed", heads_removed(dense), heads_removed(fitted), ""],
        ["parameters", f"{dense.parameters:,}", f"{fitted.parameters:,}", ""],
        ["file size", format_mb(dense.file_bytes), format_mb(fitted.file_bytes), badge(f"{MEASURED} (the file)")],
        ["file size (size model)", format_mb(dense.predicted_bytes), format_mb(fitted.predicted_bytes),
         badge(f"{ESTIMATED} (size model)")],
        [f"latency p{percentile}", latency(dense), latency(fitted), bench_source],
        ["load time", bench(dense, "load_ms", "{:.1f} ms"), bench(fitted, "load_ms", "{:.1f} ms"), bench_source],
        ["peak RSS of the benchmark process", bench(dense, "peak_rss_mb", "{:.0f} MB"),
         bench(fitted, "peak_rss_mb", "{:.0f} MB"), bench_source],
        ["energy per inference", bench(dense, "energy_mj_per_inference", "{:.2f} mJ"),
         bench(fitted, "energy_mj_per_inference", "{:.2f} mJ"), badge(energy_source(fitted.benchmark))],
        [f"{metric} (validation)", format_quality(search_quality(dense)), format_quality(search_quality(fitted)),
         badge(f"{MEASURED} through the runtime{dense_source}")],
        [f"{metric} (test)", format_quality(test_quality(dense)), format_quality(test_quality(fitted)),
         badge(f"{MEASURED} through the runtime" + (f" on {test.examples} examples" if test else "") + dense_source)
         if test else badge(NOT_MEASURED)],
        ["worst cosine to the PyTorch source", f"{dense.verification.min_cosine:.6f}",
         f"{fitted.verification.min_cosine:.6f}", badge(f"{MEASURED} on {fitted.verification.num_inputs} inputs")],
    ]
    return Table("summary-table", ["", f"dense baseline ({dense.recipe.name})",
                                   f"{fitted.label} ({fitted.recipe.name})", "source"], rows)


def regressions_table(result: FitResult) -> Table | None:
    """Classes whose test recall dropped against the dense baseline; None when none did."""
    if not result.per_class_regressions:
        return None
    return Table("regressions-table", ["class", "dense recall", "fitted recall", "drop", "extra errors"],
                 [[r.get("label"), f"{r.get('reference_recall', 0):.3f}", f"{r.get('recall', 0):.3f}",
                   f"{r.get('drop', 0):.3f}", r.get("extra_errors", "")] for r in result.per_class_regressions])


def device_table(result: FitResult) -> Table:
    rows: list[list[object]] = [["device", result.device]]
    rows += _profile_rows(result.device_profile or {})
    rows.append(["runtime", result.reproduce.get("runtime", "unknown")])
    bench = result.fitted.benchmark or result.dense.benchmark
    if bench is None:
        rows.append(["benchmark", "none: no latency, memory or energy figure on this page was measured"])
    else:
        rows += [["benchmarked on", bench.device], ["runtime (benchmark)", f"{bench.runtime} via {bench.runner}"],
                 ["threads", bench.threads], ["warm-up runs", bench.warmup_runs], ["timed runs", bench.timed_runs]]
        for when, temperatures in (("before", bench.thermal_before_c), ("after", bench.thermal_after_c)):
            if temperatures:
                rows.append([f"temperature {when} the timed runs",
                             ", ".join(f"{zone} {celsius:.1f} °C" for zone, celsius in temperatures.items())])
        rows.append(["throttled during the run",
                     Span("yes: latency and energy may be pessimistic", "warning",
                          " " + "; ".join(bench.throttle_reasons)) if bench.throttled else "no"])
        rows.append(["energy", energy_source(bench) + (f": {bench.energy_detail}" if bench.energy_detail else "")])
        if bench.idle_power_w is not None or bench.active_power_w is not None:
            rows.append(["power idle / active", f"{or_missing(bench.idle_power_w, '{:.2f} W')} / "
                                                f"{or_missing(bench.active_power_w, '{:.2f} W')}"])
        rows += [["note", note] for note in bench.notes]
    rows += [[f"{package} version", version] for package, version in (result.reproduce.get("versions") or {}).items()]
    task = result.task
    rows += [["task", f"{task.get('name', 'unknown')} ({task.get('kind', 'unknown kind')})"],
             ["model", task.get("model_path", "unknown")]]
    if task.get("split_sizes"):
        rows.append(["split sizes", ", ".join(f"{k} {v}" for k, v in task["split_sizes"].items())])
    return Table("device-table", ["fact", "value"], rows)


def _profile_rows(profile: dict[str, Any]) -> list[list[object]]:
    """The device profile as recorded in the result (its JSON form), one fact a row."""
    rows: list[list[object]] = []
    for key, value in profile.items():
        if key in HIDDEN_PROFILE_KEYS or value is None:
            continue
        if isinstance(value, dict):
            rows += [[f"{key} {inner}".replace("_", " "), v] for inner, v in value.items() if v is not None]
        elif isinstance(value, list):
            rows.append([key.replace("_", " "), ", ".join(str(v.get("name", v)) if isinstance(v, dict) else str(v)
                                                         for v in value)])
        else:
            rows.append([("profile default " if key.startswith("max_") else "") + key.replace("_", " "), value])
    return rows


def budget_table(result: FitResult) -> Table | None:
    """Every budget that is set against the fitted artifact; None when no budget was set."""
    rows = budget_rows(result)
    if not rows:
        return None
    cells: list[list[object]] = [[f"{r.name} ({r.flag})", r.limit, r.value, badge(r.source),
                                  Span(verdict(r), verdict(r))] for r in rows]
    return Table("budget-table", ["budget", "limit", f"{result.fitted.label} ({result.fitted.recipe.name})", "source",
                                  "verdict"], cells)


def candidates_table(result: FitResult) -> Table:
    percentile = result.budget.latency_percentile
    rows: list[list[object]] = []
    for artifact in candidates(result):
        bench = artifact.benchmark
        failed = [c.name for c in artifact.checks if not c.passed]
        rows.append([
            display_name(artifact, result), format_mb(artifact.file_bytes), format_mb(artifact.predicted_bytes),
            or_missing(None if bench is None else latency_at(bench, percentile), "{:.2f} ms"),
            or_missing(None if bench is None else bench.peak_rss_mb, "{:.0f} MB"),
            badge(benchmark_source(bench)), format_quality(search_quality(artifact)),
            "—" if not artifact.checks else "all met" if not failed else "fails " + ", ".join(failed),
            "yes" if on_front(artifact, result) else "no",
        ])
    return Table("candidates-table", ["candidate", "file size", "size model", f"latency p{percentile}", "peak RSS",
                                      "benchmark", f"{metric_name(result)} (validation)", "budgets", "Pareto front"],
                 rows)


def trials_table(result: FitResult) -> Table | None:
    """Every trial of the search; None when none was recorded."""
    if not result.trials:
        return None
    rows: list[list[object]] = [
        [t.recipe, t.describe(), "—" if t.estimated_quality is None else f"{t.estimated_quality:.4f}",
         format_mb(t.predicted_bytes), "not exported" if t.file_bytes is None else format_mb(t.file_bytes),
         {True: "yes", False: "no", None: "—"}[t.fits], t.note] for t in result.trials]
    return Table("trials-table", ["recipe", "structure", "PyTorch estimate (validation)", "size model", "file size",
                                  "meets the resource budgets", "note"], rows)


def provenance_table(result: FitResult) -> Table:
    fitted, metric = result.fitted, metric_name(result)
    scores = result.head_scores
    test = test_quality(fitted)
    rows: list[list[object]] = [
        ["file sizes", "bytes of the exported files", badge(MEASURED)],
        ["size-model sizes", "predicted from parameters and dtypes before export", badge(ESTIMATED)],
        ["latency, load time, peak RSS", "timed runs of each artifact in its own process",
         badge(benchmark_source(fitted.benchmark))],
        ["energy per inference", (fitted.benchmark.energy_detail if fitted.benchmark else "") or
         "a power sensor where the device has one, else the profile's power model",
         badge(energy_source(fitted.benchmark))],
        [f"{metric} (validation)", "each candidate through its runtime; the search decides on it",
         badge(MEASURED if search_quality(fitted) else NOT_MEASURED)],
        [f"{metric} (test)", ("the chosen artifact through the runtime, the dense baseline in "
                              f"{result.dense.quality_source}" if result.dense.quality_source else
                              "the dense baseline and the chosen artifact through the runtime")
         + (f", {test.examples} examples" if test else ""), badge(MEASURED if test else NOT_MEASURED)],
        [f"dense teacher {metric}", "PyTorch on the test split",
         badge(MEASURED if teacher_quality(result) else NOT_MEASURED)],
        ["head importance", f"{scores.criterion} on {scores.num_examples} calibration examples"
         + (f"; {decision.describe()}" if (decision := scoring_decision(scores)) else ""),
         badge(MEASURED if scores.scores.size and not np.isnan(scores.scores).all() else NOT_MEASURED)],
        ["agreement with PyTorch", f"worst cosine over {fitted.verification.num_inputs} validation inputs",
         badge(MEASURED)],
    ]
    unmeasured = [display_name(c, result) for c in candidates(result) if c.benchmark is None]
    if unmeasured:
        rows.append(["latency of " + "; ".join(unmeasured), "these candidates were not benchmarked",
                     badge(NOT_MEASURED)])
    return Table("provenance-table", ["figure", "how it was obtained", "source"], rows)
