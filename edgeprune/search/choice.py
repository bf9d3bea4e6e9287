"""Which candidate a fit chooses, what stands in the way when none fits, and the quality/size/latency front."""

import math
from typing import Any

from edgeprune.quantize import RECIPES
from edgeprune.search.budget import CHECK_FLAGS, Budget, BudgetCheck
from edgeprune.search.options import FitOptions
from edgeprune.search.recovering import signed_value as signed
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
    """What would make it fit, from the values measured: the least each binding budget would need, rounded so that
    following it literally fits (limits up, quality floors down), never offering a recipe already tried."""
    suggestions = []
    checks: dict[str, list[BudgetCheck]] = {}
    for candidate in candidates:
        for check in candidate.checks:
            checks.setdefault(check.name, []).append(check)
    tried = {candidate.recipe.name for candidate in candidates}
    # the smallest 4-bit recipe (the last registered) of each runtime the fit built for that needs no calibration
    # inputs: ExecuTorch's int4, LiteRT's litert-int4; offered when not tried yet
    runtimes = {candidate.recipe.runtime for candidate in candidates}
    smallest = {recipe.runtime: recipe.name for recipe in RECIPES.members.values()
                if recipe.runtime in runtimes and recipe.linear == "int4" and not recipe.needs_calibration}
    untried = [recipe_name for recipe_name in smallest.values() if recipe_name not in tried]
    for name in binding:
        kind = checks[name][0].kind if name in checks else "quality"
        seen = [check.value for check in checks.get(name, []) if check.value is not None]
        flag = CHECK_FLAGS[kind]
        if kind == "size":
            smaller = f"needs a smaller recipe (e.g. 4-bit weights: --recipe {untried[0]}) or " if untried else ""
            suggestions.append(smaller + (f"raise {flag} to {_round_up(min(seen), 2)}" if seen else f"raise {flag}"))
        elif not seen:
            suggestions.append(f"{name}: no measured value; connect the device or drop the budget")
        elif kind == "latency":
            suggestions.append(f"raise {flag} to {_round_up(min(seen), 2)} (the fastest candidate measured)")
        elif kind == "memory":
            suggestions.append(f"raise {flag} to {_round_up(min(seen), 0)}")
        elif kind == "energy":
            suggestions.append(f"raise {flag} to {_round_up(min(seen), 2)}")
        elif kind == "ttft":
            suggestions.append(f"raise {flag} to {_round_up(min(seen), 0)} (the quickest candidate measured)")
        elif kind == "decode":
            suggestions.append(f"lower {flag} to {_round_down(max(seen), 1)} (the fastest candidate measured)")
        else:
            higher_is_better = name.startswith("min")
            best = max(seen) if higher_is_better else min(seen)
            value = _round_down(best, 4) if higher_is_better else _round_up(best, 4)
            suggestions.append(f"relax {flag} to {value} (the best candidate measured)")
    return suggestions


def _round_up(value: float, digits: int) -> float | int:
    scaled = math.ceil(round(value * 10**digits, 6)) / 10**digits
    return int(scaled) if digits == 0 else scaled


def _round_down(value: float, digits: int) -> float:
    return math.floor(round(value * 10**digits, 6)) / 10**digits


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


def format_against(value: float | None, limit: float | None) -> tuple[str, str]:
    """A value and its limit with two decimals, or as many more (up to six) as it takes for different numbers to
    print differently: a 5,003,540-byte file is "5.004 > 5.000 MB", not "5.00 > 5.00 MB"."""
    if value is None or limit is None or value == limit:
        return format_value(value), format_value(limit)
    for decimals in range(2, 7):
        shown = f"{value:.{decimals}f}", f"{limit:.{decimals}f}"
        if shown[0] != shown[1]:
            return shown
    return shown
