"""A latency model fitted to the device's own measurements as they arrive: latency against matmul FLOPs.

Per recipe, p50 ≈ a + b·FLOPs by least squares once candidates at least `MIN_FITTED_SPAN` apart in FLOPs are
measured and the line rises with work; otherwise (one measurement, measurements of nearly the same work, or a
falling line) latency scales with FLOPs through the origin; before any measurement of a recipe, the ratio measured for
another recipe of the same runtime is borrowed (never across runtimes: LiteRT int8 ran at half ExecuTorch int8's
p50 on MiniLM here, docs/FINDINGS.md). Before any measurement of its runtime, the device profile's peak compute
and memory bandwidth give a roofline bound, max(FLOPs / peak, weight bytes / bandwidth): a lower bound on the real
latency, so a candidate it already puts over budget is safely skipped. The model only orders and skips
candidates; a real benchmark settles every candidate that is built.
"""

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from edgeprune.quantize.recipes import RECIPES

# what a prediction was based on, most informed first (LatencyModel.basis)
BASES = ("fitted", "proportional", "borrowed", "roofline", "none")
# a line is fitted only to measurements whose FLOPs span this ratio: two candidates a few heads apart differ by
# less work than a p50 varies run to run (±5 % here), and a line through them can say anything. On MiniLM, LiteRT
# int8 with FFN −25 % measured 2.37 ms and with 6 heads more removed 2.46 ms; the flat line through those two
# predicted every smaller candidate at 2.4 ms and closed the runtime's line under a 2.25 ms budget that a
# smaller candidate met at 1.34 ms (docs/FINDINGS.md).
MIN_FITTED_SPAN = 1.2


@dataclass
class LatencyModel:
    peak_gflops: float | None = None  # the device profile's peak compute
    bandwidth_gbs: float | None = None  # the device profile's memory bandwidth
    observations: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # recipe → [(flops, p50 ms)]

    def roofline_ms(self, flops: int, weight_bytes: int | None) -> float | None:
        bounds = []
        if self.peak_gflops:
            bounds.append(flops / (self.peak_gflops * 1e9) * 1e3)
        if self.bandwidth_gbs and weight_bytes:
            bounds.append(weight_bytes / (self.bandwidth_gbs * 1e9) * 1e3)
        return max(bounds) if bounds else None

    def observe(self, recipe: str, flops: int, p50_ms: float) -> None:
        points = self.observations.setdefault(recipe, [])
        if (flops, p50_ms) not in points:
            points.append((flops, p50_ms))

    def basis(self, recipe: str) -> str:
        """What `predict` for `recipe` rests on now: a line fitted to its measurements ("fitted"), their ratio
        through the origin ("proportional"), another recipe's ("borrowed"), the profile's roofline, or nothing."""
        points = self.observations.get(recipe)
        if points:
            return "fitted" if _line(points) is not None else "proportional"
        if self._borrowed(recipe):
            return "borrowed"
        return "roofline" if self.peak_gflops or self.bandwidth_gbs else "none"

    def predict(self, recipe: str, flops: int, weight_bytes: int | None = None) -> float | None:
        """Predicted p50 in ms; the roofline bound before any measurement; None when nothing is known."""
        points = self.observations.get(recipe) or self._borrowed(recipe)
        if not points:
            return self.roofline_ms(flops, weight_bytes)
        line = _line(points)
        if line is None:  # more work is never faster: noise must not invert the order, nor flatten it
            return sum(ms for _, ms in points) / sum(f for f, _ in points) * flops
        intercept, slope = line
        return intercept + slope * flops

    def lender(self, recipe: str) -> str | None:
        """The recipe whose measurements `recipe` borrows: the first measured of its runtime (any measured one for
        names not registered), or None."""
        runtime = _runtime(recipe)
        return next((name for name in self.observations if name != recipe and _runtime(name) == runtime), None)

    def _borrowed(self, recipe: str) -> list[tuple[int, float]] | None:
        lender = self.lender(recipe)
        return None if lender is None else self.observations[lender]


def _line(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least squares (intercept ms, slope ms per FLOP) through `points`, when they span enough work to fit one
    (`MIN_FITTED_SPAN`) and it rises with work; None otherwise."""
    flops = [f for f, _ in points]
    if min(flops) <= 0 or max(flops) < MIN_FITTED_SPAN * min(flops):
        return None
    mean_f = sum(flops) / len(points)
    mean_ms = sum(ms for _, ms in points) / len(points)
    slope = sum((f - mean_f) * (ms - mean_ms) for f, ms in points) / sum((f - mean_f) ** 2 for f in flops)
    return None if slope <= 0 else (mean_ms - slope * mean_f, slope)


def _runtime(recipe: str) -> str | None:
    return RECIPES.get(recipe).runtime if recipe in RECIPES.names() else None


@dataclass
class PredictionError:
    """How far the latency model's predictions, made before each benchmark, were from the measured p50."""

    count: int  # benchmarked candidates that had a prediction
    within_10_percent: float  # share of them predicted within ±10 % of the measured p50
    median_abs_percent: float | None
    p90_abs_percent: float | None
    by_basis: dict[str, int] = field(default_factory=dict)  # predictions per basis (BASES)

    def describe(self) -> str:
        if not self.count:
            return "no benchmarked candidate had a latency prediction"
        return (f"{self.within_10_percent:.0%} of {self.count} predictions within ±10 % of the measured p50 "
                f"(median error {self.median_abs_percent:.1f} %, p90 {self.p90_abs_percent:.1f} %)")


def prediction_error(pairs: Iterable[tuple[float, float]]) -> PredictionError:
    """From (predicted, measured) p50 pairs in ms: the relative errors' distribution."""
    errors = sorted(abs(predicted - measured) / measured * 100 for predicted, measured in pairs if measured > 0)
    if not errors:
        return PredictionError(0, 0.0, None, None)
    p90 = errors[min(len(errors) - 1, round(0.9 * (len(errors) - 1)))]
    return PredictionError(len(errors), sum(e <= 10 for e in errors) / len(errors), statistics.median(errors), p90)
