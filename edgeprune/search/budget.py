"""Budgets a fitted artifact must meet, and the check of one candidate against them."""

import math
import re
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from edgeprune.errors import UserInputError

if TYPE_CHECKING:
    from edgeprune.bench.benchmark import BenchmarkResult
    from edgeprune.devices import DeviceProfile
    from edgeprune.tasks.base import Quality

PERCENTILES = (50, 90, 99)
# what max_memory_mb limits: "artifact", the resident memory that loading and running the artifact adds to its
# process (peak less the process before the program loads: what an app pays), or "process", the benchmark
# process's whole peak (a Python runner's includes the interpreter and the runtime's import: 224 MB with torch
# here before an ExecuTorch program loads, docs/FINDINGS.md)
MEMORY_MEASURES = ("artifact", "process")
RELATIVE_QUALITY = re.compile(r"^-(\d+(?:\.\d+)?)%$")


CHECK_FLAGS = {"size": "--max-mb", "latency": "--max-latency-ms", "memory": "--max-memory-mb",
               "energy": "--max-energy-mj", "decode": "--min-decode-tps", "ttft": "--max-ttft-ms",
               "quality": "--min-quality"}
# to tell an older result's check by its name (newer checks carry their kind)
CHECK_NAME_PREFIXES = {"size": ("size",), "latency": ("latency",), "memory": ("peak memory", "memory"),
                       "energy": ("energy",)}


@dataclass(frozen=True)
class BudgetCheck:
    """One budget against one candidate: the limit, the value and where the value came from."""

    name: str
    limit: float
    value: float | None  # None: not known (e.g. no energy figure)
    unit: str
    passed: bool
    source: str  # "measured", "estimated", "predicted" or "unknown"
    kind: str = ""  # a CHECK_FLAGS key ("size", "latency", ..., "quality"); "": inferred from the name (older results)

    def __post_init__(self) -> None:
        if not self.kind:  # frozen: set once, here
            inferred = (kind for kind, prefixes in CHECK_NAME_PREFIXES.items() if self.name.startswith(prefixes))
            object.__setattr__(self, "kind", next(inferred, "quality"))
        if self.kind not in CHECK_FLAGS:
            raise ValueError(f"budget check kind must be one of {sorted(CHECK_FLAGS)}, got {self.kind!r}")

    @property
    def flag(self) -> str:
        """The `fit` flag that sets this budget."""
        return CHECK_FLAGS[self.kind]

    @property
    def is_resource(self) -> bool:
        """A budget on what the artifact costs (not on its quality)."""
        return self.kind != "quality"


@dataclass(frozen=True)
class Budget:
    max_mb: float | None = None  # artifact file size, in MB (10^6 bytes)
    max_memory_mb: float | None = None  # resident memory in MB, as `memory_measure` says
    max_latency_ms: float | None = None  # at `latency_percentile`, batch 1
    latency_percentile: int = 50
    max_energy_mj: float | None = None  # per inference
    min_quality: float | str | None = None  # absolute (in the task's metric) or relative to the dense teacher: "-1%"
    memory_measure: str = "artifact"  # MEMORY_MEASURES
    # a generator's decode speed: one token after a prompt of --max-length tokens, in tokens/s (1 / median step)
    min_decode_tps: float | None = None
    max_ttft_ms: float | None = None  # a generator's time to first token for its prompt (--prompt-tokens), p50

    def __post_init__(self) -> None:
        for name in ("max_mb", "max_memory_mb", "max_latency_ms", "max_energy_mj", "min_decode_tps", "max_ttft_ms"):
            value = getattr(self, name)
            if value is None:
                continue
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            if not is_number or not math.isfinite(value) or value <= 0:
                raise UserInputError(f"{name} must be a positive number, got {value!r}")
        if self.memory_measure not in MEMORY_MEASURES:
            raise UserInputError(f"memory measure must be one of {', '.join(MEMORY_MEASURES)}, got "
                                 f"{self.memory_measure!r}")
        if self.latency_percentile not in PERCENTILES:
            raise UserInputError(f"latency percentile must be one of {PERCENTILES}, got {self.latency_percentile!r}")
        if isinstance(self.min_quality, str) and not RELATIVE_QUALITY.match(self.min_quality.strip()):
            raise UserInputError(f"min quality {self.min_quality!r} must be a number (e.g. 0.95) or a drop relative "
                                 "to the dense teacher (e.g. -1%)")
        if isinstance(self.min_quality, bool) or (self.min_quality is not None and not isinstance(
                self.min_quality, int | float | str)):
            raise UserInputError(f"min quality must be a number or a relative drop like -1%, got {self.min_quality!r}")
        if isinstance(self.min_quality, int | float) and not math.isfinite(self.min_quality):
            raise UserInputError(f"min quality must be a finite number, got {self.min_quality!r}")

    @classmethod
    def for_device(cls, profile: "DeviceProfile", **overrides: Any) -> "Budget":
        """The profile's default budgets, with every override that is not None taking precedence."""
        values = {"max_mb": profile.max_mb, "max_memory_mb": profile.max_memory_mb,
                  "max_latency_ms": profile.max_latency_ms, "max_energy_mj": profile.max_energy_mj,
                  "min_decode_tps": profile.min_decode_tps, "max_ttft_ms": profile.max_ttft_ms}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def describe(self) -> str:
        """The limits set, for a person: "max 40 MB, p50 under 25 ms"; "no limits" when none is."""
        parts = [f"max {self.max_mb:g} MB" if self.max_mb is not None else "",
                 f"{self.memory_measure} memory under {self.max_memory_mb:g} MB" if self.max_memory_mb is not None
                 else "",
                 f"p{self.latency_percentile} under {self.max_latency_ms:g} ms" if self.max_latency_ms is not None
                 else "", f"energy under {self.max_energy_mj:g} mJ" if self.max_energy_mj is not None else "",
                 f"decode at least {self.min_decode_tps:g} tokens/s" if self.min_decode_tps is not None else "",
                 f"first token within {self.max_ttft_ms:g} ms" if self.max_ttft_ms is not None else "",
                 f"quality at least {self.min_quality}" if self.min_quality is not None else ""]
        return ", ".join(p for p in parts if p) or "no limits"

    def set_limits(self) -> list[str]:
        return [f.name for f in fields(self) if f.name not in ("latency_percentile", "memory_measure")
                and getattr(self, f.name) is not None]

    def needs_benchmark(self) -> bool:
        return any(v is not None for v in (self.max_memory_mb, self.max_latency_ms, self.max_energy_mj,
                                           self.min_decode_tps, self.max_ttft_ms))

    def size_fits(self, file_bytes: int) -> bool:
        return self.max_mb is None or file_bytes <= self.max_mb * 1e6

    def quality_floor(self, reference: "Quality") -> float | None:
        """The quality a candidate must reach, in the task's metric (a ceiling when lower is better)."""
        if self.min_quality is None:
            return None
        if isinstance(self.min_quality, str):
            fraction = float(RELATIVE_QUALITY.match(self.min_quality.strip()).group(1)) / 100
            change = -fraction if reference.higher_is_better else fraction
            return reference.value * (1 + change)
        return float(self.min_quality)

    def memory(self, benchmark: "BenchmarkResult") -> float | None:
        """The memory `max_memory_mb` limits, in MB: what the artifact adds to its process, or the process's peak
        (`memory_measure`). A native benchmark tool has no interpreter to leave out: its whole peak is the
        artifact's cost, and counts as both. A generator's KV cache counts at its full context: the slots the timed
        calls did not write are added."""
        if benchmark.peak_rss_mb is None:
            return None
        cache = benchmark.kv_unwritten_mb or 0.0  # a generator's cache at its full context (see BenchmarkResult)
        if self.memory_measure == "process" or benchmark.rss_before_load_mb is None:
            return benchmark.peak_rss_mb + cache
        return max(benchmark.peak_rss_mb - benchmark.rss_before_load_mb, 0.0) + cache

    def memory_check_name(self) -> str:
        return "peak memory of the process" if self.memory_measure == "process" else "memory the artifact adds"

    def latency(self, benchmark: "BenchmarkResult") -> float:
        return {50: benchmark.p50_ms, 90: benchmark.p90_ms, 99: benchmark.p99_ms}[self.latency_percentile]

    def check(self, file_bytes: int, benchmark: "BenchmarkResult | None", quality: "Quality | None",
              reference: "Quality | None") -> list[BudgetCheck]:
        """Every set budget against one candidate. Unknown values fail: nothing passes unmeasured."""
        checks = []
        if self.max_mb is not None:
            checks.append(BudgetCheck("size", self.max_mb, file_bytes / 1e6, "MB", self.size_fits(file_bytes),
                                      "measured", "size"))
        source = "unknown" if benchmark is None else ("measured" if benchmark.measured else "estimated")
        if self.max_latency_ms is not None:
            value = None if benchmark is None else self.latency(benchmark)
            checks.append(BudgetCheck(f"latency p{self.latency_percentile}", self.max_latency_ms, value, "ms",
                                      value is not None and value <= self.max_latency_ms, source, "latency"))
        if self.max_memory_mb is not None:
            value = None if benchmark is None else self.memory(benchmark)
            checks.append(BudgetCheck(self.memory_check_name(), self.max_memory_mb, value, "MB",
                                      value is not None and value <= self.max_memory_mb, source, "memory"))
        if self.max_energy_mj is not None:
            value = None if benchmark is None else getattr(benchmark, "energy_mj_per_inference", None)
            energy_source = getattr(benchmark, "energy_source", None) or source
            checks.append(BudgetCheck("energy per inference", self.max_energy_mj, value, "mJ",
                                      value is not None and value <= self.max_energy_mj, str(energy_source),
                                      "energy"))
        if self.min_decode_tps is not None:
            value = None if benchmark is None else benchmark.decode_tokens_per_s
            checks.append(BudgetCheck("decode speed", self.min_decode_tps, value, "tokens/s",
                                      value is not None and value >= self.min_decode_tps, source, "decode"))
        if self.max_ttft_ms is not None:
            value = None if benchmark is None else benchmark.ttft_p50_ms
            checks.append(BudgetCheck("time to first token", self.max_ttft_ms, value, "ms",
                                      value is not None and value <= self.max_ttft_ms, source, "ttft"))
        floor = None if reference is None else self.quality_floor(reference)
        if floor is not None:
            value = None if quality is None else quality.value
            better = reference.higher_is_better
            passed = value is not None and (value >= floor if better else value <= floor)
            checks.append(BudgetCheck(f"{'min' if better else 'max'} {reference.metric} (validation)", floor, value,
                                      "", passed, "measured", "quality"))
        return checks
