"""Which candidate a fit chooses, what stands in the way when none fits, and the quality/size/latency front."""

import math
from typing import Any

from edgeprune.search.budget import Budget
from edgeprune.search.builder import signed
from edgeprune.search.options import FitOptions
from edgeprune.search.result import BuiltArtifact
from edgeprune.tasks.base import Quality

ACCURACY_METRICS = ("accuracy", "top1")


def quality_tolerance(options: FitOptions, reference: Quality) -> float:
    """Validation qualities closer than this are a tie: one standard error of the dense teacher's validation
    accuracy (sqrt(p(1 - p) / n), about 3 of 335 documents on minilm-bbc) unless set."""
    if options.quality_tolerance is not None:
        return options.quality_tolerance
    if reference.metric in ACCURACY_METRICS and reference.examples:
        p = min(max(reference.value, 0.0), 1.0)
        return math.sqrt(p * (1 - p) / reference.examples)
    return 0.0


def best_meeting_budget(candidates: Any, tolerance: float) -> BuiltArtifact | None:
    """The candidate `fit` would choose now: among those meeting every budget, the ones within `tolerance` of
    the best validation quality are tied, and the least compressed of them (most parameters outside the
    embedding tables, then the full vocabulary) wins."""
    meeting = [c for c in candidates if c.meets_budget and c.validation_quality is not None]
    if not meeting:
        return None
    top = max(signed(c.validation_quality) for c in meeting)
    tied = [c for c in meeting if signed(c.validation_quality) >= top - tolerance]
    # a candidate left unbenchmarked could not beat the benchmarked one it ties with
    return max(tied, key=lambda c: (c.core_parameters, c.vocabulary_size is None, signed(c.validation_quality),
                                    c.benchmark is not None, -c.file_bytes))


def choose(candidates: list[BuiltArtifact], budget: Budget, reference: Quality,
            tolerance: float = 0.0) -> tuple[BuiltArtifact, list[str], list[str]]:
    """The best validation quality among candidates meeting every budget (ties within `tolerance` go to the
    least compressed); else the closest, with what binds."""
    best = best_meeting_budget(candidates, tolerance)
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



def format_value(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"
