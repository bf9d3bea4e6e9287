"""A latency model fitted to the device's own measurements as they arrive: latency against matmul FLOPs.

Per recipe, p50 ≈ a + b·FLOPs by least squares once two candidates are measured; with one measurement,
latency scales with FLOPs through the origin; before any measurement of a recipe, the ratio measured for
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
BASES = ("fitted", "one point", "borrowed", "roofline", "none")


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
        """What `predict` for `recipe` rests on now: a line fitted to two or more of its measurements ("fitted"),
        one of them ("one point"), another recipe's ("borrowed"), the profile's roofline, or nothing."""
        points = self.observations.get(recipe)
        if points:
            return "fitted" if len({f for f, _ in points}) >= 2 else "one point"
        if self._borrowed(recipe):
            return "borrowed"
        return "roofline" if self.peak_gflops or self.bandwidth_gbs else "none"

    def predict(self, recipe: str, flops: int, weight_bytes: int | None = None) -> float | None:
        """Predicted p50 in ms; the roofline bound before any measurement; None when nothing is known."""
        points = self.observations.get(recipe) or self._borrowed(recipe)
        if not points:
            return self.roofline_ms(flops, weight_bytes)
        distinct = {f for f, _ in points}
        if len(distinct) < 2:
            ratio = sum(ms for _, ms in points) / sum(f for f, _ in points)
            return ratio * flops
        mean_f = sum(f for f, _ in points) / len(points)
        mean_ms = sum(ms for _, ms in points) / len(points)
        slope = sum((f - mean_f) * (ms - mean_ms) for f, ms in points) / sum((f - mean_f) ** 2 for f, _ in points)
        slope = max(slope, 0.0)  # more work is never faster; noise must not invert the order
        return mean_ms + slope * (flops - mean_f)


    def lender(self, recipe: str) -> str | None:
        """The recipe whose measurements `recipe` borrows: the first measured of its runtime (any measured one for
        names not registered), or None."""
        runtime = _runtime(recipe)
        return next((name for name in self.observations if name != recipe and _runtime(name) == runtime), None)

    def _borrowed(self, recipe: str) -> list[tuple[int, float]] | None:
        lender = self.lender(recipe)
        return None if lender is None else self.observations[lender]


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
